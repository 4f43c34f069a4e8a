// The server side of the synchronous strategies: rounds of N pushes computed on the same
// version, combined in worker order once the N-th arrives.
//
// A push (sent as a push-pull, so the worker waits for the round) whose version is older
// than the round's is stale: it is dropped (PushOutcome::kDropped, counted) and answered
// at once with the current values, so its worker continues from the new version; this is
// TensorFlow's SyncReplicasOptimizer with replicas_to_aggregate N < total replicas M
// ("backup workers": the M − N slowest pushes of a step are dropped). Fresh pushes are
// held (their replies deferred) until N have arrived; then the combination is applied,
// the version advances by one and every held reply is released with the new values.
//
// Combinations:
//   kMeanAdd      θ̃ ← θ̃ + (1/N) Σ u_k      sync SGD, SAGN (mean aggregation, TF's default)
//   kSumAdd       θ̃ ← θ̃ + Σ u_k            synchronous EASGD (the elastic differences)
//   kMeanReplace  θ̃ ← (1/N) Σ u_k          model averaging (u_k are parameters)
//   kSignVote     g = sign(Σ sign(u_k))     signsgd_vote (majority vote; needs a ServerStep,
//                                           applied as θ̃ ← θ̃ − η·g by plain sgd)
// where sign(x) ∈ {−1, 0, +1}, sign(0) = 0: a push's zero is no vote, and a tie moves
// nothing.
// The sum is taken in worker-index order, so a round's result does not depend on the
// order in which its pushes arrived. Convention (docs/algorithms.md#sync_sgd): a round takes
// exactly the first N fresh pushes; a worker's second push to the same round replaces
// nothing and is dropped.
// Server optimizer (sync_sgd): with a ServerStep the pushes are gradients and a round
// applies the wrapped optimizer once to their mean (kMeanAdd) or sum (kSumAdd):
//   θ̃ ← optimizer step of θ̃ with g = (1/N) Σ g_k, rate η·schedule(round · epochs_per_round)
// as TensorFlow's SyncReplicasOptimizer applies it on the parameter server. The optimizer's
// slots (velocity, accumulators, moments) live on the shard, over the shard's elements,
// are saved by SaveState and restored by LoadState; a dropped push never reaches them.
// Lost workers (multi-process runs): the coordinator tells every shard how many workers
// are alive, and N becomes min(N, alive) until they come back (OnMembership).
// Checkpoints: a round still open is not saved (its pushes are held requests, which do not
// outlive the process); after a restore the workers push to a fresh round.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/optimizer.h"
#include "algorithms/schedule.h"
#include "ps/server_rule.h"

namespace asgd::algorithms {

struct Setting;          // settings.h
struct StrategyOptions;  // strategy.h

// The settings of the strategies on rounds (sync_sgd, sagn, signsgd_vote), declared by each:
// algorithm.replicas_to_aggregate, N, the fresh pushes one round applies (0 = every
// worker; at most algorithm.workers), and algorithm.aggregation (sync_sgd, sagn: "mean",
// TensorFlow's SyncReplicasOptimizer, or "sum" of a round's pushes).
Setting ReplicasSetting();
Setting AggregationSetting();
// N for synchronous rounds: replicas_to_aggregate, or every worker.
int Replicas(const StrategyOptions& o);

class SyncRule final : public ps::ServerRule {
 public:
  enum class Combine { kMeanAdd, kSumAdd, kMeanReplace, kSignVote };
  // The optimizer a round applies to the combined gradients (see above).
  struct ServerStep {
    OptimizerOptions optimizer;
    double learning_rate = 0.05;    // η, the base rate
    ScheduleOptions schedule;
    double epochs_per_round = 0;    // the schedule's epoch advances this much per round
  };
  // REQUIRES: step only with kMeanAdd, kSumAdd or kSignVote; kSignVote with a step whose
  // optimizer is sgd.
  SyncRule(int replicas_to_aggregate, Combine combine, std::string name,
           std::optional<ServerStep> step = std::nullopt);
  // kMeanAdd for "mean", kSumAdd for "sum" (algorithm.aggregation); ConfigError otherwise.
  static Combine FromAggregation(const std::string& aggregation);

  std::string Name() const override { return name_; }
  void Start(ps::ShardContext& ctx) override;
  ps::PushOutcome OnPush(ps::ShardContext& ctx, ps::ServerCall& call) override;
  ps::PushOutcome OnPushPull(ps::ShardContext& ctx, ps::ServerCall& call) override {
    return OnPush(ctx, call);
  }
  // Rounds re-formed with the survivors: N becomes min(replicas_to_aggregate, live
  // workers); a round that already holds that many pushes completes now.
  void OnMembership(ps::ShardContext& ctx, int live_workers) override;
  // The server optimizer's slots (empty without a ServerStep).
  std::string SaveState() const override;
  void LoadState(std::string_view state) override;

 private:
  // Combines the round's pushes (in worker order, mean over the pushes it holds), applies
  // them and releases the held calls.
  void Complete(ps::ShardContext& ctx);

  int configured_n_;
  int n_;
  Combine combine_;
  std::string name_;
  std::map<uint32_t, std::vector<float>> round_;  // worker -> its push, this round
  std::vector<uint64_t> held_;
  int64_t count_ = 0;  // shard elements
  std::optional<ServerStep> step_;
  std::unique_ptr<Optimizer> optimizer_;  // with step_, from Start
};

}  // namespace asgd::algorithms
