// adag_distance — Asynchronous Distributed Adaptive Gradients, the distance-damped server
// rule of Hermans' thesis (chapter "ADAG"; dist-keras's Experimental trainer;
// docs/algorithms.md#adag_distance). Not dist-keras's "ADAG", which is AGN.
//
// Worker: AGN (W local steps, push a/W, continue from the centre). Server: stores the
// centre each worker last received (bookkeeping option 2 of the thesis: memory grows with
// the workers) and applies a push Δ from worker k element-wise as
//   D = θ̃_now − θ̃_pulled(k);  f = 1 / (D²/γ + 1);  θ̃ ← θ̃ + f ⊙ Δ
// with γ = algorithm.adag_gamma (the thesis's experiments: 1e-4). f = 1 exactly where
// the centre has not moved since the pull, so one worker is AGN exactly.
//
// Compression (compression.name, issue 17): meaningful: the push is a window of gradients; the
// server damps the decoded update.
#include "algorithms/builtin_strategies.h"
#include "algorithms/finite_apply.h"
#include "algorithms/received_copies.h"
#include "algorithms/windowed_worker.h"

namespace asgd::algorithms {
namespace {

class DistanceRule final : public ps::ServerRule {
 public:
  explicit DistanceRule(double gamma) : inv_gamma_(static_cast<float>(1.0 / gamma)) {}
  std::string Name() const override { return "adag_distance"; }
  void OnPull(ps::ShardContext& ctx, ps::ServerCall& call) override {
    pulled_.Remember(call.info().worker, ctx.values());
  }
  ps::PushOutcome OnPush(ps::ShardContext& ctx, ps::ServerCall& call) override {
    const std::span<const float> pulled = pulled_.Of(call.info().worker);
    const std::span<float> values = ctx.mutable_values();
    // All or nothing (finite_apply.h): θ̃ + f ⊙ Δ can overflow.
    ApplyFiniteOrRefuse(Name(), values, call.payload().pieces(), scratch_,
                        [&](std::size_t at, float delta) {
                          const float d = pulled.empty() ? 0.0f : values[at] - pulled[at];
                          const float f = 1.0f / (d * d * inv_gamma_ + 1.0f);
                          return values[at] + f * delta;
                        });
    ctx.AdvanceVersion();
    return ps::PushOutcome::kApplied;
  }
  ps::PushOutcome OnPushPull(ps::ShardContext& ctx, ps::ServerCall& call) override {
    const ps::PushOutcome out = OnPush(ctx, call);
    pulled_.Remember(call.info().worker, ctx.values());  // the reply carries these values
    return out;
  }
  // The per-worker copies survive a checkpoint (the values alone would lose the delay).
  void Start(ps::ShardContext& ctx) override { size_ = static_cast<std::size_t>(ctx.size()); }
  std::string SaveState() const override { return pulled_.Save(); }
  void LoadState(std::string_view state) override { pulled_.Load(state, size_); }

 private:
  std::size_t size_ = 0;
  float inv_gamma_;
  ReceivedCopies pulled_;
  std::vector<float> scratch_;
};

}  // namespace

Strategy AdagDistanceStrategy() {
  Strategy s;
  s.name = "adag_distance";
  s.supports_compression = true;
  s.description = "ADAG (Hermans): AGN pushes damped by 1/(D²/γ + 1), D the centre's drift";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys, {"algorithm.window", "algorithm.fetch_window"});
  s.settings = {DoubleSetting("adag_gamma", "1e-4", 0, true, std::nullopt, false,
                              "γ of the damping 1/(D²/γ + 1) (Hermans' experiments: 1e-4)")};
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    WindowedWorker::Mode mode;
    mode.normalise = true;
    return std::make_unique<WindowedWorker>(mode);
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    return std::make_unique<DistanceRule>(o.settings.Double("adag_gamma"));
  };
  return s;
}

}  // namespace asgd::algorithms
