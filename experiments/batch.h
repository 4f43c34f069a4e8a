// `asgd sweep` and `asgd suite`: many runs, each an `asgd run` child process, then one
// comparison of them (experiments/compare.h).
//
// Both validate everything they can before starting anything (every grid point's or
// suite entry's config is loaded with its overrides through the schema), so a typo is
// one line and exit status 2, not a failure an hour in. Then they run at most
// `parallel` children at a time, each with its output in <folder>/logs/<label>-s<seed>.log
// and its run folder under <folder>/runs/, print one line per finished run, and compare
// the runs into <folder>. A run that exits non-zero (or leaves no summary.csv) is
// reported and counted; the command then exits 2 after writing what it can.
//
// SIGINT or SIGTERM to the sweep or suite ends every running child by PID (SIGTERM, then
// SIGKILL after 2 s), reaps it and returns 128 + the signal number; the children also
// get SIGTERM from the kernel should this process die (PR_SET_PDEATHSIG).
//
// Sweep folder (default results/sweeps/<UTC yyyymmdd-hhmmss>-<config stem>):
//   runs/ logs/ comparison.{csv,md} *.png   as described above
//   sweep.csv    one row per grid point: label, the grid values, runs, failed, and the
//                mean, std (sample standard deviation; nan below two values), min and
//                max over the point's completed runs of final_test_accuracy,
//                best_test_accuracy, wall_time_s, time_to_target_s, samples_per_s and
//                staleness_mean (nan values, e.g. a target never reached, are left out)
//   sweep.md     the same as a markdown table (mean ± std)
// Suite folder (default results/suites/<name>-<UTC yyyymmdd-hhmmss>):
//   suite.ini (a copy of the suite file), runs/ logs/ comparison.{csv,md} *.png
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace asgd::experiments {

// Mean, sample standard deviation, min and max of the non-nan values; nan where there
// are too few (std: fewer than two).
struct SampleStats {
  int64_t n = 0;
  double mean = 0, std = 0, min = 0, max = 0;
};
SampleStats Describe(const std::vector<double>& values);

// The metrics sweep.csv aggregates, in column order.
const std::vector<std::string>& SweepMetrics();

// `asgd sweep CONFIG --grid section.key=v1,v2 ... [--seeds N] [--parallel P]
// [--set section.key=value ...] [--out DIR]`: args without the command name.
int SweepCommand(const std::vector<std::string>& args, std::ostream& out);

// `asgd suite FILE [--parallel P] [--out DIR] [--set section.key=value ...]`.
int SuiteCommand(const std::vector<std::string>& args, std::ostream& out);

}  // namespace asgd::experiments
