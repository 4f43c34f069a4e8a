// SHA-256 (FIPS 180-4), used to verify dataset files and checkpoints.
//
// Thread safety: a Sha256 object is not thread-safe; the free functions are.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace asgd {

class Sha256 {
 public:
  Sha256();
  void Update(std::span<const uint8_t> data);
  void Update(std::string_view data);
  // Finishes and returns the digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> Finish();
  // Finishes and returns the digest as 64 lowercase hex digits.
  std::string FinishHex();

 private:
  void Block(const uint8_t* p);

  uint32_t h_[8];
  uint8_t buf_[64];
  std::size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string Sha256Hex(std::string_view data);
// Hashes a whole file. Throws DataError if it cannot be read.
std::string Sha256File(const std::string& path);

}  // namespace asgd
