#include "experiments/record/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace asgd::experiments {

const std::vector<std::string>& StalenessColumns() {
  // The last three came later (dropped pushes and windowed pushes); appended, so that
  // readers of the first eight by position keep working.
  static const std::vector<std::string> c = {
      "time_s",         "worker",           "shard",     "step",
      "pulled_version", "applied_version",  "staleness", "outcome",
      "oldest_version", "oldest_staleness", "dropped"};
  return c;
}

const std::vector<std::string>& StalenessHistogramColumns() {
  static const std::vector<std::string> c = {"worker", "staleness", "count"};
  return c;
}

const std::vector<std::string>& WorkersColumns() {
  static const std::vector<std::string> c = {"worker",
                                             "steps",
                                             "samples",
                                             "samples_per_s",
                                             "compute_time_s",
                                             "wait_time_s",
                                             "pushes",
                                             "bytes_pushed",
                                             "bytes_pulled",
                                             "dropped_pushes",
                                             "comm_time_s",
                                             "dense_bytes_pushed",
                                             "compression_ratio"};
  return c;
}

const std::vector<std::string>& SummaryColumns() {
  static const std::vector<std::string> c = {"run_id",
                                             "algorithm",
                                             "model",
                                             "dataset",
                                             "workers",
                                             "ps_shards",
                                             "transport",
                                             "device",
                                             "seed",
                                             "epochs",
                                             "samples",
                                             "steps",
                                             "updates",
                                             "wall_time_s",
                                             "final_test_accuracy",
                                             "best_test_accuracy",
                                             "target_accuracy",
                                             "time_to_target_s",
                                             "staleness_mean",
                                             "staleness_p50",
                                             "staleness_p99",
                                             "staleness_max",
                                             "dropped_pushes",
                                             "updates_per_s",
                                             "samples_per_s",
                                             "bytes_pushed",
                                             "bytes_pulled",
                                             "dense_bytes_pushed",
                                             "compression_ratio",
                                             "compression",
                                             "status",
                                             "time_model"};
  return c;
}

StalenessRecorder::StalenessRecorder(std::ostream* rows, int64_t max_rows, double time_offset_s,
                                     int64_t existing_rows, bool buffered)
    : rows_out_(rows),
      buffered_(buffered),
      max_rows_(max_rows),
      time_offset_s_(time_offset_s),
      existing_rows_(std::max<int64_t>(0, existing_rows)) {
  if (rows_out_ != nullptr) {
    rows_ = std::make_unique<CsvWriter>(*rows_out_, StalenessColumns(), existing_rows < 0);
  }
}

StalenessRecorder::~StalenessRecorder() {
  // The rows still kept are part of the run; a stream that fails now has nobody to tell.
  try {
    Flush();
  } catch (...) {
  }
}

void StalenessRecorder::Record(const ps::StalenessRecord& r) {
  // Unbuffered, the row is written before the next record can be taken, so the order of
  // the rows is the order of the calls either way.
  std::unique_lock<std::mutex> write_lock(write_mu_, std::defer_lock);
  if (!buffered_) write_lock.lock();
  std::lock_guard<std::mutex> lock(mu_);
  // The histogram (and the summary statistics drawn from it) counts the pushes the shards
  // took in; a dropped push has its row only.
  if (!r.dropped()) ++histogram_[r.worker][r.staleness];
  if (rows_ && existing_rows_ + accepted_ < max_rows_) {
    ++accepted_;
    if (buffered_) {
      pending_.push_back(r);
    } else {
      WriteRow(r);
    }
  }
}

void StalenessRecorder::WriteRow(const ps::StalenessRecord& r) {
  rows_->Write(
      r.wall_time_s + time_offset_s_, static_cast<int64_t>(r.worker), static_cast<int64_t>(r.shard),
      r.step, static_cast<int64_t>(r.pulled_version), static_cast<int64_t>(r.applied_version),
      r.staleness, std::string(ps::PushOutcomeName(r.outcome)),
      static_cast<int64_t>(r.oldest_version()), r.oldest_staleness(), int64_t{r.dropped() ? 1 : 0});
}

// write_mu_ is held across the swap and the writing, so two flushes cannot interleave
// their batches; mu_ only across the swap, so shards are not held up by the file.
void StalenessRecorder::Flush() {
  if (!buffered_) return;
  std::lock_guard<std::mutex> write_lock(write_mu_);
  std::vector<ps::StalenessRecord> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(pending_);
  }
  for (const auto& r : batch) WriteRow(r);
}

void StalenessRecorder::AddCounts(uint32_t worker, int64_t staleness, int64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  histogram_[worker][staleness] += count;
}

int64_t StalenessRecorder::rows_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return existing_rows_ + accepted_;
}

std::map<uint32_t, std::map<int64_t, int64_t>> StalenessRecorder::histogram() const {
  std::lock_guard<std::mutex> lock(mu_);
  return histogram_;
}

