// qsgd: s-level stochastic quantization with a 2-norm per bucket (Alistarh, Grubic, Li,
// Tomioka & Vojnovic 2017, "QSGD: Communication-Efficient SGD via Gradient Quantization
// and Encoding", Q_s, with the bucketing of its section 3.1 and experiments): the vector
// is cut into buckets of d consecutive elements (the last may be shorter), and element i
// of bucket b becomes norm_b * sign(x_i) * l / s, norm_b = ||x_b||_2, with l = floor(r) + 1
// with probability r - floor(r), else floor(r), where r = |x_i| / norm_b * s: unbiased,
// variance at most min(d / s^2, sqrt(d) / s) ||x_b||^2 per bucket (Lemma 3.1 with d for n),
// where one norm for the whole part leaves min(n / s^2, sqrt(n) / s) ||x||^2, which grows
// with the part. Codes are bit-packed in 1 + bit_width(s) bits (the paper's Elias coding is
// left out: fixed-width codes decode without branches).
// The rounding draws come from a LaneRng seeded by one draw of the caller's Rng, so that
// a block of 64 elements is drawn, quantized and packed by vectorised loops
// (quantize_blocks.h); the same seed gives the same encoding in every build. A bucket of a
// multiple of 64 elements holds whole blocks, which then take one norm each; other sizes
// give blocks across two buckets, whose elements take their own bucket's norm.
// A bucket whose norm is positive but below s / FLT_MAX (every element under about
// 10^-37) is sent as zeros with norm 0: s / norm would overflow float, and 0 * inf would
// turn its zeros into NaN levels.
// With error feedback (contract) each norm field is ||x_b|| / (1 + w_b), w_b = (||x_b|| /
// s)^2 sum_{i in b} f_i (1 - f_i) / ||x_b||^2 the variance of this bucket's draw (f_i the
// fractional part of r_i, computed from the same float r_i the encoder rounds;
// compressor.h): a contraction with delta = min_b 1 / (1 + w_b) >= 1 / (1 + min(d / s^2,
// sqrt(d) / s)). The levels drawn are the same; only the decoded magnitudes shrink.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "compression/bit_pack.h"
#include "compression/builtin_compressors.h"
#include "compression/quantize_blocks.h"
#include "core/check.h"

namespace asgd::compression::internal {
namespace {

int CodeBits(uint32_t levels) { return 1 + std::bit_width(levels); }

// ceil(n / d), without overflow.
std::size_t Buckets(std::size_t n, std::size_t d) { return n / d + (n % d != 0 ? 1 : 0); }

// The codes of the 64 elements at x from their draws u (quantize_blocks.h): the uniform of
// element k is Uniform24(u[k]). min(top, r) rather than min(r, top): a NaN r (from a NaN or
// infinite input, whose norm the decoder refuses anyway) becomes level s instead of an
// undefined float-to-integer conversion.
struct QsgdCodes {
  const float* per_norm;  // s / norm_b of each bucket (0 for a zero bucket)
  RunCursor buckets;
  float top;

  template <typename Code>
  void operator()(const float* x, const uint32_t* u, Code* codes, std::size_t first) {
    std::size_t b;
    std::size_t runs[kBlockCodes];
    if (buckets.Block(first, &b, runs)) {
      Quantize(x, u, codes, [p = per_norm[b]](int) { return p; });
    } else {
      alignas(64) float p[kBlockCodes];
      for (int k = 0; k < kBlockCodes; ++k) p[k] = per_norm[runs[k]];
      Quantize(x, u, codes, [&p](int k) { return p[k]; });
    }
  }

  template <typename Code, typename PerNorm>
  void Quantize(const float* x, const uint32_t* u, Code* codes, PerNorm per_norm_of) const {
    for (int k = 0; k < kBlockCodes; ++k) {
      const float uk = Uniform24(u[k]);
      const float r = std::min(top, std::fabs(x[k]) * per_norm_of(k));
      const auto fl = static_cast<int32_t>(r);  // floor, as r >= 0
      const float frac = r - static_cast<float>(fl);
      // At most s: fl = s only when r = s, and then frac = 0.
      const uint32_t level = static_cast<uint32_t>(fl) + static_cast<uint32_t>(uk < frac);
      const uint32_t sign = static_cast<uint32_t>(level != 0) & static_cast<uint32_t>(x[k] < 0);
      codes[k] = static_cast<Code>(level << 1 | sign);
    }
  }
};

class Qsgd final : public Compressor {
 public:
  Qsgd(int levels, int64_t bucket, bool contract)
      : levels_(static_cast<uint32_t>(levels)),
        bucket_(static_cast<std::size_t>(bucket)),
        contract_(contract) {}
  std::string_view Name() const override { return "qsgd"; }
  Encoding encoding() const override { return Encoding::kQsgd; }
  bool unbiased() const override { return !contract_; }
  bool contractive() const override { return contract_; }

