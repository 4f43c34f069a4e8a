// The built-in compressors' factories and decoders, for the registry in compressor.cc.
// Each lives in its own file; sparse.cc holds the index/value form topk and randk share.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compression/compressor.h"

namespace asgd::compression::internal {

using Frames = std::span<const std::span<const std::byte>>;

std::unique_ptr<Compressor> NewTopK(double ratio);
// scaled: values times n / k (unbiased); else as they are (a contraction).
std::unique_ptr<Compressor> NewRandK(double ratio, bool scaled);
// contract: the error-feedback forms of compressor.h (qsgd's norms divided by 1 + w_b,
// terngrad's scales chosen to minimise the error).
std::unique_ptr<Compressor> NewQsgd(int levels, int64_t bucket, bool contract);
std::unique_ptr<Compressor> NewSign();
// clip: c of the clipping bound c sigma, 0 for none.
std::unique_ptr<Compressor> NewTernGrad(double clip, bool contract);

std::string DecodeSparse(Frames frames, std::span<float> out);
std::string DecodeQsgd(Frames frames, std::span<float> out);
std::string DecodeSign(Frames frames, std::span<float> out);
std::string DecodeTernGrad(Frames frames, std::span<float> out);

// k = max(1, round(ratio * n)), at most n.
int64_t SparseK(double ratio, int64_t n);
// Resizes out to `frames` frames with the given byte sizes.
void ShapeFrames(Encoded* out, Encoding encoding, int64_t count,
                 std::initializer_list<std::size_t> sizes);
// Reads a little-endian scalar at byte offset `at`.
template <typename T>
T Load(std::span<const std::byte> frame, std::size_t at) {
  T v;
  std::memcpy(&v, frame.data() + at, sizeof(T));
  return v;
}
// "" or the reason the frame count or the scale frame's size is wrong.
std::string CheckShape(const char* name, Frames frames, std::size_t scalar_bytes);
// "" when scale is finite and >= 0, else the reason.
std::string CheckScale(const char* name, const char* what, float scale);
// A uniform draw in [0, 1) with 24 bits: the high 24 of 32 random bits (exact in float;
// converted through int32, which vectorises where unsigned conversion may not).
inline float Uniform24(uint32_t bits32) {
  return static_cast<float>(static_cast<int32_t>(bits32 >> 8)) * (1.0f / 16777216.0f);
}

}  // namespace asgd::compression::internal
