// The schema of every configuration key asgd understands (see config_keys.cc for the
// list with defaults and documentation; `asgd run --help-config` prints it).
#pragma once

#include "experiments/config/config.h"

namespace asgd::experiments {

const Schema& ExperimentSchema();

// algorithm.name of the deployed parameter server's check (`asgd ps`/`asgd worker`): a
// transport workload, not a strategy, so it is not in the strategy registry.
inline constexpr const char* kPsCheck = "ps_check";

}  // namespace asgd::experiments
