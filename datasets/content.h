// Reading a data file's content: gzip-compressed or plain, hashed as it is read.
//
// Every reader in datasets/ goes through ContentReader, so a file may be stored as
// distributed (".gz") or gunzipped, and its checksum is always taken over the
// decompressed content. That makes one digest per file valid for the official download,
// for re-compressed copies (Debian's packages rewrite the gzip headers) and for
// gunzipped copies alike, and it costs no second pass over the file.
//
// A ContentReader can also read content already in memory (not compressed), so that the
// readers' parsing code can be run on bytes without a file (tests, fuzz targets).
//
// Errors: a file that cannot be opened, a corrupt or truncated gzip stream and a checksum
// mismatch are DataError naming the file.
//
// Thread safety: a ContentReader is not thread-safe; the free functions are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/sha256.h"

namespace asgd::datasets {

// What a file's decompressed content must hash to.
struct ContentCheck {
  // SHA-256 of the decompressed content as 64 lowercase hex digits; "" means no check.
  std::string sha256;
  // What the user should do about a mismatch, appended to the error message, e.g.
  // "re-fetch with `asgd data fetch mnist`, or set [data] verify = false".
  std::string hint;
};

class ContentReader {
 public:
  // Opens path (gzip or plain; zlib detects which). Throws DataError if it cannot.
  explicit ContentReader(std::string path);
  // Reads `content`, already in memory and taken as it is (no gzip detection); `name`
  // stands for the path in messages. REQUIRES: content outlives the reader.
  ContentReader(std::string name, std::span<const uint8_t> content);
  ~ContentReader();
  ContentReader(const ContentReader&) = delete;
  ContentReader& operator=(const ContentReader&) = delete;

  // Reads up to out.size() bytes, fewer only at the end of the content. Returns the
  // number read (0 at the end). Throws DataError on a read error or a corrupt or
  // truncated gzip stream.
  std::size_t Read(std::span<uint8_t> out);
  // Reads the rest of the content and appends it to *out.
  void ReadAll(std::string* out);
  // True when the content has no bytes left (reads ahead one byte if needed).
  bool AtEnd();
  // An upper bound on the content bytes not yet read, known without reading them: exact
  // for content in memory and for a plain file; for a gzip file 1032 × its size (deflate
  // expands at most 1032:1); UINT64_MAX when the file's size is unknown (a pipe). Lets a
  // reader refuse a header that claims more than the file can hold before allocating.
  uint64_t MaxRemaining();

  // Bytes of content read so far.
  uint64_t bytes_read() const { return bytes_read_; }
  const std::string& path() const { return path_; }

  // Reads whatever is left and returns the SHA-256 of the whole content. Call at most
  // once, and read nothing afterwards.
  std::string FinishHex();
  // FinishHex, then compares the digest with check.sha256 (no check when it is empty).
  // Throws DataError on a mismatch:
  //   "data: PATH: sha256 mismatch: expected X, found Y (of the decompressed content); HINT"
  void Verify(const ContentCheck& check);

 private:
  // Reads from zlib into out and hashes what it got; fewer than len bytes only at the end.
  std::size_t RawRead(uint8_t* out, std::size_t len);

  std::string path_;
  void* file_ = nullptr;  // gzFile; kept opaque so this header does not include zlib.h
  int64_t file_size_ = -1;  // of the file as stored; -1 if unknown
  // Content in memory (when file_ is null) and how much of it RawRead has consumed.
  std::span<const uint8_t> memory_;
  std::size_t memory_at_ = 0;
  Sha256 hash_;
  uint64_t bytes_read_ = 0;
  bool has_peeked_ = false;
  uint8_t peeked_ = 0;
};

// The digest of a file's decompressed content (64 lowercase hex digits).
// Throws DataError if it cannot be read.
std::string ContentSha256(const std::string& path);

}  // namespace asgd::datasets
