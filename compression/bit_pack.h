// Bit packing of fixed-width codes into 64-bit words, for the quantizing compressors.
//
// Layout: codes of `bits` bits each (1 <= bits <= 32) form one bit stream; code i holds
// stream bits [i * bits, (i + 1) * bits), low bit first, and stream bit j is bit j % 64 of
// word j / 64. A code may straddle two words. The words travel little-endian; the unused
// high bits of the last word are zero (a decoder refuses an encoding where they are not,
// so each vector has exactly one packed form).
//
// Thread safety: writers and readers are plain values used by one thread.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
// pext / pdep where BMI2 has them fast: not on AMD before Zen 3, which microcodes them.
#if defined(__BMI2__) && !defined(__znver1__) && !defined(__znver2__) && !defined(__bdver4__)
#define ASGD_FAST_PEXT 1
#include <immintrin.h>
#else
#define ASGD_FAST_PEXT 0
#endif

namespace asgd::compression {

static_assert(std::endian::native == std::endian::little,
              "the packed words are sent as they lie in memory: little-endian hosts only");

inline constexpr int kMaxCodeBits = 32;

// The low B bits set, and that in each of the 8 bytes of a word.
template <int B>
inline constexpr uint64_t kMask = (uint64_t{1} << B) - 1;
template <int B>
inline constexpr uint64_t kByteMask = kMask<B> * 0x0101010101010101ULL;

// Words that hold n codes of `bits` bits. REQUIRES: 1 <= bits <= kMaxCodeBits.
constexpr std::size_t PackedWords(std::size_t n, int bits) {
  const std::size_t total = n * static_cast<std::size_t>(bits);
  return (total + 63) / 64;
}

// Appends codes to a word array. REQUIRES: the array has PackedWords(n, bits) words for
// the n codes put; each code < 2^bits. Call Finish() after the last code.
class BitWriter {
 public:
  BitWriter(uint64_t* words, int bits) : out_(words), bits_(bits) {}
  void Put(uint64_t code) {
    acc_ |= code << fill_;
    fill_ += bits_;
    if (fill_ >= 64) {
      *out_++ = acc_;
      fill_ -= 64;
      acc_ = fill_ > 0 ? code >> (bits_ - fill_) : 0;
    }
  }
  // Writes the partial last word (its unused bits zero).
  void Finish() {
    if (fill_ > 0) *out_++ = acc_;
    acc_ = 0;
    fill_ = 0;
  }

 private:
  uint64_t* out_;
  int bits_;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

// Reads codes back from packed bytes (any alignment). REQUIRES: the bytes hold at least
// PackedWords(n, bits) words for the n codes read (the decoders check the frame size
// first).
class BitReader {
 public:
  BitReader(const std::byte* bytes, int bits)
      : in_(bytes), bits_(bits), mask_(bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1) {}
  uint64_t Get() {
    if (avail_ >= bits_) {
      const uint64_t v = acc_ & mask_;
      acc_ >>= bits_;
      avail_ -= bits_;
      return v;
    }
    uint64_t w;
    std::memcpy(&w, in_, sizeof(w));
    in_ += sizeof(w);
    const uint64_t v = (acc_ | (w << avail_)) & mask_;  // avail_ < bits_ <= 32
    const int used = bits_ - avail_;                    // in [1, bits_]
    acc_ = w >> used;
    avail_ = 64 - used;
    return v;
  }
  // True when the stream bits after the last code read (up to the end of its word) are
  // all zero.
  bool RestIsZero() const { return acc_ == 0; }

 private:
  const std::byte* in_;
  int bits_;
  uint64_t mask_;
  uint64_t acc_ = 0;
  int avail_ = 0;
};

// Block forms for widths 1..8, the quantizers' fast path. 64 codes of B bits fill exactly B
// words, so a vector's blocks of 64 codes start on word boundaries, and within a block each
// group of 8 codes fills exactly B bytes. The codes are one per byte. With fast BMI2 a group
// is one pext / pdep; otherwise shifts. Both give the layout above bit for bit.
inline constexpr int kBlockCodes = 64;

// Packs codes[0..63] (each < 2^B) into the B words (8 * B bytes) at out, any alignment.
template <int B>
void PackBlock(const uint8_t* codes, std::byte* out) {
  static_assert(B >= 1 && B <= 8);
  for (int g = 0; g < 8; ++g) {
    uint64_t v = 0;
#if ASGD_FAST_PEXT
    std::memcpy(&v, codes + 8 * g, 8);
    v = _pext_u64(v, kByteMask<B>);
#else
    for (int j = 0; j < 8; ++j) v |= static_cast<uint64_t>(codes[8 * g + j]) << (j * B);
#endif
    // Whole words where they stay inside the block (the next group overwrites the extra
    // bytes), else exactly B bytes.
    if (g * B + 8 <= 8 * B) {
      std::memcpy(out + g * B, &v, 8);
    } else {
      std::memcpy(out + g * B, &v, B);
    }
  }
}

// Unpacks the 64 codes of B bits in the B words at in (any alignment) into codes[0..63].
// REQUIRES: in is readable for 8 * B + 8 bytes when padded is true (the block is not the
// frame's last), else for 8 * B bytes.
template <int B>
void UnpackBlock(const std::byte* in, bool padded, uint8_t* codes) {
  static_assert(B >= 1 && B <= 8);
  unsigned char buf[8 * B + 8];
  const unsigned char* src = reinterpret_cast<const unsigned char*>(in);
  if (!padded) {
    std::memcpy(buf, in, 8 * B);
    std::memset(buf + 8 * B, 0, 8);
    src = buf;
  }
  for (int g = 0; g < 8; ++g) {
    uint64_t v;
    std::memcpy(&v, src + g * B, 8);
#if ASGD_FAST_PEXT
    v = _pdep_u64(v, kByteMask<B>);
    std::memcpy(codes + 8 * g, &v, 8);
#else
    for (int j = 0; j < 8; ++j) codes[8 * g + j] = static_cast<uint8_t>((v >> (j * B)) & kMask<B>);
#endif
  }
}

// Whole-array forms. PackBits REQUIRES words.size() == PackedWords(codes.size(), bits) and
// every code < 2^bits (checked). UnpackBits returns false, leaving codes partly written,
// when bytes is not exactly PackedWords(codes.size(), bits) words or the padding bits are
// not zero.
void PackBits(std::span<const uint32_t> codes, int bits, std::span<uint64_t> words);
bool UnpackBits(std::span<const std::byte> bytes, int bits, std::span<uint32_t> codes);

}  // namespace asgd::compression
