// Helpers shared by the compressor tests: a compressor from a few options, a seeded
// Gaussian vector, and an encode-decode round trip that expects a clean decode.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compression/compressor.h"
#include "core/rng.h"

namespace asgd::compression::testing {

inline std::unique_ptr<Compressor> Make(const std::string& name, double ratio = 0.25,
                                        int levels = 15, int64_t bucket = 512, double clip = 2.5,
                                        bool error_feedback = false) {
  CompressionOptions o;
  o.name = name;
  o.ratio = ratio;
  o.levels = levels;
  o.bucket = bucket;
  o.clip = clip;
  o.error_feedback = error_feedback;
  return NewCompressor(o);
}

inline std::vector<float> RandomVector(std::size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  return x;
}

inline std::vector<float> RoundTrip(const Compressor& c, std::span<const float> x, Rng& rng,
                                    Encoded* e = nullptr, std::span<const int64_t> pieces = {}) {
  Encoded local;
  Encoded* enc = e != nullptr ? e : &local;
  c.Encode(x, rng, enc, pieces);
  std::vector<float> out(x.size());
  const std::string problem = Decode(*enc, out);
  EXPECT_EQ(problem, "");
  return out;
}

inline const std::vector<std::string> kCompressors = {"topk", "randk", "qsgd", "sign", "terngrad"};

}  // namespace asgd::compression::testing
