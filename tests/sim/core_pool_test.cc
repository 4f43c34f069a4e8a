// The host's cores (sim/core_pool.h): first come, first served on the earliest-free core.
#include "sim/core_pool.h"

#include <gtest/gtest.h>

namespace asgd::sim {
namespace {

using std::chrono::milliseconds;

// k workers asking at once for steps of d on C cores: they end in waves, C per wave, at
// d, 2d, ...; the pool reports how long they waited in all.
TEST(CorePool, StepsQueueInWavesOfCores) {
  const Duration d = milliseconds(10);
  for (int cores : {1, 2, 3}) {
    CorePool pool(cores);
    Duration waited{};
    for (int i = 0; i < 7; ++i) {
      const Duration end = pool.Run(Duration::zero(), d);
      EXPECT_EQ(end, (i / cores + 1) * d) << "cores " << cores << ", step " << i;
      waited += end - d;
    }
    EXPECT_EQ(pool.waited(), waited) << cores;
  }
}

// A saturated host completes C steps per step time, whatever the number of workers; a
// step asked for after a core freed starts at once.
TEST(CorePool, ThroughputIsCoresPerStepTimeAndIdleCoresStartAtOnce) {
  CorePool pool(2);
  const Duration d = milliseconds(4);
  Duration now{};
  Duration last{};
  for (int i = 0; i < 100; ++i) last = pool.Run(now, d);  // all asked at time 0
  EXPECT_EQ(last, 50 * d);
  EXPECT_EQ(pool.Run(last + milliseconds(1), d), last + milliseconds(1) + d);
}

TEST(CorePool, ZeroCoresIsAMachinePerWorker) {
  CorePool pool(0);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(pool.Run(milliseconds(3), milliseconds(10)), milliseconds(13));
  EXPECT_EQ(pool.waited(), Duration::zero());
}

}  // namespace
}  // namespace asgd::sim
