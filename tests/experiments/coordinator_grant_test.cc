// GrantBudget (experiments/cluster/coordinator.h): the budgets the coordinator of a run as
// processes grants its workers.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "experiments/cluster/coordinator.h"

namespace asgd::experiments::cluster {
namespace {

TEST(GrantBudget, SplitsWhatIsLeftAmongTheLiveWorkers) {
  // 1,000 samples; this worker did 100, its peers 100 and 200 with grants of 300 each:
  // 1,000 - 100 - 300 - 300 = 300 left, a third each.
  const std::vector<PeerBudget> peers = {{100, 300, false}, {200, 300, false}};
  EXPECT_EQ(GrantBudget(1000, 100, peers, 10, false), 200);
  // A lost peer's unused grant goes back: it holds only what it did.
  const std::vector<PeerBudget> one_lost = {{100, 300, true}, {200, 300, false}};
  EXPECT_EQ(GrantBudget(1000, 100, one_lost, 10, false), 100 + 250);
}

TEST(GrantBudget, AtLeastABatchWhileAnythingIsLeft) {
  const std::vector<PeerBudget> peers = {{495, 498, false}};
  EXPECT_EQ(GrantBudget(1000, 495, peers, 32, false), 495 + 32);
}

// The hang this prevents: an ssp worker (or one in a synchronous round with a backup
// worker) holds a grant it cannot use until its peers step; its peers must still get
// something while the run is short of its total.
TEST(GrantBudget, ABatchWhenThePeersHoldEveryGrantButTheRunIsNotDone) {
  const std::vector<PeerBudget> holding = {{400, 700, false}};  // granted 700, did 400
  EXPECT_EQ(GrantBudget(1000, 300, holding, 32, false), 300 + 32);
  // Done: nothing more, whatever the grants.
  const std::vector<PeerBudget> done = {{700, 700, false}};
  EXPECT_EQ(GrantBudget(1000, 300, done, 32, false), 300);
}

TEST(GrantBudget, NothingWhilePaused) {
  const std::vector<PeerBudget> peers = {{100, 100, false}};
  EXPECT_EQ(GrantBudget(1000, 100, peers, 32, true), 100);
}

}  // namespace
}  // namespace asgd::experiments::cluster
