// dpsgd — decentralized parallel SGD (Lian et al. 2017, "Can Decentralized Algorithms
// Outperform Centralized Algorithms? A Case Study for Decentralized Parallel Stochastic
// Gradient Descent", Algorithm 1) on a ring (algorithm.topology = ring).
//
// Start: θ_i ← broadcast of rank 0's θ_0 (the paper starts every node at the same point).
// Step k: g_i ← ∇L_{B_i}(θ_i); exchange θ_i with the two ring neighbours l = i−1 and
// r = i+1 (mod N) by Send/Recv; θ_i ← W·θ (the row of the mixing matrix W: (θ_l + θ_i +
// θ_r)/3 for N ≥ 3, (θ_i + θ_other)/2 for N = 2, θ_i for N = 1); then
// θ_i ← Step(θ_i, g_i, η·schedule(e)) with the gradient taken at the pre-mixing θ_i, so with
// plain SGD θ_{k+1,i} = Σ_j W_ij θ_{k,j} − η g_i(θ_{k,i}), the paper's update. W is
// symmetric and doubly stochastic, so with zero gradients the average of the θ_i is
// preserved (up to float rounding) while the workers converge to it.
// The exchange is two chains around the ring (to the right, then to the left): gloo's Send
// waits for the peer's Recv, so rank 0 sends first and every other rank receives first;
// each worker sends and receives its vector twice a step (once for N = 2).
// Staleness: 0 by construction (no server; each gradient is applied to the replica it was
// computed on). The runner reports the consensus distance (1/N)·Σ‖θ_i − θ̄‖² beside the
// accuracy of the average θ̄.
#include "algorithms/builtin_strategies.h"
#include "algorithms/collective_worker.h"
#include "core/error.h"

namespace asgd::algorithms {
namespace {

class DpsgdWorker final : public CollectiveWorker {
 public:
  StepResult Step(WorkerEnv& env) override {
    StepResult r;
    r.loss = env.gradient(theta_, grad_);
    collective::Collective& c = *env.collective;
    const int n = c.size();
    if (n > 1) {
      const int i = c.rank();
      const int right = (i + 1) % n;
      const int left = (i + n - 1) % n;
      from_left_.resize(theta_.size());
      // To the right: every rank receives its left neighbour's θ.
      Chain(c, right, left, from_left_, /*tag=*/0);
      if (n == 2) {
        for (std::size_t k = 0; k < theta_.size(); ++k) {
          theta_[k] = (theta_[k] + from_left_[k]) / 2.0f;
        }
      } else {
        from_right_.resize(theta_.size());
        Chain(c, left, right, from_right_, /*tag=*/1);  // to the left
        for (std::size_t k = 0; k < theta_.size(); ++k) {
          theta_[k] = (from_left_[k] + theta_[k] + from_right_[k]) / 3.0f;
        }
      }
      r.pushes = 1;
    }
    env.optimizer->Step(theta_, grad_, Rate(env));
    return r;
  }

 private:
  // One pass around the ring: send θ to `to`, receive from `from` into `in`. Rank 0 sends
  // first, the others receive first, so the blocking sends never wait on each other.
  void Chain(collective::Collective& c, int to, int from, std::span<float> in, uint32_t tag) {
    if (c.rank() == 0) {
      c.Send(to, theta_, tag);
      c.Recv(from, in, tag);
    } else {
      c.Recv(from, in, tag);
      c.Send(to, theta_, tag);
    }
  }

  std::vector<float> from_left_, from_right_;
};

}  // namespace

Strategy DpsgdStrategy() {
  Strategy s;
  s.name = "dpsgd";
  s.description =
      "decentralized parallel SGD: each step every worker averages its parameters "
      "with its two ring neighbours' and applies its gradient (Lian et al. 2017)";
  s.synchronous = true;
  s.collective = true;
  s.can_simulate = false;
  // Not linear_scaling: a gossip step applies one worker's gradient, not an aggregate.
  s.keys = ReadKeys(kOptimizerKeys, {"algorithm.lr_decay", "algorithm.topology"});
  s.steps_per_round = [](const StrategyOptions&) -> int64_t { return 1; };
  s.worker_rule = [](const StrategyOptions& o) -> std::unique_ptr<WorkerRule> {
    if (o.topology != "ring") {
      throw ConfigError("algorithm.topology", o.topology, "ring (the only topology so far)");
    }
    return std::make_unique<DpsgdWorker>();
  };
  return s;
}

}  // namespace asgd::algorithms
