// MD5, for checking downloads against the digests their publishers give (CIFAR-10's
// authors publish an MD5 of their archive). Not for anything that needs collision
// resistance: asgd checks a SHA-256 as well wherever one is known.
//
// A thin wrapper over OpenSSL's libcrypto (EVP), kept out of this header.
//
// Thread safety: an Md5 object is not thread-safe; the free functions are.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace asgd::datasets {

class Md5 {
 public:
  // Throws IoError if libcrypto cannot provide MD5 (e.g. a FIPS-only configuration).
  Md5();
  ~Md5();
  Md5(const Md5&) = delete;
  Md5& operator=(const Md5&) = delete;

  void Update(std::span<const uint8_t> data);
  void Update(std::string_view data);
  // Finishes and returns the digest as 32 lowercase hex digits; the object must not be
  // updated afterwards.
  std::string FinishHex();

 private:
  void* ctx_ = nullptr;  // EVP_MD_CTX
};

// The MD5 of bytes in memory, as 32 lowercase hex digits.
std::string Md5Hex(std::string_view data);

}  // namespace asgd::datasets
