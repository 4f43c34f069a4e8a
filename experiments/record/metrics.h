// What a run measures, beyond the learning curve (results/README.md has every column):
//   staleness.csv            one row per push a shard handled (applied, accepted or
//                            dropped), up to a row limit
//   staleness_histogram.csv  exact counts of every staleness value per worker, over the
//                            applied and accepted pushes
//   workers.csv              per worker: steps, throughput, compute and wait time, traffic
//   summary.csv              one row: what the run was and what it achieved
// The writers take streams (tests capture them); the run folder supplies files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "core/thread_annotations.h"
#include "experiments/record/csv.h"
#include "ps/staleness.h"

namespace asgd::experiments {

const std::vector<std::string>& StalenessColumns();
const std::vector<std::string>& StalenessHistogramColumns();
const std::vector<std::string>& WorkersColumns();
const std::vector<std::string>& SummaryColumns();

// Receives the staleness records of every shard (thread-safe: shards and workers call it
// concurrently): writes the first `max_rows` as staleness.csv rows, dropped pushes
// included, and counts every applied or accepted one in an exact per-worker histogram of
// `staleness` (from the newest parameters), which stats() and the summary use. Rows come
// out in the order Record was called.
//
// Buffered (the in-process runner): Record, which shard servers call while they hold their
// shard, only keeps the record; the rows reach the stream when the owner calls Flush (from
// its own thread), and at destruction. Unbuffered: Record writes and flushes the row itself.
class StalenessRecorder final : public ps::StalenessSink {
 public:
  // rows may be null (no rows written). time_offset_s is added to each record's time.
  // existing_rows >= 0: rows appends to a file that holds that many rows (and its
  // header) already, which count towards max_rows (a resumed run).
  StalenessRecorder(std::ostream* rows, int64_t max_rows, double time_offset_s = 0.0,
                    int64_t existing_rows = -1, bool buffered = false);
  ~StalenessRecorder() override;
  void Record(const ps::StalenessRecord& record) override;
  // Writes the rows kept since the last Flush (buffered; a no-op otherwise). Call it before
  // relying on the file holding rows_written() rows (a checkpoint, the end of the run).
  void Flush();

  struct Stats {
    int64_t count = 0;  // records (pushes × shards)
    double mean = 0;    // NaN when count == 0
    int64_t p50 = 0, p99 = 0, max = 0;
  };
  Stats stats() const;
  // The rows accepted so far (written, or kept for the next Flush), with existing_rows.
  int64_t rows_written() const;
  // Writes staleness_histogram.csv: worker, staleness, count, in increasing order.
  void WriteHistogram(std::ostream& out) const;
  // The exact histogram: worker -> staleness -> count.
  std::map<uint32_t, std::map<int64_t, int64_t>> histogram() const;
  // Adds counts (from another process's recorder) to the histogram.
  void AddCounts(uint32_t worker, int64_t staleness, int64_t count);

 private:
  void WriteRow(const ps::StalenessRecord& record);  // REQUIRES: write_mu_ held

  // Lock order: write_mu_ before mu_ (Flush; an unbuffered Record).
  std::mutex write_mu_;  // guards rows_ (not annotated: Record takes it only when unbuffered)
  mutable std::mutex mu_;
  std::ostream* rows_out_;
  std::unique_ptr<CsvWriter> rows_;
  const bool buffered_;
  int64_t max_rows_;
  double time_offset_s_;
  int64_t existing_rows_;
  int64_t accepted_ ASGD_GUARDED_BY(mu_) = 0;  // rows written or pending
  std::vector<ps::StalenessRecord> pending_ ASGD_GUARDED_BY(mu_);
  std::map<uint32_t, std::map<int64_t, int64_t>> histogram_ ASGD_GUARDED_BY(mu_);
};

// The nearest-rank percentile q (in (0, 1]) of a histogram value -> count; 0 if empty.
int64_t Percentile(const std::map<int64_t, int64_t>& histogram, double q);

// One worker's account of the run.
struct WorkerMetrics {
  int worker = 0;
  int64_t steps = 0;
  int64_t samples = 0;
  int64_t pushes = 0;
  double active_s = 0;   // from its first to its last step
  double compute_s = 0;  // computing gradients
  double wait_s = 0;     // the rest of its steps
  double comm_s = 0;     // inside the store's calls (request, service, reply, and a
                         // synchronous rule's hold): in its steps, part of wait_s; also
                         // the first pull and the last calls, outside its steps
  int64_t bytes_pushed = 0;  // on the wire: encoded bytes when compressed
  int64_t bytes_pulled = 0;
  int64_t dropped_pushes = 0;
  int64_t dense_bytes_pushed = 0;  // the same pushes as dense float32
};
void WriteWorkers(std::ostream& out, const std::vector<WorkerMetrics>& workers);
// Adds `before`'s counters and times to `into` (a resumed run's worker: the part before
// the checkpoint and the part after).
void AddWorkerMetrics(WorkerMetrics& into, const WorkerMetrics& before);

// summary.csv's one row.
struct SummaryRow {
  std::string run_id, algorithm, model, dataset;
  int workers = 1;
  int ps_shards = 0;
  std::string transport = "none";
  std::string device = "cpu";
  int64_t seed = 0;
  double epochs = 0;
  int64_t samples = 0;
  int64_t steps = 0;  // worker steps (mini-batch gradients), summed over workers
  int64_t updates = 0;
  double wall_time_s = 0;
  double final_test_accuracy = 0;
  double best_test_accuracy = 0;
  double target_accuracy = 0;
  double time_to_target_s = -1;        // < 0: not reached
  StalenessRecorder::Stats staleness;  // count == 0: no staleness (sequential)
  int64_t dropped_pushes = 0;
  int64_t bytes_pushed = 0;
  int64_t bytes_pulled = 0;
  int64_t dense_bytes_pushed = 0;
  std::string compression = "none";  // compression.name, "+ef" with error feedback
  std::string status = "completed";
  // The clock the times are on: "wall" for real runs; for simulated runs (cluster.transport
  // = sim) "virtual: " and the time model (delay and network), e.g. "virtual: compute
  // constant 10 ms; network dc_10gbe".
  std::string time_model = "wall";
};
void WriteSummary(std::ostream& out, const SummaryRow& row);

}  // namespace asgd::experiments
