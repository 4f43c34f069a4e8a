// Files: whole-file reads and crash-safe writes.
//
// WriteFileAtomic writes to a temporary file in the same directory, fsyncs it, renames it
// over the target and fsyncs the directory, so a reader (or a crash) sees either the old
// file or the new one, never a half-written one. Downloads, checkpoints and run records
// all go through it.
#pragma once

#include <string>
#include <string_view>

namespace asgd {

// Throws DataError if the file cannot be read.
std::string ReadFile(const std::string& path);
// Throws IoError on failure; the target is then unchanged and no temporary is left.
// mode: the new file's permission bits (less the umask), e.g. 0600 for a secret.
void WriteFileAtomic(const std::string& path, std::string_view contents, int mode = 0644);
// A temporary path next to `path` for writers that stream (then CommitTempFile).
std::string TempPathFor(const std::string& path);
// fsyncs tmp, renames it to path and fsyncs the directory. Throws IoError.
void CommitTempFile(const std::string& tmp, const std::string& path);
// Creates a directory and its parents. Throws IoError.
void MakeDirs(const std::string& path);
bool FileExists(const std::string& path);
bool IsDirectory(const std::string& path);

}  // namespace asgd
