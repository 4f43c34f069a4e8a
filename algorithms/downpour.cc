// downpour — DOWNPOUR SGD (Dean et al., "Large Scale Distributed Deep Networks", NIPS
// 2012), in two of the published forms (docs/algorithms.md#downpour):
//
//   server_optimizer = add (default; D2, the EASGD paper's / dist-keras / MPIT form):
//     the worker takes local optimizer steps, pushes the accumulated update every n_push
//     (= algorithm.window) steps and fetches the centre every n_fetch steps; the server
//     adds the push.
//   server_optimizer = adagrad (D1/D4, DistBelief's server-side Adagrad as in TFG):
//     the worker pushes the window's summed raw gradients Δ; the server keeps a per-
//     element accumulator A (starting at server_initial_accumulator, TensorFlow's 0.1)
//     and applies A ← A + Δ²; θ̃ ← θ̃ − γ·Δ/√A with γ = server_learning_rate.
//     A must start positive (TensorFlow requires it too): the rule has no ε, so with
//     A = 0 a coordinate whose gradient is exactly zero (MNIST's border pixels) would
//     become 0/0 = NaN. The factory refuses initial_accumulator ≤ 0 with a ConfigError.
//
// Conventions: the window check comes after the step (every push covers n_push steps;
// dist-keras's first commit covers n_push − 1); a partial window at the end is dropped;
// when a push and a fetch fall on the same step they are one atomic push-pull.
//
// Compression (compression.name, issue 17): meaningful: the push is the accumulated update of a
// window.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "algorithms/builtin_strategies.h"
#include "algorithms/finite_apply.h"
#include "algorithms/windowed_worker.h"
#include "core/error.h"

namespace asgd::algorithms {
namespace {

class AdagradRule final : public ps::ServerRule {
 public:
  AdagradRule(double learning_rate, double initial_accumulator)
      : lr_(static_cast<float>(learning_rate)), init_(static_cast<float>(initial_accumulator)) {}
  std::string Name() const override { return "adagrad"; }
  void Start(ps::ShardContext& ctx) override {
    acc_.assign(static_cast<std::size_t>(ctx.size()), init_);
  }
  ps::PushOutcome OnPush(ps::ShardContext& ctx, ps::ServerCall& call) override {
    // All or nothing (finite_apply.h): Δ² can overflow the accumulator even where the
    // step stays finite (Δ/√Inf = 0 would freeze the coordinate for good), so both the
    // new accumulators and the new values are computed, checked, then written.
    const std::span<const ps::Payload::Piece> pieces = call.payload().pieces();
    std::size_t total = 0;
    for (const auto& piece : pieces) total += piece.values.size();
    new_acc_.resize(total);
    new_values_.resize(total);
    const std::span<float> values = ctx.mutable_values();
    uint32_t max_bits = 0;
    std::size_t k = 0;
    for (const auto& piece : pieces) {
      const auto at = static_cast<std::size_t>(piece.offset);
      const std::size_t n = piece.values.size();
      float* a = new_acc_.data() + k;
      float* v = new_values_.data() + k;
      for (std::size_t i = 0; i < n; ++i) {
        const float g = piece.values[i];
        a[i] = acc_[at + i] + g * g;
        v[i] = values[at + i] - lr_ * g / std::sqrt(a[i]);
      }
      max_bits = std::max({max_bits, MaxMagnitudeBits(a, n), MaxMagnitudeBits(v, n)});
      k += n;
    }
    RequireFiniteResults("adagrad accumulator", pieces, new_acc_, max_bits);
    RequireFiniteResults("adagrad", pieces, new_values_, max_bits);
    k = 0;
    for (const auto& piece : pieces) {
      const auto at = static_cast<std::size_t>(piece.offset);
      const std::size_t n = piece.values.size();
      std::copy_n(new_acc_.data() + k, n, acc_.data() + at);
      std::copy_n(new_values_.data() + k, n, values.data() + at);
      k += n;
    }
    ctx.AdvanceVersion();
    return ps::PushOutcome::kApplied;
  }
  std::string SaveState() const override {
    return std::string(reinterpret_cast<const char*>(acc_.data()), acc_.size() * sizeof(float));
  }
  void LoadState(std::string_view state) override {
    if (state.size() != acc_.size() * sizeof(float)) {
      throw InputError("adagrad server state: " + std::to_string(state.size()) +
                       " bytes, expected " + std::to_string(acc_.size() * sizeof(float)));
    }
    std::memcpy(acc_.data(), state.data(), state.size());
  }

 private:
  float lr_, init_;
  std::vector<float> acc_;
  std::vector<float> new_acc_, new_values_;  // scratch of one push
};

}  // namespace

Strategy DownpourStrategy() {
  Strategy s;
  s.name = "downpour";
  s.supports_compression = true;
  s.description = "DOWNPOUR: push the window's update every n_push steps, fetch every n_fetch";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys, {"algorithm.window", "algorithm.fetch_window"});
  s.settings = {
      ChoiceSetting("server_optimizer", "add", {"add", "adagrad"},
                    "what the server does with a push: add it, or (DistBelief) treat it as "
                    "summed gradients and take an Adagrad step"),
      DoubleSetting("server_learning_rate", "0.01", 0, true, std::nullopt, false,
                    "the server's learning rate γ with server_optimizer = adagrad")};
  s.worker_rule = [](const StrategyOptions& o) -> std::unique_ptr<WorkerRule> {
    WindowedWorker::Mode mode;
    mode.push_gradients = o.settings.String("server_optimizer") == "adagrad";
    return std::make_unique<WindowedWorker>(mode);
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    const std::string& server_optimizer = o.settings.String("server_optimizer");
    if (server_optimizer == "adagrad") {
      // Δ/√A has no ε: A must stay positive where Δ = 0 (see the header).
      if (!(o.server_initial_accumulator > 0)) {
        throw ConfigError("algorithm.initial_accumulator",
                          std::to_string(o.server_initial_accumulator),
                          "> 0 with downpour's server_optimizer = adagrad (no ε: a zero "
                          "gradient would give 0/0)");
      }
      return std::make_unique<AdagradRule>(o.settings.Double("server_learning_rate"),
                                           o.server_initial_accumulator);
    }
    if (server_optimizer != "add") {
      throw ConfigError("algorithm.server_optimizer", server_optimizer, "add or adagrad");
    }
    return ps::NewAddRule();
  };
  return s;
}

}  // namespace asgd::algorithms
