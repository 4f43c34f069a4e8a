// topk: the k coordinates of largest magnitude, sent as index/value pairs (Aji & Heafield
// 2017, "Sparse Communication for Distributed Gradient Descent"; Lin et al. 2018, "Deep
// Gradient Compression"). Biased: pair it with error feedback.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "compression/builtin_compressors.h"
#include "core/check.h"

namespace asgd::compression::internal {
namespace {

class TopK final : public Compressor {
 public:
  explicit TopK(double ratio) : ratio_(ratio) {}
  std::string_view Name() const override { return "topk"; }
  Encoding encoding() const override { return Encoding::kTopK; }
  bool unbiased() const override { return false; }

  void Encode(std::span<const float> x, Rng& /*rng*/, Encoded* out) const override {
    const auto n = static_cast<int64_t>(x.size());
    ASGD_CHECK(n >= 1 && n <= int64_t{UINT32_MAX}, "topk of ", n, " elements");
    const int64_t k = SparseK(ratio_, n);
    // nth_element is linear on average; only the k chosen indices are sorted (for the
    // wire's increasing order). Ties at the threshold go to the lower index, so the
    // choice does not depend on the library's partition order.
    thread_local std::vector<uint32_t> order;
    order.resize(x.size());
    std::iota(order.begin(), order.end(), 0u);
    auto larger = [&x](uint32_t a, uint32_t b) {
      const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
      return fa > fb || (fa == fb && a < b);
    };
    if (k < n) std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), larger);
    std::sort(order.begin(), order.begin() + k);
    ShapeFrames(out, Encoding::kTopK, n,
                {static_cast<std::size_t>(k) * 4, static_cast<std::size_t>(k) * 4});
    std::memcpy(out->frames[0].data(), order.data(), static_cast<std::size_t>(k) * 4);
    auto* values = reinterpret_cast<float*>(out->frames[1].data());
    for (int64_t j = 0; j < k; ++j) values[j] = x[order[static_cast<std::size_t>(j)]];
  }

 private:
  double ratio_;
};

}  // namespace

std::unique_ptr<Compressor> NewTopK(double ratio) { return std::make_unique<TopK>(ratio); }

}  // namespace asgd::compression::internal
