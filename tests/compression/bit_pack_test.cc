#include "compression/bit_pack.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"

namespace asgd::compression {
namespace {

std::vector<uint32_t> RandomCodes(std::size_t n, int bits, Rng& rng) {
  std::vector<uint32_t> codes(n);
  const uint64_t mask = bits == 32 ? 0xffffffffu : (uint64_t{1} << bits) - 1;
  for (auto& c : codes) c = static_cast<uint32_t>(rng.NextU64() & mask);
  return codes;
}

std::span<const std::byte> Bytes(const std::vector<uint64_t>& words) {
  return std::as_bytes(std::span<const uint64_t>(words));
}

// Every length from 0 to 3 words' worth of codes, so every tail position is hit, and
// widths that divide 64, do not, and straddle words.
TEST(BitPack, RoundTripsEveryLengthAndWidth) {
  Rng rng(17);
  for (int bits : {1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 32}) {
    for (std::size_t n = 0; n <= 3 * 64 + 1; ++n) {
      const std::vector<uint32_t> codes = RandomCodes(n, bits, rng);
      std::vector<uint64_t> words(PackedWords(n, bits), ~uint64_t{0});
      PackBits(codes, bits, words);
      std::vector<uint32_t> back(n, 0xdeadbeef);
      ASSERT_TRUE(UnpackBits(Bytes(words), bits, back)) << "bits " << bits << " n " << n;
      ASSERT_EQ(back, codes) << "bits " << bits << " n " << n;
    }
  }
}

// PackBlock / UnpackBlock (the quantizers' path for widths up to 8) against PackBits /
// UnpackBits, block by block, with the 8 bytes after a block readable or not.
template <int B>
void BlockMatchesStream(Rng& rng) {
  for (int round = 0; round < 50; ++round) {
    const std::vector<uint32_t> codes = RandomCodes(3 * kBlockCodes, B, rng);
    std::vector<uint64_t> words(PackedWords(codes.size(), B));
    PackBits(codes, B, words);
    std::vector<std::byte> packed(words.size() * 8, std::byte{0xa5});
    for (int b = 0; b < 3; ++b) {
      uint8_t block[kBlockCodes];
      for (int k = 0; k < kBlockCodes; ++k) block[k] = static_cast<uint8_t>(codes[b * 64 + k]);
      PackBlock<B>(block, packed.data() + b * 8 * B);
    }
    ASSERT_EQ(std::memcmp(packed.data(), words.data(), packed.size()), 0) << "bits " << B;
    for (int b = 0; b < 3; ++b) {
      uint8_t block[kBlockCodes];
      UnpackBlock<B>(packed.data() + b * 8 * B, b < 2, block);
      for (int k = 0; k < kBlockCodes; ++k) ASSERT_EQ(block[k], codes[b * 64 + k]) << "bits " << B;
    }
  }
}

TEST(BitPack, BlocksMatchTheStreamForEveryWidthUpTo8) {
  Rng rng(23);
  BlockMatchesStream<1>(rng);
  BlockMatchesStream<2>(rng);
  BlockMatchesStream<3>(rng);
  BlockMatchesStream<4>(rng);
  BlockMatchesStream<5>(rng);
  BlockMatchesStream<6>(rng);
  BlockMatchesStream<7>(rng);
  BlockMatchesStream<8>(rng);
}

TEST(BitPack, WordCountIsTheCeilingOfTheBits) {
  EXPECT_EQ(PackedWords(0, 5), 0u);
  EXPECT_EQ(PackedWords(64, 1), 1u);
  EXPECT_EQ(PackedWords(65, 1), 2u);
  EXPECT_EQ(PackedWords(13, 5), 2u);  // 65 bits
  EXPECT_EQ(PackedWords(2, 32), 1u);
}

TEST(BitPack, RefusesNonZeroPaddingAndWrongSizes) {
  std::vector<uint32_t> codes = {1, 2, 3};
  std::vector<uint64_t> words(PackedWords(codes.size(), 3));
  PackBits(codes, 3, words);
  std::vector<uint32_t> back(3);
  ASSERT_TRUE(UnpackBits(Bytes(words), 3, back));
  words[0] |= uint64_t{1} << 9;  // first padding bit
  EXPECT_FALSE(UnpackBits(Bytes(words), 3, back));
  words[0] &= ~(uint64_t{1} << 9);
  std::vector<uint64_t> longer = {words[0], 0};
  EXPECT_FALSE(UnpackBits(Bytes(longer), 3, back));
  EXPECT_FALSE(UnpackBits(Bytes(words).first(7), 3, back));
}

TEST(BitPack, ReaderTakesUnalignedBytes) {
  Rng rng(3);
  const std::vector<uint32_t> codes = RandomCodes(100, 7, rng);
  std::vector<uint64_t> words(PackedWords(codes.size(), 7));
  PackBits(codes, 7, words);
  std::vector<std::byte> shifted(words.size() * 8 + 1);
  std::memcpy(shifted.data() + 1, words.data(), words.size() * 8);
  std::vector<uint32_t> back(codes.size());
  ASSERT_TRUE(UnpackBits(std::span<const std::byte>(shifted).subspan(1), 7, back));
  EXPECT_EQ(back, codes);
}

}  // namespace
}  // namespace asgd::compression
