// ssp — Stale Synchronous Parallel (Ho et al., NIPS 2013; Angel's sync controller;
// docs/algorithms.md#ssp).
//
// Clocks count completed iterations, from 0. Worker iteration c: compute the update u at
// the parameters it holds (one local optimizer step's worth: −η·g for sgd) and send it as
// one push-pull tagged with clock c, which both ends the iteration and reads the
// parameters for the next one. Server: adds u at once (one version per push; reads may
// include newer updates, as SSP allows), records that the worker completed c + 1
// iterations, and holds the reply while c + 1 exceeds the slowest worker's completed
// count by more than S (algorithm.ssp_bound); when the slowest catches up, every reply it
// allows is released with the values at that moment. So an iteration c + 1 only starts
// once every worker completed iteration c − S, and its read contains every update from
// clocks ≤ c − S (all of the worker's own: read-my-writes).
//
// Every worker's first read (its Start) is held until all workers made theirs, so all
// start from the same parameters (otherwise a fast worker's first update could reach a
// slow worker's first read).
// S = 0 is BSP: each iteration's replies are released together when the last worker's
// update arrives, so every worker computes the next iteration at the same parameters,
// θ + Σ_k u_k (the sum of the workers' updates, applied in arrival order). A large S
// approaches asynchronous SGD.
// Checkpoints save no clocks: a resumed run starts every worker at clock 0 again (and
// holds their first reads until all have made one).
// Staleness is counted in clocks (docs/algorithms.md#staleness): a push's record carries how many
// iterations its worker was ahead of the slowest one when it arrived (0 ≤ s ≤ S).
//
// Compression (compression.name, issue 17): meaningful: the push is one clock's update.
#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "algorithms/builtin_strategies.h"

namespace asgd::algorithms {

using ps::Status;
namespace {

class SspWorker final : public WorkerRule {
 public:
  Status Start(WorkerEnv& env) override {
    theta_.assign(static_cast<std::size_t>(env.ps->size()), 0.0f);
    grad_.assign(theta_.size(), 0.0f);
    update_.assign(theta_.size(), 0.0f);
    clock_ = 0;
    return env.ps->Pull(theta_);
  }
  StepResult Step(WorkerEnv& env) override {
    StepResult r;
    r.loss = env.gradient(theta_, grad_);
    std::fill(update_.begin(), update_.end(), 0.0f);
    env.optimizer->Step(theta_, grad_,
                        static_cast<float>(env.options.learning_rate * env.learning_rate_scale),
                        update_);
    // Returns once the bound lets iteration clock_ + 1 start, with the parameters to use.
    r.status = env.ps->PushPull(update_, theta_, clock_);
    r.pushes = 1;
    ++clock_;
    return r;
  }
  std::span<const float> local_params() const override { return theta_; }

 private:
  std::vector<float> theta_, grad_, update_;
  int64_t clock_ = 0;
};

class SspRule final : public ps::ServerRule {
 public:
  SspRule(int workers, int bound) : workers_(workers), bound_(bound) {}
  std::string Name() const override { return "ssp"; }
  void OnPull(ps::ShardContext& ctx, ps::ServerCall& call) override {
    const uint32_t w = call.info().worker;
    if (started_ || w >= static_cast<uint32_t>(workers_) || !joined_.insert(w).second) return;
    if (static_cast<int>(joined_.size()) < workers_) {
      start_waiting_.push_back(call.Defer());
      return;
    }
    started_ = true;  // the last first read: everyone reads the values as they are now
    for (uint64_t token : start_waiting_) ctx.Release(token);
    start_waiting_.clear();
  }
  ps::PushOutcome OnPush(ps::ShardContext& ctx, ps::ServerCall& call) override {
    Add(ctx, call);
    return ps::PushOutcome::kApplied;
  }
  ps::PushOutcome OnPushPull(ps::ShardContext& ctx, ps::ServerCall& call) override {
    Add(ctx, call);
    const uint32_t w = call.info().worker;
    if (w >= static_cast<uint32_t>(workers_)) return ps::PushOutcome::kApplied;
    const int64_t clock = call.info().clock;  // iterations the worker had completed
    call.set_staleness(std::max<int64_t>(0, clock - Slowest()));
    int64_t& completed = completed_[w];
    completed = std::max(completed, clock + 1);
    const int64_t slowest = Slowest();
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->second - slowest <= bound_) {
        ctx.Release(it->first);  // with the values as they are now
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    if (completed - slowest > bound_) waiting_[call.Defer()] = completed;
    return ps::PushOutcome::kApplied;
  }

 private:
  void Add(ps::ShardContext& ctx, ps::ServerCall& call) {
    auto values = ctx.mutable_values();
    for (const auto& piece : call.payload().pieces()) {
      ps::AddTo(values.subspan(static_cast<std::size_t>(piece.offset), piece.values.size()),
                piece.values);
    }
    ctx.AdvanceVersion();
  }
  int64_t Slowest() const {
    int64_t slowest = std::numeric_limits<int64_t>::max();
    for (int w = 0; w < workers_; ++w) {
      auto it = completed_.find(static_cast<uint32_t>(w));
      slowest = std::min(slowest, it == completed_.end() ? int64_t{0} : it->second);
    }
    return slowest;
  }
  int workers_, bound_;
  std::map<uint32_t, int64_t> completed_;  // worker -> iterations completed
  std::set<uint32_t> joined_;              // workers whose first read arrived
  std::vector<uint64_t> start_waiting_;    // their held first reads
  bool started_ = false;                   // every worker made its first read
  std::map<uint64_t, int64_t> waiting_;    // held reply -> its worker's completed count
};

}  // namespace

Strategy SspStrategy() {
  Strategy s;
  s.name = "ssp";
  s.supports_compression = true;
  s.description = "stale synchronous parallel: at most S clocks ahead of the slowest worker";
  s.clocks = true;
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys);
  s.settings = {IntSetting("ssp_bound", 3, 0, 1000000,
                           "the staleness bound S: no worker runs more than S clocks ahead of "
                           "the slowest (0 = BSP)",
                           "clocks")};
  s.synchronous = true;
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<SspWorker>();
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    return std::make_unique<SspRule>(o.num_workers, static_cast<int>(o.settings.Int("ssp_bound")));
  };
  return s;
}

}  // namespace asgd::algorithms
