// What the drivers and roles of a strategy of the group family (Strategy::family:
// allreduce_sgd, local_sgd, dpsgd) check before they start: its checkpoints' shape and the
// roles and options such a run does not have. The in-process drivers are
// threads_driver.h and sim_driver.h; one rank's round logic is RunCollectiveRank
// (collective_rank.h), which the worker processes share.
#pragma once

#include <cstdint>
#include <string>

#include "experiments/config/config.h"
#include "experiments/record/checkpoint.h"

namespace asgd::experiments {

// A checkpoint of a run on a collective holds one shard, the workers' average at a round
// boundary, its version the steps every worker had taken. Throws DataError (naming the
// checkpoint's folder) for another shard count or parameter count.
void CheckCollectiveCheckpoint(const LoadedCheckpoint& checkpoint, int64_t n_params);

// Throws ConfigError (cluster.curve) when the config asks for CURVE with a strategy on a
// collective: CURVE covers ZeroMQ, not gloo's TCP connections between workers.
void RefuseCurveOnCollective(const Config& config);
// For a process of a multi-process run in `role` ("coordinator", "ps", "worker",
// "evaluator"): throws ConfigError when the config's strategy runs on a collective and
// asks for CURVE (cluster.curve), or the role is one such a run does not have (ps,
// evaluator: algorithm.name). Nothing for the other strategies.
void RefuseCollectiveRole(const Config& config, const std::string& role);

}  // namespace asgd::experiments
