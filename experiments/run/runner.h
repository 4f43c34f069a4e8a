// Running one experiment end to end: load data, build the model, train with the
// configured strategy, evaluate on a schedule, and record everything in a run folder.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "experiments/config/config.h"

namespace asgd::experiments {

struct RunRequest {
  std::string name;                       // the run's label (folder name part)
  std::vector<std::string> command_line;  // recorded in provenance.json
  std::vector<std::string> data_dirs;     // data search path, in order
  // A run folder to continue from its newest checkpoint (`asgd run --resume`); empty:
  // a new run.
  std::string resume_dir;
};

struct RunResult {
  int exit_status = 0;  // 0 completed; 2 stopped on bad input (e.g. a NaN loss)
  std::string run_dir;
  std::string status;  // "completed" or "failed"
  std::string reason;  // why the run ended ("epochs reached", "loss is NaN", ...)
  double final_test_accuracy = 0.0;
  double final_test_loss = 0.0;
  double best_test_accuracy = 0.0;
  double wall_time_s = 0.0;
  int64_t updates = 0;
  int64_t samples = 0;
};

// Throws ConfigError/DataError for bad configuration or data before training starts.
// Problems during training (a NaN loss) end the run with the CSVs kept, a line on the
// log, and exit_status 2.
RunResult RunExperiment(const Config& config, const RunRequest& request, std::ostream& out);

}  // namespace asgd::experiments
