// sync_sgd applies its optimizer on the server, once per round, to the mean of exactly the
// gradients the round accepted (TensorFlow's SyncReplicasOptimizer; issue 21 item 1). The
// shard is driven directly through ps::ShardCore, so which push is dropped is
// chosen by the test: 4 workers, rounds of N = 3, the last arrival of each round dropped.
// Before, the workers applied the optimizer locally: a dropped gradient stayed in its
// worker's velocity and Adam scaled by each worker's own moments; these tests fail there
// (the replay differs from the first momentum or Adam round on).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/optimizer.h"
#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "core/clock.h"
#include "core/error.h"
#include "ps/shard_core.h"

namespace asgd::algorithms {
namespace {

using ps::Op;
using ps::ShardCore;
using ps::ShardSnapshot;

constexpr int kSize = 5;
constexpr int kWorkers = 4;
constexpr int kReplicas = 3;
constexpr double kRate = 0.1;
const std::vector<float> kStart = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f};

class CountReleases final : public ps::ReplySink {
 public:
  void Release(uint64_t, const ps::HeldRequest&, ps::ReplyBuffer*) override { ++released; }
  void Fail(uint64_t, const ps::HeldRequest&, ps::ErrorCode, const std::string&) override {}
  int released = 0;
};

StrategyOptions SyncOptions(const std::string& optimizer) {
  StrategyOptions o;
  o.num_workers = kWorkers;
  o.settings.Set("replicas_to_aggregate", kReplicas);
  o.worker.learning_rate = kRate;
  o.optimizer.name = optimizer;
  o.optimizer.momentum = 0.9;
  // The rate halves every 2 rounds: the server follows the schedule by round.
  o.schedule.decay = 0.5;
  o.epochs_per_batch = 0.5 / kReplicas;  // a round of 3 batches is half an epoch
  return o;
}

// One sync_sgd shard on kStart.
struct SyncShard {
  explicit SyncShard(const StrategyOptions& o) : clock(NewSystemClock()), storage(kStart) {
    ShardCore::Options co;
    co.clock = clock.get();
    core = std::make_unique<ShardCore>(co, FindStrategy("sync_sgd").server_rule(o, 0), &storage,
                                       &replies);
    core->Start();
  }
  // Worker w's gradient, computed on version `pulled`, as the push-pull sync_sgd sends.
  ps::PushOutcome Push(uint32_t w, uint64_t pulled, const std::vector<float>& g) {
    ps::RequestInfo info;
    info.op = Op::kPushPull;
    info.worker = w;
    info.version = pulled;
    info.count = kSize;
    const ShardCore::Result r = core->PushPull(info, ps::Payload(0, {{0, g}}));
    EXPECT_TRUE(r.ok()) << r.message;
    return r.outcome;
  }
  std::vector<float> values() const {
    const auto v = storage.values();
    return {v.begin(), v.end()};
  }

