// terngrad: stochastic ternary {-1, 0, +1} times the max-norm (Wen, Xu, Yan, Wu, Wang, Chen
// & Li 2017, "TernGrad: Ternary Gradients to Reduce Communication in Distributed Deep
// Learning"): with s = max_i |x_i|, element i is s * sign(x_i) * b_i, b_i ~ Bernoulli(|x_i|
// / s). Unbiased; variance |x_i| s - x_i^2 per coordinate. The paper's per-layer scaling
// and gradient clipping are left out: one scale per pushed vector. Codes are 2 bits. The
// draws come from a LaneRng seeded by one draw of the caller's Rng, a block of 64 elements
// at a time (quantize_blocks.h, as qsgd's).
// With error feedback (contract) the scale sent is s / (1 + w), w = sum_i (|x_i| s - x_i^2)
// / ||x||^2 the variance of this x's draw (compressor.h): a contraction with delta =
// 1 / (1 + w) >= 2 / (sqrt(n) + 1). The draws are the same; only the decoded magnitude
// shrinks.
#include <cmath>

#include "compression/bit_pack.h"
#include "compression/builtin_compressors.h"
#include "compression/quantize_blocks.h"
#include "core/check.h"

namespace asgd::compression::internal {
namespace {

// The codes of the 64 elements at x from their draws u (quantize_blocks.h): keep with
// probability |x| / scale against Uniform24(u[k]); code 1 = +1, 2 = -1,
// 0 = not kept. A NaN ratio keeps nothing.
struct TernCodes {
  float inv;

  template <typename Code>
  void operator()(const float* x, const uint32_t* u, Code* codes) const {
    for (int k = 0; k < kBlockCodes; ++k) {
      const float uk = Uniform24(u[k]);
      const auto keep = static_cast<uint32_t>(uk < std::fabs(x[k]) * inv);
      // keep << negative, as an add: SSE2 has no per-lane variable shift.
      codes[k] = static_cast<Code>(keep + (keep & static_cast<uint32_t>(x[k] < 0)));
    }
  }
};

class TernGrad final : public Compressor {
 public:
  explicit TernGrad(bool contract) : contract_(contract) {}
  std::string_view Name() const override { return "terngrad"; }
  Encoding encoding() const override { return Encoding::kTernGrad; }
  bool unbiased() const override { return !contract_; }
  bool contractive() const override { return contract_; }

  void Encode(std::span<const float> x, Rng& rng, Encoded* out) const override {
    ASGD_CHECK(!x.empty(), "terngrad of an empty vector");
    // Sixteen running maxima (one chain of dependent maxss was most of the encode time);
    // the max of each ignores NaNs as the single chain did, so the scale is the same.
    float lanes[16] = {};
    std::size_t i = 0;
    for (; i + 16 <= x.size(); i += 16) {
      for (std::size_t j = 0; j < 16; ++j) {
        const float a = std::fabs(x[i + j]);
        lanes[j] = a > lanes[j] ? a : lanes[j];  // std::max(lanes[j], a), as maxps computes it
      }
    }
    for (; i < x.size(); ++i) lanes[0] = std::max(lanes[0], std::fabs(x[i]));
    float scale = 0;
    for (float l : lanes) scale = std::max(scale, l);
    ShapeFrames(out, Encoding::kTernGrad, static_cast<int64_t>(x.size()),
                {4, PackedWords(x.size(), 2) * 8});
    float sent_scale = scale;
    if (contract_ && scale > 0 && std::isfinite(scale)) {
      // w = E||U(x) - x||^2 / ||x||^2, each coordinate a Bernoulli(|x_i| / s) times s.
      double var = 0, sq = 0;
      for (float v : x) {
        const double a = std::fabs(static_cast<double>(v));
        var += a * scale - a * a;
        sq += a * a;
      }
      sent_scale = static_cast<float>(scale / (1.0 + std::max(0.0, var) / sq));
    }
    std::memcpy(out->frames[0].data(), &sent_scale, 4);
    LaneRng gen(rng.NextU64());
    EncodeBlocks<2>(x, gen, TernCodes{scale > 0 ? 1.0f / scale : 0.0f}, out->frames[1].data());
  }

 private:
  bool contract_;
};

}  // namespace

std::unique_ptr<Compressor> NewTernGrad(bool contract) {
  return std::make_unique<TernGrad>(contract);
}

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
  // A first pass checks every code, so that a refused push writes nothing.
  std::string problem;
  VisitBlocks<2>(frames[1], out.size(), [&](const uint8_t* c, std::size_t first, std::size_t m) {
    uint8_t bad = 0;
    for (int k = 0; k < kBlockCodes; ++k) bad |= c[k] == 3;
    if (bad == 0 && m == kBlockCodes) return true;
    for (std::size_t k = 0; k < m; ++k) {
      if (c[k] == 3) {
        problem = StrCat("terngrad code ", first + k, " is 3, expected 0, 1 or 2");
        return false;
      }
    }
    for (std::size_t k = m; k < kBlockCodes; ++k) {
      if (c[k] != 0) {
        problem = "terngrad code frame has non-zero padding bits";
        return false;
      }
    }
    return true;
  });
  if (!problem.empty()) return problem;
  // Code 0 is +0, 1 is +scale, 2 is -scale (the table {0, scale, -scale}).
  float* o = out.data();
  VisitBlocks<2>(frames[1], out.size(), [&](const uint8_t* c, std::size_t first, std::size_t m) {
    for (std::size_t k = 0; k < m; ++k) {
      const float mag = c[k] != 0 ? scale : 0.0f;
      o[first + k] = c[k] == 2 ? -mag : mag;
    }
    return true;
  });
  return {};
}

}  // namespace asgd::compression::internal
