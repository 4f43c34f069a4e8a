// sign: one bit per coordinate and one scale (Seide, Fu, Droppo, Li & Yu 2014, "1-Bit
// Stochastic Gradient Descent"; Bernstein, Wang, Azizzadenesheli & Anandkumar 2018,
// "signSGD"), with the scale of Karimireddy, Rebjock, Stich & Jaggi 2019 ("Error Feedback
// Fixes SignSGD and other Gradient Compression Schemes", EF-SignSGD): C(x) = ||x||_1 / d *
// sign(x). Deterministic and biased: pair it with error feedback. A zero coordinate is
// sent as +scale (one bit has no third value).
#include <cmath>

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

  void Encode(std::span<const float> x, Rng& /*rng*/, Encoded* out) const override {
    ASGD_CHECK(!x.empty(), "sign of an empty vector");
    const std::size_t n = x.size();
    ShapeFrames(out, Encoding::kSign, static_cast<int64_t>(n), {4, PackedWords(n, 1) * 8});
    auto* words = reinterpret_cast<uint64_t*>(out->frames[1].data());
    // Four partial sums keep the loop vectorisable without -ffast-math.
    double l1[4] = {0, 0, 0, 0};
    std::size_t i = 0;
    for (std::size_t w = 0; i < n; ++w) {
      const std::size_t end = std::min(n, i + 64);
      uint64_t word = 0;
      for (std::size_t b = 0; i < end; ++i, ++b) {
        word |= static_cast<uint64_t>(x[i] < 0) << b;
        l1[b & 3] += std::fabs(x[i]);
      }
      words[w] = word;
    }
    const auto scale = static_cast<float>((l1[0] + l1[1] + l1[2] + l1[3]) / static_cast<double>(n));
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
