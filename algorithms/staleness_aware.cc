// staleness_aware — staleness-dependent learning rate with n-softsync aggregation (W.
// Zhang, S. Gupta, X. Lian, J. Liu, IJCAI 2016, arXiv 1511.05950;
// docs/algorithms.md#staleness_aware).
//
// Worker: pushes its raw gradient and continues from the reply (no waiting: a push that
// only fills the buffer is answered at once with the current values). Server: collects
// c = max(1, ⌊λ/n⌋) gradients (λ workers, n = algorithm.softsync; n = λ updates on every
// gradient, n = 1 waits for λ of them), each scaled by its own rate α₀/(s + 1), and then
// applies θ ← θ − (1/c)·Σ_l α₀/(s_l + 1)·g_l, one version per update. s counts updates
// applied between the worker's read and the push (fresh = 0), so this is the paper's
// α₀/σ with σ = s + 1 (fresh = 1): the same convention as DynSGD's 1/(s + 1).
// α₀ = algorithm.learning_rate, decayed per epoch by algorithm.lr_decay on the server (the
// paper's step-decayed base rate; the epoch is the shard's updates × c × B / training
// examples). One worker with c = 1 is SGD exactly.
//
// Compression (compression.name, issue 17): meaningful: the push is one gradient; the server
// damps the decoded gradient.
#include <cstring>
#include <string>

#include "algorithms/builtin_strategies.h"
#include "algorithms/gradient_worker.h"
#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {
namespace {

class SoftsyncRule final : public ps::ServerRule {
 public:
  SoftsyncRule(int c, double alpha0, double decay, double epochs_per_batch)
      : c_(c), alpha0_(alpha0), epochs_per_batch_(epochs_per_batch) {
    schedule_.decay = decay;
  }
  std::string Name() const override { return "staleness_aware"; }
  void Start(ps::ShardContext& ctx) override {
    buffer_.assign(static_cast<std::size_t>(ctx.size()), 0.0f);
  }
  ps::PushOutcome OnPush(ps::ShardContext& ctx, ps::ServerCall& call) override {
    const int64_t s = std::max<int64_t>(0, call.staleness());
    const double epoch = static_cast<double>(ctx.version()) * c_ * epochs_per_batch_;
    const double alpha = alpha0_ * LearningRateScale(schedule_, epoch);
    const auto rate = static_cast<float>(alpha / static_cast<double>(s + 1));
    // All or nothing (issue 22 item 4): the pieces are collected into a copy when this
    // push completes an update (the update itself can overflow), else checked first.
    const bool completes = count_ + 1 >= c_;
    if (completes) sum_.assign(buffer_.begin(), buffer_.end());
    std::vector<float>& into = completes ? sum_ : buffer_;
    for (const auto& piece : call.payload().pieces()) {
      const std::span<const float> current = std::span<const float>(into).subspan(
          static_cast<std::size_t>(piece.offset), piece.values.size());
      if (!ps::AddStaysFinite(current, rate, piece.values)) {
        throw ps::NonFiniteResultError(::asgd::internal::StrCat(
            Name(), ": the collected gradients at shard-local elements ", piece.offset, "..",
            piece.offset + static_cast<int64_t>(piece.values.size()),
            " would not be finite; the shard is unchanged"));
      }
    }
    for (const auto& piece : call.payload().pieces()) {
      ps::AddScaledTo(std::span<float>(into).subspan(static_cast<std::size_t>(piece.offset),
                                                     piece.values.size()),
                      rate, piece.values);
    }
    if (!completes) {
      ++count_;
      return ps::PushOutcome::kAccepted;
    }
    ps::AddScaledTo(ctx.mutable_values(), -1.0f / static_cast<float>(c_), sum_);
    std::fill(buffer_.begin(), buffer_.end(), 0.0f);
    count_ = 0;
    ctx.AdvanceVersion();
    return ps::PushOutcome::kApplied;
  }
  // The gradients collected towards the next update survive a checkpoint.
  std::string SaveState() const override {
    std::string out(reinterpret_cast<const char*>(&count_), sizeof(count_));
    out.append(reinterpret_cast<const char*>(buffer_.data()), buffer_.size() * sizeof(float));
    return out;
  }
  void LoadState(std::string_view state) override {
    if (state.size() != sizeof(count_) + buffer_.size() * sizeof(float)) {
      throw InputError("staleness_aware state: " + std::to_string(state.size()) +
                       " bytes, expected " +
                       std::to_string(sizeof(count_) + buffer_.size() * sizeof(float)));
    }
    int count = 0;
    std::memcpy(&count, state.data(), sizeof(count));
    if (count < 0 || count >= c_) throw InputError("staleness_aware state: a bad gradient count");
    count_ = count;
    std::memcpy(buffer_.data(), state.data() + sizeof(count_), buffer_.size() * sizeof(float));
  }

 private:
  int c_;
  double alpha0_;
  double epochs_per_batch_;
  ScheduleOptions schedule_;
  int count_ = 0;
  std::vector<float> sum_;  // the completed update's scratch
  std::vector<float> buffer_;
};

}  // namespace

Strategy StalenessAwareStrategy() {
  Strategy s;
  s.name = "staleness_aware";
  s.supports_compression = true;
  s.description = "staleness-aware async SGD: rate α₀/(s + 1), n-softsync aggregation";
  s.keys = ReadKeys(kCommonKeys, {"algorithm.lr_decay"});
  Setting softsync = IntSetting("softsync", 0, 0, 1024,
                                "n of n-softsync, the server updates after max(1, workers/n) "
                                "gradients; 0 = workers (an update per gradient)");
  softsync.check = [](const StrategyOptions& o) -> std::string {
    if (o.settings.Int("softsync") <= o.num_workers) return "";
    return internal::StrCat("at most algorithm.workers (", o.num_workers, "); 0 = workers");
  };
  s.settings = {softsync};
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<GradientWorker>();
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    const auto softsync_n = static_cast<int>(o.settings.Int("softsync"));
    const int n = softsync_n > 0 ? softsync_n : o.num_workers;
    return std::make_unique<SoftsyncRule>(std::max(1, o.num_workers / n), o.worker.learning_rate,
                                          o.schedule.decay, o.epochs_per_batch);
  };
  return s;
}

}  // namespace asgd::algorithms
