// Block drivers shared by the stochastic quantizers (qsgd.cc, terngrad.cc): a vector is
// handled in blocks of kBlockCodes = 64 elements, each with 64 draws of a LaneRng
// (lane_rng.h), so that the draws, the codes and the packing of a block are each one
// vectorisable loop. Codes of up to 8 bits are packed and unpacked a block at a time
// (bit_pack.h, PackBlock / UnpackBlock); wider ones one at a time through BitWriter /
// BitReader. The packed form is bit_pack.h's layout either way.
//
// A block kernel `codes(x, u, out, first)` turns the 64 floats at x, elements [first, first +
// 64) of the vector, and their 64 draws u into 64 codes (out is uint8_t* or uint32_t*; a
// generic lambda serves both). The drivers call it for increasing `first`. It must give
// code 0 for an element 0.0f: the last, partial block is computed on a zero-padded copy,
// and its padding codes must be zero (the layout's padding bits).
//
// A vector quantized in runs, each with its own scale (qsgd's buckets, terngrad's tensor
// pieces), finds each block's runs with a RunCursor: a block inside one run (every block,
// when the runs are multiples of 64 elements long) takes the run's scale as one value,
// so its loops stay those of a single scale.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

#include "compression/bit_pack.h"
#include "compression/lane_rng.h"

namespace asgd::compression::internal {

// Calls f(std::integral_constant<int, B>{}) with B = bits and returns true when bits is a
// width the block path takes (2 to 8: qsgd's 1 + bit_width(s) for s < 128, terngrad's 2);
// returns false for any other.
template <typename F, int... B>
bool WithWidthAmong(int bits, F& f, std::integer_sequence<int, B...>) {
  return ((bits == B ? (f(std::integral_constant<int, B>{}), true) : false) || ...);
}
template <typename F>
bool WithNarrowWidth(int bits, F&& f) {
  return WithWidthAmong(bits, f, std::integer_sequence<int, 2, 3, 4, 5, 6, 7, 8>{});
}

// Consecutive runs over a vector's n elements: fixed-length runs (the last may be shorter)
// or runs ending at listed offsets. Block(first, ...) tells the runs of the block of
// kBlockCodes elements at `first`; calls take increasing `first` (the cursor only moves
// forward).
class RunCursor {
 public:
  // Runs of `run` elements over n. REQUIRES: n >= 1, run >= 1.
  RunCursor(std::size_t n, std::size_t run) : n_(n), fixed_(run), end_(std::min(run, n)) {}
  // Runs [0, ends[0]), [ends[0], ends[1]), ... REQUIRES: ends increasing, not empty; n =
  // ends.back().
  explicit RunCursor(std::span<const std::size_t> ends)
      : n_(ends.back()), ends_(ends), end_(ends.front()) {}

  // True, with *run the run, when every element of [first, min(first + kBlockCodes, n))
  // lies in one run; else false, with runs[k] the run of element first + k (the last run's
  // for an element past n: the zero padding of the last block).
  bool Block(std::size_t first, std::size_t* run, std::size_t* runs) {
    Seek(first);
    if (first + kBlock <= end_ || end_ == n_) {
      *run = run_;
      return true;
    }
    RunCursor walk = *this;
    for (std::size_t k = 0; k < kBlock; ++k) {
      walk.Seek(std::min(first + k, n_ - 1));
      runs[k] = walk.run_;
    }
    return false;
  }

 private:
  void Seek(std::size_t i) {
    while (i >= end_ && end_ < n_) {
      ++run_;
      end_ = fixed_ > 0 ? std::min(n_, end_ + fixed_) : ends_[run_];
    }
  }

  static constexpr std::size_t kBlock = kBlockCodes;

