// The public face of `asgd sweep` and `asgd suite` (batch.h): the commands live in
// batch_sweep.cc and batch_suite.cc, what they share in batch_runs.cc and batch_slurm.cc.
#include "experiments/batch/batch.h"

#include <cmath>
#include <string>
#include <vector>

#include "experiments/batch/batch_internal.h"

namespace asgd::experiments {

SampleStats Describe(const std::vector<double>& values) {
  SampleStats s;
  const double nan = std::nan("");
  double sum = 0;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -s.min;
  for (double v : values) {
    if (std::isnan(v)) continue;
    ++s.n;
    sum += v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  if (s.n == 0) {
    s.mean = s.std = s.min = s.max = nan;
    return s;
  }
  s.mean = sum / static_cast<double>(s.n);
  if (s.n < 2) {
    s.std = nan;
    return s;
  }
  double ss = 0;
  for (double v : values) {
    if (!std::isnan(v)) ss += (v - s.mean) * (v - s.mean);
  }
  s.std = std::sqrt(ss / static_cast<double>(s.n - 1));
  return s;
}

const std::vector<std::string>& SweepMetrics() {
  static const std::vector<std::string> kMetrics = {"final_test_accuracy", "best_test_accuracy",
                                                    "wall_time_s",         "time_to_target_s",
                                                    "samples_per_s",       "staleness_mean"};
  return kMetrics;
}

int SweepCommand(const std::vector<std::string>& args, std::ostream& out) {
  return batch::Sweep(args, out);
}

int SuiteCommand(const std::vector<std::string>& args, std::ostream& out) {
  return batch::Suite(args, out);
}

int TuneCommand(const std::vector<std::string>& args, std::ostream& out) {
  return batch::Tune(args, out);
}

}  // namespace asgd::experiments
