// qsgd: s-level stochastic quantization with the vector's 2-norm (Alistarh, Grubic, Li,
// Tomioka & Vojnovic 2017, "QSGD: Communication-Efficient SGD via Gradient Quantization
// and Encoding", Q_s). Element i becomes norm * sign(x_i) * l / s, with l = floor(r) + 1
// with probability r - floor(r), else floor(r), where r = |x_i| / norm * s: unbiased,
// variance at most (norm / s)^2 / 4 per coordinate. Codes are bit-packed in 1 + bit_width(s)
// bits (the paper's Elias coding is left out: fixed-width codes decode without branches).
#include <bit>
#include <cmath>

#include "compression/bit_pack.h"
#include "compression/builtin_compressors.h"
#include "core/check.h"

namespace asgd::compression::internal {
namespace {

int CodeBits(uint32_t levels) { return 1 + std::bit_width(levels); }

class Qsgd final : public Compressor {
 public:
  explicit Qsgd(int levels) : levels_(static_cast<uint32_t>(levels)) {}
  std::string_view Name() const override { return "qsgd"; }
  Encoding encoding() const override { return Encoding::kQsgd; }
  bool unbiased() const override { return true; }

  void Encode(std::span<const float> x, Rng& rng, Encoded* out) const override {
    ASGD_CHECK(!x.empty(), "qsgd of an empty vector");
    // Eight partial sums in double: vectorisable without reassociating one sum.
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::size_t i8 = 0;
    for (; i8 + 8 <= x.size(); i8 += 8) {
      for (std::size_t j = 0; j < 8; ++j) lanes[j] += static_cast<double>(x[i8 + j]) * x[i8 + j];
    }
    for (; i8 < x.size(); ++i8) lanes[0] += static_cast<double>(x[i8]) * x[i8];
    double sq = 0;
    for (double l : lanes) sq += l;
    const auto norm = static_cast<float>(std::sqrt(sq));
    const int bits = CodeBits(levels_);
    ShapeFrames(out, Encoding::kQsgd, static_cast<int64_t>(x.size()),
                {8, PackedWords(x.size(), bits) * 8});
    std::memcpy(out->frames[0].data(), &norm, 4);
    std::memcpy(out->frames[0].data() + 4, &levels_, 4);
    BitWriter w(reinterpret_cast<uint64_t*>(out->frames[1].data()), bits);
    const float per_norm = norm > 0 ? static_cast<float>(levels_) / norm : 0.0f;
    const float top = static_cast<float>(levels_);
    uint64_t random = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      // One 64-bit draw serves two elements.
      if ((i & 1) == 0) random = rng.NextU64();
      const float u = Uniform24((i & 1) == 0 ? random >> 32 : random & 0xffffffffu);
      const float r = std::min(std::fabs(x[i]) * per_norm, top);
      const float fl = std::floor(r);
      uint64_t level = static_cast<uint64_t>(fl) + (u < r - fl ? 1 : 0);
      level = std::min<uint64_t>(level, levels_);
      const uint64_t sign = level > 0 && x[i] < 0 ? 1 : 0;
      w.Put(level << 1 | sign);
    }
    w.Finish();
  }

 private:
  uint32_t levels_;
};

}  // namespace

std::unique_ptr<Compressor> NewQsgd(int levels) { return std::make_unique<Qsgd>(levels); }

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
  // Checked in a first pass so that a refused push writes nothing.
  BitReader check(frames[1].data(), bits);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const uint64_t code = check.Get();
    const uint64_t level = code >> 1;
    if (level > levels || (level == 0 && (code & 1) != 0)) {
      return StrCat("qsgd code ", i, " has level ", level, (code & 1) ? " (negative)" : "",
                    ", expected 0 to s = ", levels, " and no sign on level 0");
    }
  }
  if (!check.RestIsZero()) return "qsgd code frame has non-zero padding bits";
  const float step = norm / static_cast<float>(levels);
  BitReader r(frames[1].data(), bits);
  for (float& v : out) {
    const uint64_t code = r.Get();
    const float mag = step * static_cast<float>(code >> 1);
    v = (code & 1) ? -mag : mag;
  }
  return {};
}

}  // namespace asgd::compression::internal
