// The end of a run and the records it opens with, for every driver (the in-process run
// session, experiments/run/run_session.h, and the multi-process coordinator): one summary,
// one set of last lines, one way to open or reopen convergence.csv and staleness.csv.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "experiments/record/checkpoint.h"
#include "experiments/record/metrics.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"

namespace asgd::experiments {

// convergence.csv's RunRecorder and staleness.csv's StalenessRecorder of a run folder:
// fresh, or, for a resumed run (`resumed`: its checkpoint's manifest), appending to the
// rows the manifest names, with its account and staleness counts restored.
struct RunRecords {
  std::unique_ptr<RunRecorder> recorder;
  std::unique_ptr<std::ostream> staleness_file;  // null without staleness
  std::unique_ptr<StalenessRecorder> staleness;  // null without staleness

  // staleness_rows: metrics.staleness_rows; < 0: the run records no staleness (the
  // sequential baseline). The staleness recorder is buffered (the evaluating thread
  // writes the rows: Flush). Throws IoError.
  static RunRecords Open(const RunDir& run, double target_accuracy, bool ef_residual,
                         int64_t staleness_rows, const CheckpointManifest* resumed);
};

// A resumed run's folder: its CSVs upgraded to the current columns and convergence.csv
// truncated to the manifest's rows; staleness.csv too when truncate_staleness (the
// coordinator filters it by the shards' versions instead). Throws IoError.
RunDir ReopenRunDir(const std::string& dir, const std::vector<std::string>& command_line,
                    const CheckpointManifest& manifest, bool truncate_staleness);

// What ran and how it ended: summary.csv's columns besides the account, and how the last
// lines read.
struct RunEnd {
  // What ran.
  std::string algorithm, model, dataset;
  int workers = 1;
  int64_t seed = 0;
  std::string compression = "none";  // compression.name, "+ef" with error feedback
  double epochs = 0;                 // samples / training examples
  // How it ended and where it ran.
  double time_s = 0;  // training time at the end (TrainingClock)
  int64_t samples = 0, updates = 0;
  std::string reason;
  bool failed = false;
  std::string device = "cpu";
  int ps_shards = 0;
  std::string transport = "none";
  std::string time_model = "wall";
  // How the time is printed: "%.<time_digits>f <time_unit>".
  int time_digits = 1;
  std::string time_unit = "s";
  // The last lines: "... after E epochs, <updates> <updates_word>, T s (reason)", then,
  // with a staleness recorder, "mean staleness: ... over <count> <staleness_word><tail>";
  // tail (if not set): "; K dropped as stale" when the workers dropped pushes.
  std::string updates_word = "pushes";
  std::string staleness_word = "pushes";
  std::optional<std::string> tail;
};

// The end of a run, after its workers stopped and its last evaluation: summary.csv (the
// recorder's account, `end`, the workers' traffic summed, the staleness if any),
// workers.csv, staleness_histogram.csv, the end of provenance.json (with `more`), then the
// run's last lines on out ("run stopped: <reason>" for a failure). Returns the summary.
// Throws IoError.
SummaryRow EndRun(const RunDir& run, const RunRecorder& recorder, StalenessRecorder* staleness,
                  const RunEnd& end, const std::vector<WorkerMetrics>& workers,
                  const std::map<std::string, std::string>& more, std::ostream& out);

}  // namespace asgd::experiments