int64_t Percentile(const std::map<int64_t, int64_t>& histogram, double q) {
  int64_t total = 0;
  for (const auto& [v, c] : histogram) total += c;
  if (total == 0) return 0;
  // Nearest rank: the smallest value whose cumulative count reaches ceil(q · total).
  const auto rank = static_cast<int64_t>(std::ceil(q * static_cast<double>(total)));
  int64_t seen = 0;
  for (const auto& [v, c] : histogram) {
    seen += c;
    if (seen >= rank) return v;
  }
  return histogram.rbegin()->first;
}

StalenessRecorder::Stats StalenessRecorder::stats() const {
  std::map<int64_t, int64_t> all;
  for (const auto& [w, h] : histogram()) {
    for (const auto& [v, c] : h) all[v] += c;
  }
  Stats s;
  double sum = 0;
  for (const auto& [v, c] : all) {
    s.count += c;
    // A version from the future (after a restore) counts as fresh, as the rules treat it.
    sum += static_cast<double>(std::max<int64_t>(0, v)) * static_cast<double>(c);
  }
  if (s.count == 0) {
    s.mean = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  s.mean = sum / static_cast<double>(s.count);
  s.p50 = Percentile(all, 0.5);
  s.p99 = Percentile(all, 0.99);
  s.max = all.rbegin()->first;
  return s;
}

void StalenessRecorder::WriteHistogram(std::ostream& out) const {
  CsvWriter w(out, StalenessHistogramColumns());
  for (const auto& [worker, h] : histogram()) {
    for (const auto& [v, c] : h) w.Write(static_cast<int64_t>(worker), v, c);
  }
}

namespace {

double PerSecond(double amount, double seconds) {
  return seconds > 0 ? amount / seconds : std::numeric_limits<double>::quiet_NaN();
}

// Dense bytes per byte on the wire: 1 without compression, nan with no push.
double CompressionRatio(int64_t dense, int64_t wire) {
  return wire > 0 ? static_cast<double>(dense) / static_cast<double>(wire)
                  : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

void WriteWorkers(std::ostream& out, const std::vector<WorkerMetrics>& workers) {
  CsvWriter w(out, WorkersColumns());
  for (const WorkerMetrics& m : workers) {
    w.Write(m.worker, m.steps, m.samples, PerSecond(static_cast<double>(m.samples), m.active_s),
            m.compute_s, m.wait_s, m.pushes, m.bytes_pushed, m.bytes_pulled, m.dropped_pushes,
            m.comm_s, m.dense_bytes_pushed, CompressionRatio(m.dense_bytes_pushed, m.bytes_pushed));
  }
}

void WriteSummary(std::ostream& out, const SummaryRow& r) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const bool stale = r.staleness.count > 0;
  CsvWriter w(out, SummaryColumns());
  w.WriteRow({CsvCell(r.run_id),
              CsvCell(r.algorithm),
              CsvCell(r.model),
              CsvCell(r.dataset),
              CsvCell(r.workers),
              CsvCell(r.ps_shards),
              CsvCell(r.transport),
              CsvCell(r.device),
              CsvCell(r.seed),
              CsvCell(r.epochs),
              CsvCell(r.samples),
              CsvCell(r.steps),
              CsvCell(r.updates),
              CsvCell(r.wall_time_s),
              CsvCell(r.final_test_accuracy),
              CsvCell(r.best_test_accuracy),
              CsvCell(r.target_accuracy),
              CsvCell(r.time_to_target_s >= 0 ? r.time_to_target_s : nan),
              CsvCell(stale ? r.staleness.mean : nan),
              stale ? CsvCell(r.staleness.p50) : CsvCell(nan),
              stale ? CsvCell(r.staleness.p99) : CsvCell(nan),
              stale ? CsvCell(r.staleness.max) : CsvCell(nan),
              CsvCell(r.dropped_pushes),
              CsvCell(PerSecond(static_cast<double>(r.updates), r.wall_time_s)),
              CsvCell(PerSecond(static_cast<double>(r.samples), r.wall_time_s)),
              CsvCell(r.bytes_pushed),
              CsvCell(r.bytes_pulled),
              CsvCell(r.dense_bytes_pushed),
              CsvCell(CompressionRatio(r.dense_bytes_pushed, r.bytes_pushed)),
              CsvCell(r.compression),
              CsvCell(r.status),
              CsvCell(r.time_model)});
}

void AddWorkerMetrics(WorkerMetrics& into, const WorkerMetrics& before) {
  into.steps += before.steps;
  into.samples += before.samples;
  into.pushes += before.pushes;
  into.active_s += before.active_s;
  into.compute_s += before.compute_s;
  into.wait_s += before.wait_s;
  into.comm_s += before.comm_s;
  into.bytes_pushed += before.bytes_pushed;
  into.bytes_pulled += before.bytes_pulled;
  into.dropped_pushes += before.dropped_pushes;
  into.dense_bytes_pushed += before.dense_bytes_pushed;
}

}  // namespace asgd::experiments
