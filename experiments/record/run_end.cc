#include "experiments/record/run_end.h"

#include <cstdio>

#include "core/check.h"

namespace asgd::experiments {

using ::asgd::internal::StrCat;

RunRecords RunRecords::Open(const RunDir& run, double target_accuracy, bool ef_residual,
                            int64_t staleness_rows, const CheckpointManifest* resumed) {
  RunRecords r;
  r.recorder = std::make_unique<RunRecorder>(
      run, target_accuracy, resumed != nullptr ? resumed->convergence_rows : -1, ef_residual);
  if (resumed != nullptr) {
    r.recorder->RestoreAccount(resumed->best_test_accuracy, resumed->time_to_target_s);
  }
  if (staleness_rows < 0) return r;
  r.staleness_file =
      resumed != nullptr ? run.OpenAppend("staleness.csv") : run.Open("staleness.csv");
  r.staleness = std::make_unique<StalenessRecorder>(
      r.staleness_file.get(), staleness_rows, resumed != nullptr ? resumed->time_s : 0.0,
      resumed != nullptr ? resumed->staleness_rows : -1, /*buffered=*/true);
  if (resumed != nullptr) {
    for (const auto& [worker, counts] : resumed->staleness_histogram) {
      for (const auto& [s, count] : counts) r.staleness->AddCounts(worker, s, count);
    }
  }
  return r;
}

RunDir ReopenRunDir(const std::string& dir, const std::vector<std::string>& command_line,
                    const CheckpointManifest& manifest, bool truncate_staleness) {
  RunDir run = RunDir::Resume(dir, command_line);
  // The CSVs as they were at the checkpoint; the run appends to them (a run of before
  // their last columns gets them first).
  UpgradeConvergenceCsv(run.File("convergence.csv"));
  TruncateCsv(run.File("convergence.csv"), manifest.convergence_rows);
  if (truncate_staleness) {
    UpgradeStalenessCsv(run.File("staleness.csv"));
    TruncateCsv(run.File("staleness.csv"), manifest.staleness_rows);
  }
  return run;
}

SummaryRow EndRun(const RunDir& run, const RunRecorder& recorder, StalenessRecorder* staleness,
                  const RunEnd& end, const std::vector<WorkerMetrics>& workers,
                  const std::map<std::string, std::string>& more, std::ostream& out) {
  SummaryRow summary = recorder.Summary();  // best, final, target, time to target
  summary.run_id = run.id();
  summary.algorithm = end.algorithm;
  summary.model = end.model;
  summary.device = end.device;
  summary.dataset = end.dataset;
  summary.workers = end.workers;
  summary.ps_shards = end.ps_shards;
  summary.transport = end.transport;
  summary.compression = end.compression;
  summary.time_model = end.time_model;
  summary.seed = end.seed;
  summary.epochs = end.epochs;
  summary.samples = end.samples;
  summary.updates = end.updates;
  summary.wall_time_s = end.time_s;
  if (staleness != nullptr) {
    staleness->Flush();
    summary.staleness = staleness->stats();
  }
  for (const WorkerMetrics& w : workers) {
    summary.dropped_pushes += w.dropped_pushes;
    summary.bytes_pushed += w.bytes_pushed;
    summary.dense_bytes_pushed += w.dense_bytes_pushed;
    summary.bytes_pulled += w.bytes_pulled;
  }
  summary.status = end.failed ? "failed" : "completed";
  RunRecorder::Finish(run, summary, workers, staleness, end.reason, more);
  if (end.failed) {
    out << "run stopped: " << end.reason << "\nrun folder: " << run.path() << std::endl;
    return summary;
  }
  char line[400];
  std::snprintf(line, sizeof(line),
                "final test accuracy: %.4f (loss %.4f) after %.2f epochs, %lld %s, %.*f %s (%s)\n",
                recorder.final_test_accuracy(), recorder.final_test_loss(), end.epochs,
                static_cast<long long>(end.updates), end.updates_word.c_str(), end.time_digits,
                end.time_s, end.time_unit.c_str(), end.reason.c_str());
  out << line;
  if (staleness != nullptr) {
    const StalenessRecorder::Stats& st = summary.staleness;
    const std::string tail = end.tail
                                 ? *end.tail
                                 : (summary.dropped_pushes > 0
                                        ? StrCat("; ", summary.dropped_pushes, " dropped as stale")
                                        : std::string());
    std::snprintf(line, sizeof(line), "mean staleness: %.2f (max %lld) over %lld %s%s\n",
                  st.count > 0 ? st.mean : 0.0, static_cast<long long>(st.max),
                  static_cast<long long>(st.count), end.staleness_word.c_str(), tail.c_str());
    out << line;
  }
  out << "run folder: " << run.path() << std::endl;
  return summary;
}

}  // namespace asgd::experiments
