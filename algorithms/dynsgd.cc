// dynsgd — staleness-damped updates on the parameter server.
//
// Source: Jiang, Cui, Zhang, Yu, "Heterogeneity-aware Distributed Parameter Servers",
// SIGMOD 2017, in the form of Hermans' thesis (Alg. dynsgd_parameter_server) and
// dist-keras's DynSGDParameterServer (docs/algorithms.md#dynsgd). Worker: as DOWNPOUR (W local
// steps, push the un-normalised update Δ = θ_W − θ_0, pull). Server: on a push with
// staleness s (PS updates applied between the worker's pull and this push),
// θ̃ ← θ̃ + Δ / (s + 1), one version per push. Convention: 1/(s + 1) as the thesis's
// algorithm and dist-keras (the thesis equation's 1/s would divide by zero); the paper's
// per-version re-weighting is not implemented (recalled from the paper, not verified).
// Sharded servers: s is the shard's own staleness (pushes that shard applied since the
// worker's pull of it), so a push whose pieces reach two shards in different orders is
// damped differently on each — a per-server clock, as the anchors' PS has one clock per
// server process; there is no global clock. Pinned by DynSgdShards in algorithms_test.
//
// Compression (compression.name, issue 17): meaningful: the push is the accumulated update of a
// window.
#include <algorithm>
#include <optional>

#include "algorithms/builtin_strategies.h"
#include "algorithms/windowed_worker.h"

namespace asgd::algorithms {
namespace {

class DampedAddRule final : public ps::ServerRule {
 public:
  std::string Name() const override { return "dynsgd"; }
  ps::PushOutcome OnPush(ps::ShardContext& ctx, ps::ServerCall& call) override {
    // A version from the future (after a restore) counts as fresh.
    const int64_t s = std::max<int64_t>(0, call.staleness());
    const float damping = 1.0f / static_cast<float>(s + 1);
    auto values = ctx.mutable_values();
    for (const auto& piece : call.payload().pieces()) {
      ps::AddScaledTo(values.subspan(static_cast<std::size_t>(piece.offset), piece.values.size()),
                      damping, piece.values);
    }
    ctx.AdvanceVersion();
    return ps::PushOutcome::kApplied;
  }
  // The damping above, for the core's one-pass apply (server_rule.h).
  std::optional<float> ElementwiseAddScale(const ps::RequestInfo&,
                                           int64_t staleness) const override {
    return 1.0f / static_cast<float>(std::max<int64_t>(0, staleness) + 1);
  }
};

}  // namespace

Strategy DynSgdStrategy() {
  Strategy s;
  s.name = "dynsgd";
  s.supports_compression = true;
  s.description = "DynSGD: the server damps each update by 1/(staleness + 1)";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys, {"algorithm.window", "algorithm.fetch_window"});
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<WindowedWorker>(WindowedWorker::Mode{});
  };
  s.server_rule = [](const StrategyOptions&, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    return std::make_unique<DampedAddRule>();
  };
  return s;
}

}  // namespace asgd::algorithms
