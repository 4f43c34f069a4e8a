// dc_asgd and staleness_aware apply their rate on the server; with algorithm.lr_decay the
// server decays it per epoch of the batches it has applied (issue 21 item 3: "where the
// paper's rule has a rate schedule, apply the run's schedule on the server"). With one
// worker both are SGD (dc_asgd: w = w_bak; staleness_aware: c = 1, s = 0), so they must
// follow sequential SGD with the same per-epoch decay. Before, the server ignored the
// schedule (and lr_decay was an ignored key for them).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "algorithms/schedule.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {
namespace {

using namespace ::asgd::algorithms::testing;  // NOLINT: the fixtures of this suite

TEST(ServerSchedule, DcAsgdAndStalenessAwareDecayTheirServerRatePerEpoch) {
  constexpr int kSteps = 9;
  StrategyOptions o = Options(0.2, 1);
  o.schedule.decay = 0.5;
  o.epochs_per_batch = 0.25;  // 4 batches an epoch: the rate halves after pushes 4 and 8
  const Quadratic q(kDim);
  std::vector<float> expected = kInit, g(kDim);
  auto fn = q.Fn();
  for (int step = 0; step < kSteps; ++step) {
    fn(expected, g);
    const auto lr = static_cast<float>(0.2 * LearningRateScale(o.schedule, step * 0.25));
    for (int i = 0; i < kDim; ++i) expected[i] -= lr * g[i];
  }
  for (const char* name : {"dc_asgd", "staleness_aware"}) {
    Harness h(name, 1, o);
    h.Run(kSteps);
    const auto got = h.store->values();
    for (int i = 0; i < kDim; ++i) EXPECT_NEAR(got[i], expected[i], 1e-6f) << name << " " << i;
  }
  // Without decay the rate stays: the same run ends elsewhere.
  o.schedule.decay = 1.0;
  Harness flat("dc_asgd", 1, o);
  flat.Run(kSteps);
  EXPECT_GT(std::fabs(flat.store->values()[0] - expected[0]), 1e-4f);
}

}  // namespace
}  // namespace asgd::algorithms
