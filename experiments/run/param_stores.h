// The one factory of parameter stores (ps/param_store.h): the store a run's plan asks for
// (RunPlan::store), holding `initial`, with the strategy's server rules.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "core/clock.h"
#include "experiments/config/config.h"
#include "experiments/run/problem.h"
#include "ps/param_store.h"
#include "ps/staleness.h"
#include "sim/network_model.h"
#include "sim/scheduler.h"

namespace asgd::experiments {

// What a store is built on besides the plan.
struct StoreParts {
  std::span<const float> initial;  // the parameters it starts from
  const Clock* clock = nullptr;    // the run's clock (a simulated store uses the scheduler's)
  ps::StalenessSink* staleness = nullptr;  // may be null
  // kShardServers: the servers' endpoints are "inproc://<run_id>-ps-<shard>".
  std::string run_id;
  // kSimulated: the scheduler and network model (not owned; outlive the store).
  sim::Scheduler* scheduler = nullptr;
  sim::NetworkModel* network = nullptr;
};

// The store of problem.plan.store. REQUIRES: plan.family is kStore. The shard servers take their
// bounds from the plan (its [cluster] server keys, ApplyServerBounds). Throws ConfigError.
std::unique_ptr<ps::ParamStore> NewParamStore(const Problem& problem, const StoreParts& parts);

}  // namespace asgd::experiments
