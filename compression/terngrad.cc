// terngrad: stochastic ternary {-1, 0, +1} times the max-norm (Wen, Xu, Yan, Wu, Wang, Chen
// & Li 2017, "TernGrad: Ternary Gradients to Reduce Communication in Distributed Deep
// Learning"): with s = max_i |x_i|, element i is s * sign(x_i) * b_i, b_i ~ Bernoulli(|x_i|
// / s). Unbiased; variance |x_i| s - x_i^2 per coordinate. The paper's per-layer scaling
// and gradient clipping are left out: one scale per pushed vector. Codes are 2 bits.
#include <cmath>

#include "compression/bit_pack.h"
#include "compression/builtin_compressors.h"
#include "core/check.h"

namespace asgd::compression::internal {
namespace {

constexpr uint64_t kZero = 0, kPlus = 1, kMinus = 2;

class TernGrad final : public Compressor {
 public:
  std::string_view Name() const override { return "terngrad"; }
  Encoding encoding() const override { return Encoding::kTernGrad; }
  bool unbiased() const override { return true; }

  void Encode(std::span<const float> x, Rng& rng, Encoded* out) const override {
    ASGD_CHECK(!x.empty(), "terngrad of an empty vector");
    float scale = 0;
    for (float v : x) scale = std::max(scale, std::fabs(v));
    ShapeFrames(out, Encoding::kTernGrad, static_cast<int64_t>(x.size()),
                {4, PackedWords(x.size(), 2) * 8});
    std::memcpy(out->frames[0].data(), &scale, 4);
    BitWriter w(reinterpret_cast<uint64_t*>(out->frames[1].data()), 2);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    uint64_t random = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if ((i & 1) == 0) random = rng.NextU64();
      const float u = Uniform24((i & 1) == 0 ? random >> 32 : random & 0xffffffffu);
      const bool keep = u < std::fabs(x[i]) * inv;
      w.Put(!keep ? kZero : x[i] < 0 ? kMinus : kPlus);
    }
    w.Finish();
  }
};

}  // namespace

std::unique_ptr<Compressor> NewTernGrad() { return std::make_unique<TernGrad>(); }

std::string DecodeTernGrad(Frames frames, std::span<float> out) {
  using ::asgd::internal::StrCat;
  if (std::string e = CheckShape("terngrad", frames, 4); !e.empty()) return e;
  const auto scale = Load<float>(frames[0], 0);
  if (std::string e = CheckScale("terngrad", "scale", scale); !e.empty()) return e;
  const std::size_t want = PackedWords(out.size(), 2) * 8;
  if (frames[1].size() != want) {
    return StrCat("terngrad code frame has ", frames[1].size(), " bytes, expected ", want, " for ",
                  out.size(), " elements");
  }
  BitReader check(frames[1].data(), 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (check.Get() == 3) return StrCat("terngrad code ", i, " is 3, expected 0, 1 or 2");
  }
  if (!check.RestIsZero()) return "terngrad code frame has non-zero padding bits";
  const float table[3] = {0.0f, scale, -scale};
  BitReader r(frames[1].data(), 2);
  for (float& v : out) v = table[r.Get()];
  return {};
}

}  // namespace asgd::compression::internal
