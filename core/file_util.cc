#include "core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace asgd {
namespace {

std::string Errno() { return std::strerror(errno); }

void FsyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw IoError("cannot open " + path + " to sync: " + Errno());
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  if (rc != 0) throw IoError("fsync " + path + ": " + std::strerror(saved));
}

}  // namespace

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path, "cannot open: " + Errno());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw DataError(path, "read error");
  return ss.str();
}

std::string TempPathFor(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

void CommitTempFile(const std::string& tmp, const std::string& path) {
  try {
    FsyncPath(tmp, false);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = Errno();
    ::unlink(tmp.c_str());
    throw IoError("cannot rename " + tmp + " to " + path + ": " + err);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  FsyncPath(dir.empty() ? "." : dir, true);
}

void WriteFileAtomic(const std::string& path, std::string_view contents, int mode) {
  std::string tmp = TempPathFor(path);
  // The temporary has its final mode from the start: a secret is never readable by others,
  // not even before the rename.
  int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) throw IoError("cannot create " + tmp + ": " + Errno());
  const char* p = contents.data();
  std::size_t left = contents.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = Errno();
      ::close(fd);
      ::unlink(tmp.c_str());
      throw IoError("cannot write " + tmp + ": " + err);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    std::string err = Errno();
    ::unlink(tmp.c_str());
    throw IoError("cannot close " + tmp + ": " + err);
  }
  CommitTempFile(tmp, path);
}

void MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw IoError("cannot create directory " + path + ": " + ec.message());
}

bool FileExists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace asgd
