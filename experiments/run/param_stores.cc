#include "experiments/run/param_stores.h"

#include <chrono>
#include <vector>

#include "algorithms/hogwild.h"
#include "algorithms/memory_store.h"
#include "core/check.h"
#include "experiments/run/server_bounds.h"
#include "ps/placement.h"
#include "sim/sim_store.h"
#include "transport/shard_server_store.h"

namespace asgd::experiments {

namespace alg = ::asgd::algorithms;
namespace tp = ::asgd::transport;

std::unique_ptr<ps::ParamStore> NewParamStore(const Problem& problem, const StoreParts& parts) {
  const RunPlan& plan = problem.plan;
  const alg::Strategy& strategy = *plan.strategy;
  ASGD_CHECK(plan.family == alg::Family::kStore, "NewParamStore for ", plan.name, ", of the ",
             alg::FamilyName(plan.family), " family: it has no store");
  const alg::StrategyOptions& so = problem.strategy_options;
  auto rules = [&](uint32_t s) { return strategy.server_rule(so, s); };
  switch (plan.store) {
    case StoreKind::kShared:
      return std::make_unique<alg::HogwildStore>(parts.initial, parts.clock, parts.staleness,
                                                 alg::HogwildStore::AddModeOf(so),
                                                 UsesSparseUpdates(problem));
    case StoreKind::kMemory:
      return std::make_unique<alg::MemoryStore>(
          std::vector<float>(parts.initial.begin(), parts.initial.end()), rules(0), parts.clock,
          parts.staleness);
    case StoreKind::kShardServers: {
      tp::ServerOptions base;
      base.clock = parts.clock;
      base.staleness_sink = parts.staleness;
      ApplyServerBounds(plan, &base);
      tp::ClientOptions client;
      client.id = static_cast<uint32_t>(plan.workers);  // the evaluator's, for Read
      client.timeout = std::chrono::milliseconds(static_cast<int64_t>(plan.timeout_s * 1000.0));
      client.chunk_bytes = plan.chunk_bytes;
      return std::make_unique<tp::ShardServerStore>(
          ps::Placement::Build(problem.model->layout(), plan.shards, plan.placement), parts.initial,
          rules, "inproc://" + parts.run_id + "-ps-", base, client);
    }
    case StoreKind::kSimulated:
      ASGD_CHECK(parts.scheduler != nullptr && parts.network != nullptr,
                 "a simulated store needs a scheduler and a network");
      return std::make_unique<sim::SimStore>(
          parts.scheduler, parts.network,
          ps::Placement::Build(problem.model->layout(), plan.shards, plan.placement), parts.initial,
          rules, parts.staleness);
  }
  ASGD_CHECK(false, "NewParamStore: unknown store kind");
  return nullptr;
}

}  // namespace asgd::experiments
