// terngrad: stochastic ternary {-1, 0, +1} times a scale per tensor, after clipping (Wen,
// Xu, Yan, Wu, Wang, Chen & Li 2017, "TernGrad: Ternary Gradients to Reduce Communication
// in Distributed Deep Learning", sections 3.1, 3.3 and 4). The vector is cut into its
// pieces (Compressor::Encode: the model's tensors as they fall in the pushed part, so a
// part that splits a tensor holds a piece of it; one piece when none are given). In piece
// j of m elements, each element is first clipped,
//   y_i = sign(x_i) min(|x_i|, c sigma_j),  sigma_j = sqrt(sum_{i in j} x_i^2 / m),
// (c = CompressionOptions::clip, 2.5 as in Wen et al.; c = 0 leaves y = x), and then
// ternarized with the piece's scale s_j = max_{i in j} |y_i|: element i becomes s_j *
// sign(x_i) * b_i, b_i ~ Bernoulli(|y_i| / s_j). Unbiased for y (variance |y_i| s_j - y_i^2
// per coordinate), so unbiased for x only without clipping. Codes are 2 bits. The draws
// come from a LaneRng seeded by one draw of the caller's Rng, a block of 64 elements at a
// time (quantize_blocks.h, as qsgd's); a block across two pieces takes each element's own.
//
// Where this differs from Wen et al. (docs/compression.md says it for users):
// - sigma is the root mean square of the piece, its standard deviation about 0; theirs is
//   about the piece's mean (their code's clip_gradients_by_stddev). A gradient's mean is
//   near 0, and the two differ by the factor sqrt(1 + mean^2 / sd^2). About the mean, a
//   piece of one element, or of equal elements, has sigma = 0 and would be sent as zeros
//   every time (and a part boundary can leave a one-element piece of a tensor); about 0 no
//   piece is clipped to nothing, which also keeps the error-feedback form a contraction.
// - The scale is max |y_i| of the clipped piece, the paper's s_t = ||g_t||_inf taken after
//   clipping; their code ternarizes with c sigma itself, larger whenever no element reaches
//   it (the same expectation, more variance).
// - Per tensor piece of each part: a tensor split across shards has a scale and a sigma
//   per shard's piece, not one per layer.
// - No scalar sharing (their section 3.2, the workers of a synchronous step agreeing on the
//   largest scale): every push carries its own scales, as asynchronous pushes must.
//
// With error feedback (contract) piece j sends alpha_j U(y_j) with alpha_j = <y_j, x_j> /
// (s_j ||y_j||_1), the factor that minimises E||alpha U(y_j) - x_j||^2 = alpha^2 s_j
// ||y_j||_1 - 2 alpha <y_j, x_j> + ||x_j||^2; the scale field is alpha_j s_j = <y_j, x_j> /
// ||y_j||_1 (without clipping ||x_j||^2 / ||x_j||_1 = s_j / (1 + w_j), w_j the variance
// relative to ||x_j||^2: Karimireddy et al. 2019's U / (1 + w)). The error left is
// (1 - delta_j)||x_j||^2 with delta_j = <y_j, x_j>^2 / (s_j ||y_j||_1 ||x_j||^2) >=
// (||y_j||^2 / ||x_j||^2) (||y_j||^2 / (s_j ||y_j||_1)), since <y, x> >= ||y||^2: the first
// factor is 1 without clipping and at least c^2 / m with it (a clipped element alone has
// y_i^2 = c^2 ||x_j||^2 / m), the second at least 2 / (1 + sqrt(m)) (s ||y||_1 <= (1 +
// sqrt(m)) / 2 ||y||^2 for s = max |y_i|). So delta >= min(1, c^2 / m) 2 / (1 + sqrt(m))
// over pieces of at most m elements: a contraction. The draws are the same; only the
// decoded magnitudes change.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "compression/bit_pack.h"
#include "compression/builtin_compressors.h"
#include "compression/quantize_blocks.h"
#include "core/check.h"

