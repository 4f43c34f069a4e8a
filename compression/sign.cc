// sign: one bit per coordinate and one scale (Seide, Fu, Droppo, Li & Yu 2014, "1-Bit
// Stochastic Gradient Descent"; Bernstein, Wang, Azizzadenesheli & Anandkumar 2018,
// "signSGD"), with the scale of Karimireddy, Rebjock, Stich & Jaggi 2019 ("Error Feedback
// Fixes SignSGD and other Gradient Compression Schemes", EF-SignSGD): C(x) = ||x||_1 / d *
// sign(x). Deterministic and biased: pair it with error feedback. The bit is the float's
// sign bit, so a zero coordinate is sent as +scale, or -scale for -0 (one bit has no
// third value).
#include <bit>
#include <cmath>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "compression/bit_pack.h"
#include "compression/builtin_compressors.h"
#include "core/check.h"

namespace asgd::compression::internal {
namespace {

class Sign final : public Compressor {
 public:
  std::string_view Name() const override { return "sign"; }
  Encoding encoding() const override { return Encoding::kSign; }
  bool unbiased() const override { return false; }
  // ||C(x) - x||^2 = ||x||^2 - ||x||_1^2 / n: delta = ||x||_1^2 / (n ||x||^2) >= 1 / n.
  bool contractive() const override { return true; }

 protected:
  void DoEncode(std::span<const float> x, std::span<const int64_t> /*pieces*/, Rng& /*rng*/,
                Encoded* out) const override {
    ASGD_CHECK(!x.empty(), "sign of an empty vector");
    const std::size_t n = x.size();
    ShapeFrames(out, Encoding::kSign, static_cast<int64_t>(n), {4, PackedWords(n, 1) * 8});
    auto* words = reinterpret_cast<uint64_t*>(out->frames[1].data());
    // Per 64-element word: the sign bits (the float's own, so -0 is sent as -scale) and the
    // block's l1 in float, added up in double.
    double l1 = 0;
    std::size_t i = 0;
    for (std::size_t w = 0; i < n; ++w) {
      const std::size_t end = std::min(n, i + 64);
      uint64_t word = 0;
      float block[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      std::size_t b = 0;
#if defined(__AVX2__)
      if (end - i == 64) {
        __m256 sum = _mm256_setzero_ps();
        const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        for (; b < 64; b += 8) {
          const __m256 v = _mm256_loadu_ps(x.data() + i + b);
          word |= static_cast<uint64_t>(_mm256_movemask_ps(v)) << b;
          sum = _mm256_add_ps(sum, _mm256_and_ps(v, abs_mask));
        }
        _mm256_storeu_ps(block, sum);
        i = end;
      }
#endif
      for (; i < end; ++i, ++b) {
        word |= static_cast<uint64_t>(std::bit_cast<uint32_t>(x[i]) >> 31) << b;
        block[b & 7] += std::fabs(x[i]);
      }
      words[w] = word;
      for (float p : block) l1 += p;
    }
    const auto scale = static_cast<float>(l1 / static_cast<double>(n));
    std::memcpy(out->frames[0].data(), &scale, 4);
  }
};

}  // namespace

std::unique_ptr<Compressor> NewSign() { return std::make_unique<Sign>(); }

std::string DecodeSign(Frames frames, std::span<float> out) {
  using ::asgd::internal::StrCat;
  if (std::string e = CheckShape("sign", frames, 4); !e.empty()) return e;
  const auto scale = Load<float>(frames[0], 0);
  if (std::string e = CheckScale("sign", "scale", scale); !e.empty()) return e;
  const std::size_t n = out.size();
  const std::size_t want = PackedWords(n, 1) * 8;
  if (frames[1].size() != want) {
    return StrCat("sign bit frame has ", frames[1].size(), " bytes, expected ", want, " for ", n,
                  " elements");
  }
  if (n % 64 != 0 && Load<uint64_t>(frames[1], want - 8) >> (n % 64) != 0) {
    return "sign bit frame has non-zero padding bits";
  }
  for (std::size_t w = 0, i = 0; i < n; ++w) {
    const uint64_t word = Load<uint64_t>(frames[1], 8 * w);
    const std::size_t end = std::min(n, i + 64);
    for (std::size_t b = 0; i < end; ++i, ++b) out[i] = (word >> b) & 1 ? -scale : scale;
  }
  return {};
}

}  // namespace asgd::compression::internal
