// dpsgd — decentralized parallel SGD (Lian et al. 2017, "Can Decentralized Algorithms
// Outperform Centralized Algorithms? A Case Study for Decentralized Parallel Stochastic
// Gradient Descent", Algorithm 1) on a ring (algorithm.topology = ring).
//
// Start: θ_i ← broadcast of rank 0's θ_0 (the paper starts every node at the same point).
// Step k: g_i ← ∇L_{B_i}(θ_{k,i}); the optimizer's update u_i of g_i computed at θ_{k,i}
// (weight decay λ·θ_{k,i} folded into g_i there, and the slots advanced); exchange θ_{k,i}
// with the two ring neighbours l = i−1 and r = i+1 (mod N) by Send/Recv; then
//   θ_{k+1,i} = (θ_{k,l} + θ_{k,i} + θ_{k,r})/3 + u_i,
// the row of the ring's mixing matrix W (⅓ to itself and to each neighbour) plus the
// update. With plain SGD u_i = −η(g_i + λθ_{k,i}), so θ_{k+1,i} = Σ_j W_ij θ_{k,j} −
// η ∇f_i(θ_{k,i}): the paper's update, gradient and regulariser both at θ_{k,i}. W is
// symmetric and doubly stochastic, so with zero gradients the average of the θ_i is
// preserved (up to float rounding) while the workers converge to it.
//
// Momentum (and Adam, Adagrad) is asgd's variant, not in Lian et al., whose Algorithm 1
// is plain SGD: each worker keeps its own optimizer slots, fed with its gradients at
// θ_{k,i} and never exchanged, and its update is added to the gossiped point — momentum:
// v_i ← μ·v_i + g_i + λθ_{k,i}; θ_{k+1,i} = Σ_j W_ij θ_{k,j} − η·v_i. (Gossiping the
// locally updated θ − η·v instead, as in the decentralized momentum SGD other papers
// study, is another algorithm.)
//
// Workers: N = 1 is plain SGD (W = 1, no exchange). N = 2 and N = 3 are refused: a ring of
// 2 has one neighbour (the row would be ½/½) and a ring of 3 has both other workers as
// neighbours (the row ⅓, ⅓, ⅓ covers everyone), so every step would be a complete average
// of all the workers (as local_sgd with window = 1 takes, though dpsgd would then add each
// worker's own step), not the partial mixing of D-PSGD at N >= 4.
//
// The exchange is two chains around the ring (to the right, then to the left): gloo's Send
// waits for the peer's Recv, so even ranks send first and odd ranks receive first (Chain);
// each worker sends and receives its vector twice a step. One gossip step is one
// communication round (StepResult::pushes = 1).
// Staleness: 0 by construction (no server; each gradient is applied to the replica it was
// computed on). The runner reports the consensus distance (1/N)·Σ‖θ_i − θ̄‖² beside the
// accuracy of the average θ̄.
#include <string>

#include "algorithms/builtin_strategies.h"
#include "algorithms/collective_worker.h"
#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {
namespace {

class DpsgdWorker final : public CollectiveWorker {
 public:
  StepResult Step(WorkerEnv& env) override {
    StepResult r;
    r.loss = env.gradient(theta_, grad_);
    // The update at θ_{k,i} (weight decay too), before θ is mixed.
    update_.resize(theta_.size());
    algorithms::Optimizer::Accumulate into;
    into.applied = update_;
    into.assign = true;
    into.skip_params = true;
    env.optimizer->Step(theta_, grad_, Rate(env), into);
    collective::Collective& c = *env.collective;
    const int n = c.size();
    if (n > 1) {
      ASGD_CHECK(n >= 4, "dpsgd needs 1 or at least 4 workers");
      const int i = c.rank();
      const int right = (i + 1) % n;
      const int left = (i + n - 1) % n;
      from_left_.resize(theta_.size());
      from_right_.resize(theta_.size());
      Chain(c, right, left, from_left_, /*tag=*/0);   // to the right
      Chain(c, left, right, from_right_, /*tag=*/1);  // to the left
      for (std::size_t k = 0; k < theta_.size(); ++k) {
        theta_[k] = (from_left_[k] + theta_[k] + from_right_[k]) / 3.0f;
      }
      r.pushes = 1;
    }
    for (std::size_t k = 0; k < theta_.size(); ++k) theta_[k] += update_[k];
    return r;
  }

 private:
  // One exchange around the ring: send θ to `to`, receive from `from` into `in`. Even
  // ranks send first and odd ranks receive first, so every send meets a receive at once
  // and the exchange takes the same two hops whatever the number of workers, as D-PSGD's
  // neighbour averaging intends. (With an odd number of workers the last rank and rank 0
  // are both even: the last rank's send waits one more hop, for rank 0's receive.) Rank 0
  // first and everyone else receiving first, as before, made a chain of N hops.
  void Chain(collective::Collective& c, int to, int from, std::span<float> in, uint32_t tag) {
    if (c.rank() % 2 == 0) {
      c.Send(to, theta_, tag);
      c.Recv(from, in, tag);
    } else {
      c.Recv(from, in, tag);
      c.Send(to, theta_, tag);
    }
  }

  std::vector<float> from_left_, from_right_, update_;
};

}  // namespace

Strategy DpsgdStrategy() {
  Strategy s;
  s.name = "dpsgd";
  s.description =
      "decentralized parallel SGD: each step every worker averages its parameters "
      "with its two ring neighbours' and applies its gradient (Lian et al. 2017)";
  s.synchronous = true;
  s.family = Family::kGroup;
  // Not linear_scaling: a gossip step applies one worker's gradient, not an aggregate.
  s.keys = ReadKeys(kOptimizerKeys, {"algorithm.lr_decay"});
  s.settings = {ChoiceSetting("topology", "ring", {"ring"},
                              "the communication graph; ring = each worker averages its "
                              "parameters with its two neighbours' (Lian et al. 2017)")};
  s.steps_per_round = [](const StrategyOptions&) -> int64_t { return 1; };
  s.worker_rule = [](const StrategyOptions& o) -> std::unique_ptr<WorkerRule> {
    if (o.settings.String("topology") != "ring") {
      throw ConfigError("algorithm.topology", o.settings.String("topology"),
                        "ring (the only topology so far)");
    }
    if (o.num_workers == 2 || o.num_workers == 3) {
      throw ConfigError(
          "algorithm.workers", std::to_string(o.num_workers),
          "1 or at least 4 with dpsgd: on a ring of 2 or 3 every worker is its neighbours' "
          "neighbour, so every step would average all the workers exactly (the complete "
          "average local_sgd with window = 1 takes), not D-PSGD's partial mixing");
    }
    return std::make_unique<DpsgdWorker>();
  };
  return s;
}

}  // namespace asgd::algorithms