namespace asgd::compression::internal {
namespace {

// The codes of the 64 elements at x from their draws u (quantize_blocks.h): keep with
// probability min(|x|, bound) / scale against Uniform24(u[k]); code 1 = +1, 2 = -1, 0 = not
// kept. A NaN ratio keeps nothing.
struct TernCodes {
  const float* inv;    // 1 / s_j of each piece (0 for a zero piece)
  const float* bound;  // c sigma_j of each piece (+inf without clipping)
  RunCursor pieces;

  template <typename Code>
  void operator()(const float* x, const uint32_t* u, Code* codes, std::size_t first) {
    std::size_t j;
    std::size_t runs[kBlockCodes];
    if (pieces.Block(first, &j, runs)) {
      Ternarize(
          x, u, codes, [v = inv[j]](int) { return v; }, [v = bound[j]](int) { return v; });
    } else {
      alignas(64) float iv[kBlockCodes];
      alignas(64) float bd[kBlockCodes];
      for (int k = 0; k < kBlockCodes; ++k) {
        iv[k] = inv[runs[k]];
        bd[k] = bound[runs[k]];
      }
      Ternarize(
          x, u, codes, [&iv](int k) { return iv[k]; }, [&bd](int k) { return bd[k]; });
    }
  }

  template <typename Code, typename Inv, typename Bound>
  void Ternarize(const float* x, const uint32_t* u, Code* codes, Inv inv_of, Bound bound_of) const {
    for (int k = 0; k < kBlockCodes; ++k) {
      const float uk = Uniform24(u[k]);
      const float y = std::min(std::fabs(x[k]), bound_of(k));
      const auto keep = static_cast<uint32_t>(uk < y * inv_of(k));
      // keep << negative, as an add: SSE2 has no per-lane variable shift.
      codes[k] = static_cast<Code>(keep + (keep & static_cast<uint32_t>(x[k] < 0)));
    }
  }
};

class TernGrad final : public Compressor {
 public:
  TernGrad(double clip, bool contract) : clip_(clip), contract_(contract) {}
  std::string_view Name() const override { return "terngrad"; }
  Encoding encoding() const override { return Encoding::kTernGrad; }
  bool unbiased() const override { return !contract_ && clip_ == 0; }
  bool contractive() const override { return contract_; }

 protected:
  void DoEncode(std::span<const float> x, std::span<const int64_t> pieces, Rng& rng,
                Encoded* out) const override {
    const std::size_t n = x.size();
    const int64_t whole[1] = {static_cast<int64_t>(n)};
    if (pieces.empty()) pieces = whole;
    const std::size_t m = pieces.size();
    ASGD_CHECK(n <= UINT32_MAX, "terngrad of ", n, " elements (counts are 32-bit)");
    ShapeFrames(out, Encoding::kTernGrad, static_cast<int64_t>(n),
                {4 + 8 * m, PackedWords(n, 2) * 8});
    std::byte* head = out->frames[0].data();
    const auto m32 = static_cast<uint32_t>(m);
    std::memcpy(head, &m32, 4);
    std::vector<float> inv(m), bound(m);
    std::vector<std::size_t> ends(m);
    std::size_t at = 0;
    for (std::size_t j = 0; j < m; ++j) {
      const auto len = static_cast<std::size_t>(pieces[j]);
      const std::span<const float> xj = x.subspan(at, len);
      at += len;
      ends[j] = at;
      float b = std::numeric_limits<float>::infinity();
      if (clip_ > 0) {
        b = static_cast<float>(clip_ * std::sqrt(SumOfSquares(xj) / static_cast<double>(len)));
      }
      const float scale = std::min(MaxAbs(xj), b);
      bound[j] = b;
      inv[j] = scale > 0 ? 1.0f / scale : 0.0f;
      float sent = scale;
      if (contract_ && scale > 0 && std::isfinite(scale)) {
        // <y, x> / ||y||_1, with y as TernCodes clips it.
        double dot = 0, l1 = 0;
        for (float v : xj) {
          const double a = std::fabs(static_cast<double>(v));
          const double y = std::min(std::fabs(v), b);
          dot += y * a;
          l1 += y;
        }
        sent = static_cast<float>(dot / l1);
      }
      const auto count = static_cast<uint32_t>(len);
      std::memcpy(head + 4 + 4 * j, &count, 4);
      std::memcpy(head + 4 + 4 * m + 4 * j, &sent, 4);
    }
    TernCodes t{inv.data(), bound.data(), RunCursor(ends)};
    LaneRng gen(rng.NextU64());
    EncodeBlocks<2>(x, gen, t, out->frames[1].data());
  }