 protected:
  void DoEncode(std::span<const float> x, std::span<const int64_t> /*pieces*/, Rng& rng,
                Encoded* out) const override {
    const std::size_t n = x.size();
    const std::size_t buckets = Buckets(n, bucket_);
    const int bits = CodeBits(levels_);
    ShapeFrames(out, Encoding::kQsgd, static_cast<int64_t>(n),
                {8 + 4 * buckets, PackedWords(n, bits) * 8});
    std::byte* head = out->frames[0].data();
    const auto bucket32 = static_cast<uint32_t>(bucket_);
    std::memcpy(head, &levels_, 4);
    std::memcpy(head + 4, &bucket32, 4);
    const auto top = static_cast<float>(levels_);
    std::vector<float> per_norm(buckets);
    for (std::size_t b = 0; b < buckets; ++b) {
      const std::span<const float> xb = x.subspan(b * bucket_, std::min(bucket_, n - b * bucket_));
      const double sq = SumOfSquares(xb);
      auto norm = static_cast<float>(std::sqrt(sq));
      float pn = norm > 0 ? top / norm : 0.0f;
      if (!std::isfinite(pn)) norm = pn = 0;  // below s / FLT_MAX (see above)
      per_norm[b] = pn;
      float sent = norm;
      if (contract_ && pn > 0) {
        // w_b = E||Q(x_b) - x_b||^2 / ||x_b||^2: element i is step * (floor(r_i) +
        // Bernoulli(f_i)), variance step^2 f_i (1 - f_i), with r_i as QsgdCodes computes it.
        double spread = 0;
        for (float v : xb) {
          const float r = std::min(top, std::fabs(v) * pn);
          const double f = static_cast<double>(r) - std::floor(static_cast<double>(r));
          spread += f * (1 - f);
        }
        const double step = static_cast<double>(norm) / levels_;
        sent = static_cast<float>(norm / (1.0 + step * step * spread / sq));
      }
      std::memcpy(head + 8 + 4 * b, &sent, 4);
    }
    QsgdCodes q{per_norm.data(), RunCursor(n, bucket_), top};
    LaneRng gen(rng.NextU64());
    std::byte* codes = out->frames[1].data();
    const bool narrow =
        WithNarrowWidth(bits, [&](auto b) { EncodeBlocks<decltype(b)::value>(x, gen, q, codes); });
    if (!narrow) EncodeWide(x, bits, gen, q, codes);
  }

