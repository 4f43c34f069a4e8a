// Running a distributed strategy in one process: W worker threads against shard servers
// over inproc:// (the default; the same transport code as across machines), against the
// in-memory store, or, for hogwild, against one shared vector. The main thread evaluates
// the centre on a schedule while the workers run.
#pragma once

#include <iosfwd>

#include "experiments/config/config.h"
#include "experiments/run/runner.h"

namespace asgd::experiments {

// Writes, besides config.ini and provenance.json, convergence.csv (the centre's test
// loss and accuracy over time) and staleness.csv (one row per applied push per shard).
// Throws ConfigError/DataError before training; problems during training (a NaN loss, a
// store that stops answering) end the run with the CSVs kept and exit_status 2.
RunResult RunParallel(const Config& config, const RunRequest& request, std::ostream& out);

}  // namespace asgd::experiments
