// topk: the k coordinates of largest magnitude, sent as index/value pairs (Aji & Heafield
// 2017, "Sparse Communication for Distributed Gradient Descent"; Lin et al. 2018, "Deep
// Gradient Compression"). Biased: pair it with error feedback.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "compression/builtin_compressors.h"
#include "core/check.h"

namespace asgd::compression::internal {
namespace {

// A NaN ranks above everything (so it is sent, and the shard refuses the push as it would
// a dense one); nth_element needs a strict weak order.
float Magnitude(float v) {
  return std::isnan(v) ? std::numeric_limits<float>::infinity() : std::fabs(v);
}

// The k-th largest magnitude of x (1 <= k <= n). Lin et al.'s sampling, made exact: the
// magnitudes of a strided sample give a threshold that about 2k elements pass; the exact
// k-th largest is then selected among those (nth_element on ~2k floats instead of n).
// When fewer than k pass (a skewed sample), nth_element over all n magnitudes. *above is
// set to the number of magnitudes strictly greater than the one returned (< k).
thread_local std::vector<float> pool;

// The k-th largest of pool (reordered), and how many in it are strictly greater: those
// nth_element put before it.
float KthOfPool(int64_t k, int64_t* above) {
  std::nth_element(pool.begin(), pool.begin() + (k - 1), pool.end(), std::greater<float>());
  const float kth = pool[static_cast<std::size_t>(k - 1)];
  *above = 0;
  for (int64_t j = 0; j < k - 1; ++j) *above += pool[static_cast<std::size_t>(j)] > kth;
  return kth;
}

float KthLargest(std::span<const float> x, int64_t k, int64_t* above) {
  const auto n = static_cast<int64_t>(x.size());
  constexpr int64_t kSample = 4096;
  if (n > 4 * kSample && k < n / 8) {
    const int64_t stride = n / kSample;
    pool.clear();
    for (int64_t i = 0; i < n; i += stride)
      pool.push_back(Magnitude(x[static_cast<std::size_t>(i)]));
    const auto s = static_cast<int64_t>(pool.size());
    // Rank of the sample element about 2k of the n pass, with a margin for small k.
    const int64_t rank = std::min<int64_t>(s - 1, 2 * k * s / n + 8);
    std::nth_element(pool.begin(), pool.begin() + rank, pool.end(), std::greater<float>());
    const float cut = pool[static_cast<std::size_t>(rank)];
    pool.clear();
    for (float v : x) {
      const float m = Magnitude(v);
      if (m >= cut) pool.push_back(m);
    }
    // Every magnitude >= cut is in the pool, so its k-th largest is x's.
    if (static_cast<int64_t>(pool.size()) >= k) return KthOfPool(k, above);
  }
  pool.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) pool[i] = Magnitude(x[i]);
  return KthOfPool(k, above);
}

class TopK final : public Compressor {
 public:
  explicit TopK(double ratio) : ratio_(ratio) {}
  std::string_view Name() const override { return "topk"; }
  Encoding encoding() const override { return Encoding::kTopK; }
  bool unbiased() const override { return false; }
  bool contractive() const override { return true; }  // delta = k / n

 protected:
  void DoEncode(std::span<const float> x, std::span<const int64_t> /*pieces*/, Rng& /*rng*/,
                Encoded* out) const override {
    const auto n = static_cast<int64_t>(x.size());
    ASGD_CHECK(n >= 1 && n <= int64_t{UINT32_MAX}, "topk of ", n, " elements");
    const int64_t k = SparseK(ratio_, n);
    int64_t above = 0;
    const float threshold = KthLargest(x, k, &above);
    // One pass in index order takes every element above the threshold and the
    // lowest-indexed ties at it: the k largest, ties to the lower index, already in the
    // wire's increasing order.
    int64_t ties = k - above;  // elements equal to the threshold still to take
    ShapeFrames(out, Encoding::kTopK, n,
                {static_cast<std::size_t>(k) * 4, static_cast<std::size_t>(k) * 4});
    auto* indices = reinterpret_cast<uint32_t*>(out->frames[0].data());
    auto* values = reinterpret_cast<float*>(out->frames[1].data());
    int64_t j = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float m = Magnitude(x[i]);
      if (m > threshold || (m == threshold && ties > 0)) {
        if (m == threshold) --ties;
        indices[j] = static_cast<uint32_t>(i);
        values[j] = x[i];
        ++j;
      }
    }
    ASGD_CHECK_EQ(j, k, "topk chose the wrong number of coordinates");
  }

 private:
  double ratio_;
};

}  // namespace

std::unique_ptr<Compressor> NewTopK(double ratio) { return std::make_unique<TopK>(ratio); }

}  // namespace asgd::compression::internal