 private:
  double clip_;
  bool contract_;
};

}  // namespace

std::unique_ptr<Compressor> NewTernGrad(double clip, bool contract) {
  return std::make_unique<TernGrad>(clip, contract);
}

std::string DecodeTernGrad(Frames frames, std::span<float> out) {
  using ::asgd::internal::StrCat;
  if (std::string e = CheckShape("terngrad", frames, 0); !e.empty()) return e;
  const std::span<const std::byte> head = frames[0];
  const std::size_t n = out.size();
  if (head.size() < 4) {
    return StrCat("terngrad scale frame has ", head.size(),
                  " bytes, expected a piece count, the counts and the scales");
  }
  const std::size_t pieces = Load<uint32_t>(head, 0);
  if (pieces == 0 || pieces > n) {
    return StrCat("terngrad encoding has ", pieces, " pieces for ", n, " elements, expected 1 to ",
                  n);
  }
  if (head.size() != 4 + 8 * pieces) {
    return StrCat("terngrad scale frame has ", head.size(), " bytes, expected ", 4 + 8 * pieces,
                  " for ", pieces, " pieces");
  }
  std::vector<std::size_t> ends(pieces);
  std::vector<float> scales(pieces);
  std::size_t at = 0;
  for (std::size_t j = 0; j < pieces; ++j) {
    const std::size_t count = Load<uint32_t>(head, 4 + 4 * j);
    if (count == 0 || count > n - at) {
      return StrCat("terngrad piece ", j, " has ", count, " elements, expected 1 to the ", n - at,
                    " left of ", n);
    }
    at += count;
    ends[j] = at;
    scales[j] = Load<float>(head, 4 + 4 * pieces + 4 * j);
    if (!(std::isfinite(scales[j]) && scales[j] >= 0)) {
      return StrCat("terngrad scale of piece ", j, " = ", scales[j],
                    ", expected a finite value >= 0");
    }
  }
  if (at != n) return StrCat("terngrad pieces cover ", at, " elements, expected ", n);
  const std::size_t want = PackedWords(n, 2) * 8;
  if (frames[1].size() != want) {
    return StrCat("terngrad code frame has ", frames[1].size(), " bytes, expected ", want, " for ",
                  n, " elements");
  }
  // A first pass checks every code, so that a refused push writes nothing.
  std::string problem;
  VisitBlocks<2>(frames[1], n, [&](const uint8_t* c, std::size_t first, std::size_t m) {
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
  // Code 0 is +0, 1 is +scale_j, 2 is -scale_j (the table {0, scale_j, -scale_j}).
  float* o = out.data();
  RunCursor cursor(ends);
  VisitBlocks<2>(frames[1], n, [&](const uint8_t* c, std::size_t first, std::size_t m) {
    std::size_t j = 0;  // Block sets it when the block lies in one run (GCC cannot see that)
    std::size_t runs[kBlockCodes];
    const bool one = cursor.Block(first, &j, runs);
    for (std::size_t k = 0; k < m; ++k) {
      const float scale = one ? scales[j] : scales[runs[k]];
      const float mag = c[k] != 0 ? scale : 0.0f;
      o[first + k] = c[k] == 2 ? -mag : mag;
    }
    return true;
  });
  return {};
}

}  // namespace asgd::compression::internal
