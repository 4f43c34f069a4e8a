#include "datasets/content.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <vector>

#include <sys/stat.h>
#include <zlib.h>

#include "core/error.h"

namespace asgd::datasets {
namespace {

gzFile Gz(void* f) { return static_cast<gzFile>(f); }

// gzread takes an unsigned int length; larger requests are split.
constexpr std::size_t kMaxGzRead = std::size_t{1} << 30;

// Deflate's largest expansion: a 258-byte match coded in 2 bits (zlib's FAQ: "the limit is
// 1032:1"). A gzip file's content is at most this many times the file.
constexpr uint64_t kMaxDeflateRatio = 1032;

}  // namespace

ContentReader::ContentReader(std::string path) : path_(std::move(path)) {
  // The stored size bounds the content (MaxRemaining); only a regular file has one.
  struct stat st {};
  if (stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) file_size_ = st.st_size;
  errno = 0;
  gzFile f = gzopen(path_.c_str(), "rb");
  if (f == nullptr) {
    std::string why = errno != 0 ? std::strerror(errno) : "out of memory";
    throw DataError(path_, "cannot open: " + why);
  }
  // Fewer, larger reads than with zlib's default 8 KiB buffer.
  gzbuffer(f, 1 << 17);
  file_ = f;
}

ContentReader::ContentReader(std::string name, std::span<const uint8_t> content)
    : path_(std::move(name)), memory_(content) {}

ContentReader::~ContentReader() {
  if (file_ != nullptr) gzclose(Gz(file_));
}

std::size_t ContentReader::RawRead(uint8_t* out, std::size_t len) {
  if (file_ == nullptr) {
    const std::size_t n = std::min(len, memory_.size() - memory_at_);
    if (n > 0) std::memcpy(out, memory_.data() + memory_at_, n);
    memory_at_ += n;
    hash_.Update(std::span<const uint8_t>(out, n));
    return n;
  }
  std::size_t got = 0;
  while (got < len) {
    auto want = static_cast<unsigned>(std::min(len - got, kMaxGzRead));
    int n = gzread(Gz(file_), out + got, want);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      if (static_cast<unsigned>(n) == want) continue;
    }
    // A short read is either the end of the content or an error; zlib tells which. A
    // gzip stream cut short is reported as Z_BUF_ERROR ("unexpected end of file") while
    // still returning the bytes it had, so the error must be checked even when n > 0.
    int errnum = Z_OK;
    const char* msg = gzerror(Gz(file_), &errnum);
    if (errnum == Z_ERRNO) {
      throw DataError(path_, std::string("read error: ") + std::strerror(errno));
    }
    if (errnum == Z_BUF_ERROR) {
      throw DataError(
          path_, "the gzip stream is truncated (" + std::string(msg) + "): the file is incomplete");
    }
    if (errnum != Z_OK || n < 0) {
      throw DataError(path_, "corrupt gzip stream (" + std::string(msg != nullptr ? msg : "?") +
                                 "): the file is damaged");
    }
    break;  // end of the content
  }
  hash_.Update(std::span<const uint8_t>(out, got));
  return got;
}

std::size_t ContentReader::Read(std::span<uint8_t> out) {
  if (out.empty()) return 0;
  std::size_t got = 0;
  if (has_peeked_) {
    out[0] = peeked_;
    has_peeked_ = false;
    got = 1;
  }
  got += RawRead(out.data() + got, out.size() - got);
  bytes_read_ += got;
  return got;
}

void ContentReader::ReadAll(std::string* out) {
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  for (;;) {
    std::size_t old = out->size();
    out->resize(old + kChunk);
    std::size_t n = Read(std::span<uint8_t>(reinterpret_cast<uint8_t*>(out->data() + old), kChunk));
    out->resize(old + n);
    if (n < kChunk) return;
  }
}

bool ContentReader::AtEnd() {
  if (has_peeked_) return false;
  if (RawRead(&peeked_, 1) == 1) {
    has_peeked_ = true;
    return false;
  }
  return true;
}

uint64_t ContentReader::MaxRemaining() {
  // bytes_read_ counts what Read returned; a peeked byte is not in it, so it stays in what
  // remains.
  if (file_ == nullptr) return memory_.size() - bytes_read_;
  if (file_size_ < 0) return std::numeric_limits<uint64_t>::max();
  const auto stored = static_cast<uint64_t>(file_size_);
  if (gzdirect(Gz(file_)) == 1) return stored > bytes_read_ ? stored - bytes_read_ : 0;
  if (stored > std::numeric_limits<uint64_t>::max() / kMaxDeflateRatio) {
    return std::numeric_limits<uint64_t>::max();
  }
  return stored * kMaxDeflateRatio;
}

std::string ContentReader::FinishHex() {
  std::vector<uint8_t> scratch(std::size_t{1} << 16);
  while (Read(scratch) > 0) {
  }
  return hash_.FinishHex();
}

void ContentReader::Verify(const ContentCheck& check) {
  std::string found = FinishHex();
  if (check.sha256.empty()) return;
  if (found != check.sha256) {
    std::string what = "sha256 mismatch: expected " + check.sha256 + ", found " + found +
                       " (of the decompressed content)";
    if (!check.hint.empty()) what += "; " + check.hint;
    throw DataError(path_, what);
  }
}

std::string ContentSha256(const std::string& path) {
  ContentReader reader(path);
  return reader.FinishHex();
}

}  // namespace asgd::datasets
