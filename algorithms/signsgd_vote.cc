// signsgd_vote — signSGD with majority vote (Bernstein, Wang, Azizzadenesheli & Anandkumar,
// ICML 2018, "signSGD: Compressed Optimisation for Non-Convex Problems", §3; Bernstein,
// Zhao, Azizzadenesheli & Anandkumar, ICLR 2019, "signSGD with Majority Vote is
// Communication Efficient and Fault Tolerant", Algorithm 1).
//
// Worker k: g_k ← ∇L_B(θ) + λθ (λ = algorithm.weight_decay, θ the worker's copy, which is
// the server's θ of the last reply); with β = algorithm.sign_momentum > 0 (Signum) its
// momentum m_k ← β·m_k + (1 − β)·g_k (m_k = 0 at the start) stands for g_k; it pushes
// v_k = sign(g_k) (or sign(m_k)) as a push-pull that returns when the round is complete,
// with the new θ.
//
// Weight decay is coupled L2 inside the momentum, as in the authors' reference Signum
// (J. Zhao, Signum_pytorch, signum.py: `d_p.add_(weight_decay, p.data)` before the momentum
// buffer takes d_p; Zhao is a co-author of the ICLR 2019 paper): the decay term enters
// the sign, so with β = 0 the push is sign(g + λθ); not the decoupled form (θ ← θ − ηλθ
// applied beside the vote).
//
// The worker's sign is ±1 only, so that one bit carries it: sign(x) = +1 for x > 0, −1 for
// x < 0, and for an exact zero (+0 or −0) a fair coin, +1 or −1 with probability ½ each,
// from the worker's own stream (WorkerEnv::seed, derived from the run's seed and the
// worker). The coin is unbiased: a coordinate whose gradient is 0 on every worker (a dead
// ReLU unit, a parameter the loss does not use) gets a vote of mean 0 and does not drift.
// A fixed sign(0) = +1 made such a vote unanimous, and the coordinate moved by −η every
// round for ever. (The reference Signum's torch.sign gives 0 for 0, which one bit cannot
// carry.) A NaN stays NaN: the shard refuses the push.
//
// Server (SyncRule, Combine::kSignVote): a round takes the first N fresh pushes (N =
// algorithm.replicas_to_aggregate, default every worker) and steps
//   θ ← θ − η·schedule(e)·sign(Σ_k sign(v_k)),
// the majority vote, where a tie (Σ = 0, possible with an even N) is sign(0) = 0: the
// coordinate does not move. Each push is read as sign(decoded value) on the server, so the
// vote counts workers whatever magnitude the encoding carried. e = rounds·N·B / training
// examples (algorithm.lr_decay). Applying the vote on the parameter server and replying
// with θ is the paper's "workers apply x ← x − η·V" with every worker holding the same x.
//
// On the wire: with compression.name = sign the push is the sign compressor's encoding —
// one bit per coordinate and a float scale, which for a vector of ±1 is exactly 1 — so a
// push is d/8 bytes (+4), 32× below a dense one; with compression.name = none the ±1 travel
// as dense floats (for comparison). Other compressors are refused (the vote is of signs).
// The reply is θ, dense, as for every strategy here; the paper's 1-bit downlink (the vote
// itself) is not modelled.
//
// With N < workers the pushes that arrive after the round closed are dropped and answered
// with the new θ (backup workers, as sync_sgd); the worker's momentum keeps its own
// gradients either way (it is the worker's, as in Signum). Staleness: 0 by construction.
// The fault-tolerance experiments of the ICLR paper (adversarial workers) are not modelled.
#include <cmath>
#include <optional>

#include "algorithms/builtin_strategies.h"
#include "algorithms/sync_rule.h"
#include "core/rng.h"

namespace asgd::algorithms {

using ps::Status;
namespace {

class SignVoteWorker final : public WorkerRule {
 public:
  SignVoteWorker(double beta, double weight_decay)
      : beta_(static_cast<float>(beta)), weight_decay_(static_cast<float>(weight_decay)) {}

  Status Start(WorkerEnv& env) override {
    const auto n = static_cast<std::size_t>(env.ps->size());
    theta_.assign(n, 0.0f);
    grad_.assign(n, 0.0f);
    momentum_.assign(beta_ > 0 ? n : 0, 0.0f);
    signs_.assign(n, 0.0f);
    steps_ = 0;
    // Seeded once: a restart after a failed shard goes on with the stream, not repeating it.
    if (!rng_) rng_.emplace(env.seed);
    return env.ps->Pull(theta_);
  }

  StepResult Step(WorkerEnv& env) override {
    StepResult r;
    r.loss = env.gradient(theta_, grad_);
    if (weight_decay_ != 0) {
      for (std::size_t i = 0; i < grad_.size(); ++i) grad_[i] += weight_decay_ * theta_[i];
    }
    const std::vector<float>* v = &grad_;
    if (beta_ > 0) {
      for (std::size_t i = 0; i < grad_.size(); ++i) {
        momentum_[i] = beta_ * momentum_[i] + (1 - beta_) * grad_[i];
      }
      v = &momentum_;
    }
    for (std::size_t i = 0; i < signs_.size(); ++i) signs_[i] = WorkerSign((*v)[i]);
    r.status = env.ps->PushPull(signs_, theta_, ++steps_);
    r.pushes = 1;
    return r;
  }

  std::span<const float> local_params() const override { return theta_; }

 private:
  // +1 for x > 0, -1 for x < 0, a fair coin for +0 and -0, NaN for NaN.
  float WorkerSign(float x) {
    if (x > 0) return 1.0f;
    if (x < 0) return -1.0f;
    if (x == 0) return (rng_->NextU64() >> 63) != 0 ? 1.0f : -1.0f;
    return x;
  }

  float beta_;
  float weight_decay_;
  std::vector<float> theta_, grad_, momentum_, signs_;
  int64_t steps_ = 0;
  std::optional<Rng> rng_;
};

}  // namespace

Strategy SignSgdVoteStrategy() {
  Strategy s;
  s.name = "signsgd_vote";
  s.description =
      "signSGD with majority vote: workers push sign(g + λθ) (Signum: of their momentum), the "
      "server steps θ − η·sign(Σ signs) per round of N (Bernstein et al. 2018, 2019)";
  s.supports_compression = true;
  s.compressors = {"sign"};
  s.keys = ReadKeys(kCommonKeys, {"algorithm.lr_decay", "algorithm.weight_decay"});
  s.settings = {
      ReplicasSetting(),
      DoubleSetting("sign_momentum", "0", 0, false, 1, true,
                    "β of the momentum m ← β·m + (1 − β)·g whose sign each worker pushes "
                    "(Signum; Bernstein et al. use 0.9); 0 = the gradient's sign (signSGD)")};
  s.synchronous = true;
  s.worker_rule = [](const StrategyOptions& o) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<SignVoteWorker>(o.settings.Double("sign_momentum"),
                                            o.optimizer.weight_decay);
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    SyncRule::ServerStep step;  // plain sgd: θ − lr·vote
    step.learning_rate = o.worker.learning_rate;
    step.schedule = o.schedule;
    step.epochs_per_round = static_cast<double>(Replicas(o)) * o.epochs_per_batch;
    return std::make_unique<SyncRule>(Replicas(o), SyncRule::Combine::kSignVote, "signsgd_vote",
                                      step);
  };
  return s;
}

}  // namespace asgd::algorithms
