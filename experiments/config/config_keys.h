// The schema of every configuration key asgd understands (see config_keys.cc for the
// list with defaults and documentation; `asgd run --help-config` prints it).
#pragma once

#include "experiments/config/config.h"

namespace asgd::experiments {

const Schema& ExperimentSchema();

// algorithm.workers: at most kMaxSimWorkers simulated workers (cluster.transport = sim,
// which shares their scratch: experiments/run/worker_loop.h), at most kMaxRealWorkers
// threads or processes.
inline constexpr int kMaxSimWorkers = 10000;
inline constexpr int kMaxRealWorkers = 1024;

}  // namespace asgd::experiments