 private:
  uint32_t levels_;
  std::size_t bucket_;
  bool contract_;
};

bool ValidCode(uint64_t code, uint32_t levels) {
  const uint64_t level = code >> 1;
  return level <= levels && (level != 0 || (code & 1) == 0);
}

std::string BadCode(std::size_t i, uint64_t code, uint32_t levels) {
  return ::asgd::internal::StrCat("qsgd code ", i, " has level ", code >> 1,
                                  (code & 1) ? " (negative)" : "", ", expected 0 to s = ", levels,
                                  " and no sign on level 0");
}

constexpr const char* kBadPadding = "qsgd code frame has non-zero padding bits";

float Value(uint32_t code, float step) {
  const float mag = step * static_cast<float>(static_cast<int32_t>(code >> 1));
  return (code & 1) ? -mag : mag;
}

// Codes of up to 8 bits, a block at a time: a first pass checks every code (so that a
// refused push writes nothing), a second unpacks again and writes, each element with its
// bucket's step norm_b / s.
template <int B>
std::string DecodeNarrow(std::span<const std::byte> frame, uint32_t levels,
                         std::span<const float> steps, std::size_t bucket, std::span<float> out) {
  const auto top = static_cast<uint8_t>(levels);  // levels < 128 when codes fit 8 bits
  std::string problem;
  VisitBlocks<B>(frame, out.size(), [&](const uint8_t* c, std::size_t first, std::size_t m) {
    uint8_t bad = 0;
    for (int k = 0; k < kBlockCodes; ++k) bad |= (c[k] >> 1) > top || c[k] == 1;
    if (bad == 0 && m == kBlockCodes) return true;
    for (std::size_t k = 0; k < m; ++k) {
      if (!ValidCode(c[k], levels)) {
        problem = BadCode(first + k, c[k], levels);
        return false;
      }
    }
    for (std::size_t k = m; k < kBlockCodes; ++k) {
      if (c[k] != 0) {
        problem = kBadPadding;
        return false;
      }
    }
    return true;
  });
  if (!problem.empty()) return problem;
  float* o = out.data();
  RunCursor buckets(out.size(), bucket);
  VisitBlocks<B>(frame, out.size(), [&](const uint8_t* c, std::size_t first, std::size_t m) {
    std::size_t b;
    std::size_t runs[kBlockCodes];
    if (!buckets.Block(first, &b, runs)) {
      for (std::size_t k = 0; k < m; ++k) o[first + k] = Value(c[k], steps[runs[k]]);
    } else if (m == kBlockCodes) {
      const float step = steps[b];
      for (int k = 0; k < kBlockCodes; ++k) o[first + k] = Value(c[k], step);
    } else {
      for (std::size_t k = 0; k < m; ++k) o[first + k] = Value(c[k], steps[b]);
    }
    return true;
  });
  return {};
}

}  // namespace

std::unique_ptr<Compressor> NewQsgd(int levels, int64_t bucket, bool contract) {
  return std::make_unique<Qsgd>(levels, bucket, contract);
}

std::string DecodeQsgd(Frames frames, std::span<float> out) {
  using ::asgd::internal::StrCat;
  if (std::string e = CheckShape("qsgd", frames, 0); !e.empty()) return e;
  if (frames[0].size() < 8) {
    return StrCat("qsgd norm frame has ", frames[0].size(), " bytes, expected s, d and the norms");
  }
  const auto levels = Load<uint32_t>(frames[0], 0);
  const auto bucket = Load<uint32_t>(frames[0], 4);
  if (levels == 0 || levels > kMaxQsgdLevels) {
    return StrCat("qsgd levels s = ", levels, ", expected 1 to ", kMaxQsgdLevels);
  }
  if (bucket == 0) return "qsgd bucket d = 0, expected at least 1";
  const std::size_t n = out.size();
  const std::size_t buckets = Buckets(n, bucket);
  if (frames[0].size() != 8 + 4 * buckets) {
    return StrCat("qsgd norm frame has ", frames[0].size(), " bytes, expected ", 8 + 4 * buckets,
                  " (s, d and ", buckets, " norms for ", n, " elements in buckets of ", bucket,
                  ")");
  }
  std::vector<float> steps(buckets);
  for (std::size_t b = 0; b < buckets; ++b) {
    const auto norm = Load<float>(frames[0], 8 + 4 * b);
    if (!(std::isfinite(norm) && norm >= 0)) {
      return StrCat("qsgd norm of bucket ", b, " = ", norm, ", expected a finite value >= 0");
    }
    steps[b] = norm / static_cast<float>(levels);
  }
  const int bits = CodeBits(levels);
  const std::size_t want = PackedWords(n, bits) * 8;
  if (frames[1].size() != want) {
    return StrCat("qsgd code frame has ", frames[1].size(), " bytes, expected ", want, " for ", n,
                  " elements of ", bits, " bits");
  }
  std::string problem;
  if (WithNarrowWidth(bits, [&](auto b) {
        problem = DecodeNarrow<decltype(b)::value>(frames[1], levels, steps, bucket, out);
      })) {
    return problem;
  }
  // Checked in a first pass so that a refused push writes nothing.
  BitReader check(frames[1].data(), bits);
  for (std::size_t i = 0; i < n; ++i) {
    const uint64_t code = check.Get();
    if (!ValidCode(code, levels)) return BadCode(i, code, levels);
  }
  if (!check.RestIsZero()) return kBadPadding;
  BitReader r(frames[1].data(), bits);
  std::size_t b = 0, left = bucket;
  for (float& v : out) {
    if (left == 0) {
      ++b;
      left = bucket;
    }
    v = Value(static_cast<uint32_t>(r.Get()), steps[b]);
    --left;
  }
  return {};
}

}  // namespace asgd::compression::internal