  std::unique_ptr<Clock> clock;
  ps::VectorStorage storage;
  CountReleases replies;
  std::unique_ptr<ShardCore> core;
};

// Worker w's gradient in round r: distinct, and huge for the push each round drops (if it
// left any trace, the replay would be far off).
std::vector<float> Gradient(int round, int w, bool dropped) {
  std::vector<float> g(kSize);
  for (int i = 0; i < kSize; ++i) {
    g[static_cast<std::size_t>(i)] =
        dropped ? 1e3f : 0.1f * static_cast<float>((round + 1) * (w + 2)) - 0.05f * static_cast<float>(i);
  }
  return g;
}

// The worker whose push arrives last (and is dropped) in round r.
int Late(int round) { return (round + 1) % kWorkers; }

// Runs `rounds` rounds on the shard, every worker pushing on the current version, the
// late one after the round closed; returns what a sequential optimizer makes of the means
// of the accepted gradients, summed in worker order as the rule sums them.
std::vector<float> RunAndReplay(SyncShard& shard, const StrategyOptions& o, int first_round,
                                int rounds, Optimizer* reference, std::vector<float> theta) {
  for (int r = first_round; r < first_round + rounds; ++r) {
    const uint64_t version = shard.core->version();
    std::vector<float> sum(kSize, 0.0f);
    for (int w = 0; w < kWorkers; ++w) {
      if (w == Late(r)) continue;
      EXPECT_EQ(shard.Push(static_cast<uint32_t>(w), version, Gradient(r, w, false)),
                ps::PushOutcome::kAccepted);
      const std::vector<float> g = Gradient(r, w, false);
      for (int i = 0; i < kSize; ++i) sum[static_cast<std::size_t>(i)] += g[static_cast<std::size_t>(i)];
    }
    EXPECT_EQ(shard.core->version(), version + 1) << "round " << r;
    // The late push was computed on the round's version: dropped, no trace.
    EXPECT_EQ(shard.Push(static_cast<uint32_t>(Late(r)), version, Gradient(r, Late(r), true)),
              ps::PushOutcome::kDropped);
    const float inv = 1.0f / static_cast<float>(kReplicas);
    for (float& g : sum) g *= inv;
    const double epoch = static_cast<double>(r) * kReplicas * o.epochs_per_batch;
    reference->Step(theta, sum, static_cast<float>(kRate * LearningRateScale(o.schedule, epoch)));
  }
  return theta;
}

class SyncServerOptimizer : public ::testing::TestWithParam<std::string> {};

TEST_P(SyncServerOptimizer, RoundsAreTheOptimizerOnTheMeanOfTheAcceptedGradients) {
  const StrategyOptions o = SyncOptions(GetParam());
  SyncShard shard(o);
  const auto reference = NewOptimizer(o.optimizer, kSize);
  const std::vector<float> expected = RunAndReplay(shard, o, 0, 6, reference.get(), kStart);
  EXPECT_EQ(shard.values(), expected);
  // The slots on the shard are the reference optimizer's.
  const ShardSnapshot snap = shard.core->Snapshot();
  EXPECT_EQ(snap.version, 6u);
  SyncShard twin(o);
  twin.core->Restore(snap);
  EXPECT_EQ(twin.values(), expected);
}

// Save after 3 rounds, restore into a fresh shard, run 3 more: the same as 6 rounds
// without a break (the optimizer's slots and the schedule's round travel with the shard).
TEST_P(SyncServerOptimizer, CheckpointContinuesExactly) {
  const StrategyOptions o = SyncOptions(GetParam());
  SyncShard straight(o);
  const auto ref = NewOptimizer(o.optimizer, kSize);
  const std::vector<float> expected = RunAndReplay(straight, o, 0, 6, ref.get(), kStart);

  SyncShard first(o);
  const auto ref2 = NewOptimizer(o.optimizer, kSize);
  const std::vector<float> half = RunAndReplay(first, o, 0, 3, ref2.get(), kStart);
  const ShardSnapshot snap = first.core->Snapshot();
  SyncShard resumed(o);
  resumed.core->Restore(snap);
  (void)RunAndReplay(resumed, o, 3, 3, ref2.get(), half);
  EXPECT_EQ(resumed.values(), expected);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, SyncServerOptimizer,
                         ::testing::Values("sgd", "momentum", "nesterov", "adagrad", "adam"));

// A checkpoint's slots must be the run's optimizer's: another optimizer's, or none for an
// optimizer that has slots (a checkpoint from before the optimizer moved to the server),
// are refused in one line naming what was expected.
TEST(SyncServerOptimizerState, ForeignOrMissingSlotsAreRefused) {
  SyncShard adam(SyncOptions("adam"));
  (void)RunAndReplay(adam, SyncOptions("adam"), 0, 1,
                     NewOptimizer(SyncOptions("adam").optimizer, kSize).get(), kStart);
  ShardSnapshot snap = adam.core->Snapshot();
  SyncShard momentum(SyncOptions("momentum"));
  try {
    momentum.core->Restore(snap);
    ADD_FAILURE() << "restored adam slots into momentum";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("saved by the adam optimizer, this run uses momentum"),
              std::string::npos)
        << e.what();
  }
  snap.rule_state.clear();
  try {
    momentum.core->Restore(snap);
    ADD_FAILURE() << "restored no slots into momentum";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("none in the checkpoint, expected the momentum"),
              std::string::npos)
        << e.what();
  }
  SyncShard sgd(SyncOptions("sgd"));
  EXPECT_NO_THROW(sgd.core->Restore(snap));  // plain SGD has no slots to lose
}

}  // namespace
}  // namespace asgd::algorithms