  std::size_t n_;
  std::size_t fixed_ = 0;  // 0: ends_
  std::span<const std::size_t> ends_;
  std::size_t run_ = 0;
  std::size_t end_;  // the end of run_
};

// sum_i x_i^2 in double: 32 partial sums, vectorisable without reassociating one sum and
// enough independent additions to hide their latency (each square is exact in double).
inline double SumOfSquares(std::span<const float> x) {
  double lanes[32] = {};
  std::size_t i = 0;
  for (; i + 32 <= x.size(); i += 32) {
    for (std::size_t j = 0; j < 32; ++j) lanes[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  for (; i < x.size(); ++i) lanes[0] += static_cast<double>(x[i]) * x[i];
  double sq = 0;
  for (double l : lanes) sq += l;
  return sq;
}

// max_i |x_i|, NaNs ignored: sixteen running maxima (one chain of dependent maxss was most
// of terngrad's encode time), each as maxps computes std::max(lane, a).
inline float MaxAbs(std::span<const float> x) {
  float lanes[16] = {};
  std::size_t i = 0;
  for (; i + 16 <= x.size(); i += 16) {
    for (std::size_t j = 0; j < 16; ++j) {
      const float a = std::fabs(x[i + j]);
      lanes[j] = a > lanes[j] ? a : lanes[j];
    }
  }
  for (; i < x.size(); ++i) lanes[0] = std::max(lanes[0], std::fabs(x[i]));
  float m = 0;
  for (float l : lanes) m = std::max(m, l);
  return m;
}

// 64 draws per block: 4 steps of the 16 lanes.
inline constexpr int kStepsPerBlock = kBlockCodes / LaneRng::kLanes;

// Writes the PackedWords(x.size(), B) words of x's codes at out (any alignment).
template <int B, typename Codes>
void EncodeBlocks(std::span<const float> x, LaneRng& gen, Codes&& codes, std::byte* out) {
  const std::size_t n = x.size();
  alignas(64) uint32_t u[kBlockCodes];
  alignas(64) uint8_t c[kBlockCodes];
  std::size_t i = 0;
  for (; i + kBlockCodes <= n; i += kBlockCodes, out += 8 * B) {
    gen.Fill(u, kStepsPerBlock);
    codes(x.data() + i, u, c, i);
    PackBlock<B>(c, out);
  }
  if (i < n) {
    alignas(64) float tail[kBlockCodes] = {};
    std::memcpy(tail, x.data() + i, (n - i) * sizeof(float));
    gen.Fill(u, kStepsPerBlock);
    codes(tail, u, c, i);
    std::byte buf[8 * B];
    PackBlock<B>(c, buf);
    std::memcpy(out, buf, PackedWords(n - i, B) * 8);
  }
}

// EncodeBlocks for any width up to kMaxCodeBits, the codes packed one at a time.
template <typename Codes>
void EncodeWide(std::span<const float> x, int bits, LaneRng& gen, Codes&& codes, std::byte* out) {
  const std::size_t n = x.size();
  alignas(64) uint32_t u[kBlockCodes];
  alignas(64) uint32_t c[kBlockCodes];
  alignas(64) float tail[kBlockCodes] = {};
  BitWriter w(reinterpret_cast<uint64_t*>(out), bits);
  for (std::size_t i = 0; i < n; i += kBlockCodes) {
    const std::size_t m = std::min<std::size_t>(kBlockCodes, n - i);
    const float* block = x.data() + i;
    if (m < kBlockCodes) {
      std::memcpy(tail, block, m * sizeof(float));
      block = tail;
    }
    gen.Fill(u, kStepsPerBlock);
    codes(block, u, c, i);
    for (std::size_t k = 0; k < m; ++k) w.Put(c[k]);
  }
  w.Finish();
}

// Calls visit(codes, first, m) for each block of the n codes of B bits in frame: codes[0..63]
// are the codes of elements [first, first + m), then, in the last block when m < 64, the
// padding bits read as 64 - m codes (zero in a valid frame). Stops at the first visit that
// returns false and returns false; true when every block was visited.
// REQUIRES: frame.size() == PackedWords(n, B) * 8 (the decoders check it first).
template <int B, typename Visit>
bool VisitBlocks(std::span<const std::byte> frame, std::size_t n, Visit visit) {
  alignas(64) uint8_t c[kBlockCodes];
  const std::byte* in = frame.data();
  std::size_t i = 0;
  for (; i + kBlockCodes <= n; i += kBlockCodes, in += 8 * B) {
    // UnpackBlock reads 8 bytes past the block unless it copies it first.
    const bool padded = static_cast<std::size_t>(in - frame.data()) + 8 * B + 8 <= frame.size();
    UnpackBlock<B>(in, padded, c);
    if (!visit(static_cast<const uint8_t*>(c), i, std::size_t{kBlockCodes})) return false;
  }
  if (i < n) {
    std::byte buf[8 * B] = {};
    std::memcpy(buf, in, frame.size() - static_cast<std::size_t>(in - frame.data()));
    UnpackBlock<B>(buf, false, c);
    if (!visit(static_cast<const uint8_t*>(c), i, n - i)) return false;
  }
  return true;
}

}  // namespace asgd::compression::internal
