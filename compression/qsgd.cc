// qsgd: s-level stochastic quantization with the vector's 2-norm (Alistarh, Grubic, Li,
// Tomioka & Vojnovic 2017, "QSGD: Communication-Efficient SGD via Gradient Quantization
// and Encoding", Q_s). Element i becomes norm * sign(x_i) * l / s, with l = floor(r) + 1
// with probability r - floor(r), else floor(r), where r = |x_i| / norm * s: unbiased,
// variance at most (norm / s)^2 / 4 per coordinate. Codes are bit-packed in 1 + bit_width(s)
// bits (the paper's Elias coding is left out: fixed-width codes decode without branches).
// The rounding draws come from a LaneRng seeded by one draw of the caller's Rng, so that
// a block of 64 elements is drawn, quantized and packed by vectorised loops
// (quantize_blocks.h); the same seed gives the same encoding in every build.
// With error feedback (contract) the norm field is ||x|| / (1 + w), w = (||x|| / s)^2
// sum_i f_i (1 - f_i) / ||x||^2 the variance of this x's draw (f_i the fractional part of
// r_i, computed from the same float r_i the encoder rounds; compressor.h): a contraction
// with delta = 1 / (1 + w) >= 1 / (1 + min(n / s^2, sqrt(n) / s)). The levels drawn are the
// same; only the decoded magnitude shrinks.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "compression/bit_pack.h"
#include "compression/builtin_compressors.h"
#include "compression/quantize_blocks.h"
#include "core/check.h"

namespace asgd::compression::internal {
namespace {

int CodeBits(uint32_t levels) { return 1 + std::bit_width(levels); }

// The codes of the 64 elements at x from their draws u (quantize_blocks.h): the uniform of
// element k is Uniform24(u[k]). min(top, r) rather than min(r, top): a
// NaN r (from a NaN or infinite input, whose norm the decoder refuses anyway) becomes level
// s instead of an undefined float-to-integer conversion.
struct QsgdCodes {
  float per_norm;
  float top;

  template <typename Code>
  void operator()(const float* x, const uint32_t* u, Code* codes) const {
    for (int k = 0; k < kBlockCodes; ++k) {
      const float uk = Uniform24(u[k]);
      const float r = std::min(top, std::fabs(x[k]) * per_norm);
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
  Qsgd(int levels, bool contract) : levels_(static_cast<uint32_t>(levels)), contract_(contract) {}
  std::string_view Name() const override { return "qsgd"; }
  Encoding encoding() const override { return Encoding::kQsgd; }
  bool unbiased() const override { return !contract_; }
  bool contractive() const override { return contract_; }

  void Encode(std::span<const float> x, Rng& rng, Encoded* out) const override {
    ASGD_CHECK(!x.empty(), "qsgd of an empty vector");
    // 32 partial sums in double: vectorisable without reassociating one sum, and enough
    // independent additions to hide their latency. (Each square is exact in double.)
    double lanes[32] = {};
    std::size_t i = 0;
    for (; i + 32 <= x.size(); i += 32) {
      for (std::size_t j = 0; j < 32; ++j) lanes[j] += static_cast<double>(x[i + j]) * x[i + j];
    }
    for (; i < x.size(); ++i) lanes[0] += static_cast<double>(x[i]) * x[i];
    double sq = 0;
    for (double l : lanes) sq += l;
    const auto norm = static_cast<float>(std::sqrt(sq));
    const int bits = CodeBits(levels_);
    ShapeFrames(out, Encoding::kQsgd, static_cast<int64_t>(x.size()),
                {8, PackedWords(x.size(), bits) * 8});
    const QsgdCodes q{norm > 0 ? static_cast<float>(levels_) / norm : 0.0f,
                      static_cast<float>(levels_)};
    float sent_norm = norm;
    if (contract_ && norm > 0 && std::isfinite(norm)) {
      // w = E||Q(x) - x||^2 / ||x||^2: element i is step * (floor(r_i) + Bernoulli(f_i)),
      // variance step^2 f_i (1 - f_i), with r_i as QsgdCodes computes it.
      double spread = 0;
      for (float v : x) {
        const float r = std::min(q.top, std::fabs(v) * q.per_norm);
        const double f = static_cast<double>(r) - std::floor(static_cast<double>(r));
        spread += f * (1 - f);
      }
      const double step = static_cast<double>(norm) / levels_;
      sent_norm = static_cast<float>(norm / (1.0 + step * step * spread / sq));
    }
    std::memcpy(out->frames[0].data(), &sent_norm, 4);
    std::memcpy(out->frames[0].data() + 4, &levels_, 4);
    LaneRng gen(rng.NextU64());
    std::byte* codes = out->frames[1].data();
    const bool narrow =
        WithNarrowWidth(bits, [&](auto b) { EncodeBlocks<decltype(b)::value>(x, gen, q, codes); });
    if (!narrow) EncodeWide(x, bits, gen, q, codes);
  }

 private:
  uint32_t levels_;
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
// refused push writes nothing), a second unpacks again and writes.
template <int B>
std::string DecodeNarrow(std::span<const std::byte> frame, uint32_t levels, float step,
                         std::span<float> out) {
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
  VisitBlocks<B>(frame, out.size(), [&](const uint8_t* c, std::size_t first, std::size_t m) {
    if (m == kBlockCodes) {
      for (int k = 0; k < kBlockCodes; ++k) o[first + k] = Value(c[k], step);
    } else {
      for (std::size_t k = 0; k < m; ++k) o[first + k] = Value(c[k], step);
    }
    return true;
  });
  return {};
}

}  // namespace

std::unique_ptr<Compressor> NewQsgd(int levels, bool contract) {
  return std::make_unique<Qsgd>(levels, contract);
}

std::string DecodeQsgd(Frames frames, std::span<float> out) {
  using ::asgd::internal::StrCat;
  if (std::string e = CheckShape("qsgd", frames, 8); !e.empty()) return e;
  const auto norm = Load<float>(frames[0], 0);
  const auto levels = Load<uint32_t>(frames[0], 4);
  if (std::string e = CheckScale("qsgd", "norm", norm); !e.empty()) return e;
  if (levels == 0 || levels > kMaxQsgdLevels) {
    return StrCat("qsgd levels s = ", levels, ", expected 1 to ", kMaxQsgdLevels);
  }
  const int bits = CodeBits(levels);
  const std::size_t want = PackedWords(out.size(), bits) * 8;
  if (frames[1].size() != want) {
    return StrCat("qsgd code frame has ", frames[1].size(), " bytes, expected ", want, " for ",
                  out.size(), " elements of ", bits, " bits");
  }
  const float step = norm / static_cast<float>(levels);
  std::string problem;
  if (WithNarrowWidth(bits, [&](auto b) {
        problem = DecodeNarrow<decltype(b)::value>(frames[1], levels, step, out);
      })) {
    return problem;
  }
  // Checked in a first pass so that a refused push writes nothing.
  BitReader check(frames[1].data(), bits);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const uint64_t code = check.Get();
    if (!ValidCode(code, levels)) return BadCode(i, code, levels);
  }
  if (!check.RestIsZero()) return kBadPadding;
  BitReader r(frames[1].data(), bits);
  for (float& v : out) v = Value(static_cast<uint32_t>(r.Get()), step);
  return {};
}

}  // namespace asgd::compression::internal
