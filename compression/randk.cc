// randk: k coordinates drawn uniformly without replacement (Stich, Cordonnier & Jaggi 2018,
// "Sparsified SGD with Memory"). Without error feedback each is scaled by n / k so that
// the sent vector is unbiased, variance per coordinate x_i^2 (n / k - 1): E||C(x) - x||^2 =
// (n / k - 1)||x||^2, which error feedback would feed back and grow. With error feedback
// they are sent as they are (the paper's rand-k with memory): E||C(x) - x||^2 = (1 - k / n)
// ||x||^2, a contraction.
#include <bit>
#include <cmath>

#include "compression/builtin_compressors.h"
#include "core/check.h"

namespace asgd::compression::internal {
namespace {

class RandK final : public Compressor {
 public:
  RandK(double ratio, bool scaled) : ratio_(ratio), scaled_(scaled) {}
  std::string_view Name() const override { return "randk"; }
  Encoding encoding() const override { return Encoding::kRandK; }
  bool unbiased() const override { return scaled_; }
  bool contractive() const override { return !scaled_; }

 protected:
  void DoEncode(std::span<const float> x, std::span<const int64_t> /*pieces*/, Rng& rng,
                Encoded* out) const override {
    const auto n = static_cast<int64_t>(x.size());
    ASGD_CHECK(n >= 1 && n <= int64_t{UINT32_MAX}, "randk of ", n, " elements");
    const int64_t k = SparseK(ratio_, n);
    // Floyd's algorithm: k draws give a uniform k-subset; a bitmap of n bits marks it and
    // is read back in increasing order.
    thread_local std::vector<uint64_t> chosen;
    chosen.assign((x.size() + 63) / 64, 0);
    auto test_and_set = [](uint64_t j) {
      uint64_t& w = chosen[j / 64];
      const uint64_t bit = uint64_t{1} << (j % 64);
      const bool was = (w & bit) != 0;
      w |= bit;
      return was;
    };
    for (int64_t j = n - k; j < n; ++j) {
      const uint64_t t = rng.UniformInt(static_cast<uint64_t>(j) + 1);
      if (test_and_set(t)) test_and_set(static_cast<uint64_t>(j));
    }
    ShapeFrames(out, Encoding::kRandK, n,
                {static_cast<std::size_t>(k) * 4, static_cast<std::size_t>(k) * 4});
    auto* indices = reinterpret_cast<uint32_t*>(out->frames[0].data());
    auto* values = reinterpret_cast<float*>(out->frames[1].data());
    const double scale = scaled_ ? static_cast<double>(n) / static_cast<double>(k) : 1.0;
    int64_t j = 0;
    for (std::size_t w = 0; w < chosen.size(); ++w) {
      for (uint64_t bits = chosen[w]; bits != 0; bits &= bits - 1) {
        const auto i = static_cast<uint32_t>(w * 64 + std::countr_zero(bits));
        indices[j] = i;
        values[j] = static_cast<float>(scale * x[i]);
        ++j;
      }
    }
    ASGD_CHECK_EQ(j, k, "randk chose the wrong number of coordinates");
  }

 private:
  double ratio_;
  bool scaled_;
};

}  // namespace

std::unique_ptr<Compressor> NewRandK(double ratio, bool scaled) {
  return std::make_unique<RandK>(ratio, scaled);
}

}  // namespace asgd::compression::internal
