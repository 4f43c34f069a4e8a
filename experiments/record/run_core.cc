#include "experiments/record/run_core.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>

#include "core/check.h"
#include "core/error.h"
#include "experiments/record/run_dir.h"

namespace asgd::experiments {

const std::vector<std::string>& ConvergenceColumns(bool ef_residual) {
  static const std::vector<std::string> c = {
      "time_s",    "epoch",         "samples",       "updates",       "train_loss",
      "test_loss", "test_accuracy", "eval_examples", "learning_rate", "consensus_distance"};
  static const std::vector<std::string> with_residual = [] {
    std::vector<std::string> v = c;
    v.push_back("ef_residual_norm");
    return v;
  }();
  return ef_residual ? with_residual : c;
}

// ---- RunRecorder ---------------------------------------------------------------------

RunRecorder::RunRecorder(const RunDir& run, double target_accuracy, int64_t existing_rows,
                         bool ef_residual)
    : target_(target_accuracy),
      ef_residual_(ef_residual),
      rows_(std::max<int64_t>(0, existing_rows)) {
  file_ = existing_rows >= 0 ? run.OpenAppend("convergence.csv") : run.Open("convergence.csv");
  csv_ = std::make_unique<CsvWriter>(*file_, ConvergenceColumns(ef_residual), existing_rows < 0);
}

RunRecorder::RunRecorder(std::ostream* convergence, double target_accuracy, int64_t existing_rows,
                         bool ef_residual)
    : target_(target_accuracy),
      ef_residual_(ef_residual),
      rows_(std::max<int64_t>(0, existing_rows)) {
  ASGD_CHECK(convergence != nullptr, "RunRecorder needs a convergence stream");
  csv_ =
      std::make_unique<CsvWriter>(*convergence, ConvergenceColumns(ef_residual), existing_rows < 0);
}

RunRecorder::~RunRecorder() = default;

bool RunRecorder::Convergence(const ConvergenceRow& r) {
  if (ef_residual_) {
    csv_->Write(r.time_s, r.epoch, r.samples, r.updates, r.train_loss, r.test_loss, r.test_accuracy,
                r.eval_examples, r.learning_rate, r.consensus_distance, r.ef_residual_norm);
  } else {
    csv_->Write(r.time_s, r.epoch, r.samples, r.updates, r.train_loss, r.test_loss, r.test_accuracy,
                r.eval_examples, r.learning_rate, r.consensus_distance);
  }
  ++rows_;
  final_accuracy_ = r.test_accuracy;
  final_loss_ = r.test_loss;
  best_ = std::max(best_, r.test_accuracy);
  if (target_ > 0 && time_to_target_ < 0 && r.test_accuracy >= target_) {
    time_to_target_ = r.time_s;
    return true;
  }
  return false;
}

void RunRecorder::RestoreAccount(double best_test_accuracy, double time_to_target_s) {
  best_ = best_test_accuracy;
  time_to_target_ = time_to_target_s;
}

SummaryRow RunRecorder::Summary() const {
  SummaryRow s;
  s.final_test_accuracy = final_accuracy_;
  s.best_test_accuracy = best_;
  s.target_accuracy = target_;
  s.time_to_target_s = time_to_target_;
  return s;
}

void RunRecorder::Finish(const RunDir& run, const SummaryRow& summary,
                         const std::vector<WorkerMetrics>& workers,
                         const StalenessRecorder* staleness, const std::string& reason,
                         const std::map<std::string, std::string>& more) {
  WriteWorkers(*run.Open("workers.csv"), workers);
  if (staleness != nullptr) staleness->WriteHistogram(*run.Open("staleness_histogram.csv"));
  // summary.csv's steps are the workers' steps, the count experiment.max_steps limits: one
  // definition for every driver.
  SummaryRow row = summary;
  row.steps = 0;
  for (const WorkerMetrics& w : workers) row.steps += w.steps;
  WriteSummary(*run.Open("summary.csv"), row);
  std::map<std::string, std::string> extra = {
      {"final_test_accuracy", CsvCell(summary.final_test_accuracy)},
      {"steps", std::to_string(row.steps)},
      {"updates", std::to_string(summary.updates)},
      {"wall_time_s", CsvCell(summary.wall_time_s)}};
  if (staleness != nullptr) {
    const StalenessRecorder::Stats& st = summary.staleness;
    extra["mean_staleness"] = CsvCell(st.count > 0 ? st.mean : 0.0);
    extra["max_staleness"] = std::to_string(st.max);
    extra["staleness_records"] = std::to_string(st.count);
    extra["dropped_pushes"] = std::to_string(summary.dropped_pushes);
  }
  if (summary.time_to_target_s >= 0) extra["time_to_target_s"] = CsvCell(summary.time_to_target_s);
  for (const auto& [key, value] : more) extra[key] = value;
  run.Finish(summary.status, reason, extra);
}

// ---- StopPolicy ----------------------------------------------------------------------

StopPolicy::StopPolicy(Limits limits, int64_t train_examples)
    : limits_(std::move(limits)),
      total_samples_(limits_.epochs * static_cast<double>(train_examples)) {
  if (limits_.stop_at_target && limits_.target_accuracy <= 0) {
    throw ConfigError("experiment.stop_at_target", "true",
                      "experiment.target_accuracy > 0 when stop_at_target is true");
  }
}

StopPolicy StopPolicy::FromConfig(const Config& config, int64_t train_examples) {
  Limits l;
  l.epochs = config.Double("experiment.epochs");
  l.max_steps = config.Int("experiment.max_steps");
  l.max_time_s = config.Double("experiment.max_time_s");
  l.target_accuracy = config.Double("experiment.target_accuracy");
  l.stop_at_target = config.Bool("experiment.stop_at_target");
  l.epochs_text = config.Raw("experiment.epochs");
  l.max_time_text = config.Raw("experiment.max_time_s");
  l.target_text = config.Raw("experiment.target_accuracy");
  l.learning_rate_text = config.Raw("algorithm.learning_rate");
  return StopPolicy(std::move(l), train_examples);
}

// The order is the one every driver used: a run that reaches two limits at once reports
// the first.
std::optional<std::string> StopPolicy::Check(int64_t samples, int64_t steps, double seconds,
                                             bool target_reached) const {
  if (static_cast<double>(samples) >= total_samples_) return EpochsReason();
  if (limits_.max_steps > 0 && steps >= limits_.max_steps) return StepsReason();
  if (limits_.max_time_s > 0 && seconds >= limits_.max_time_s) return TimeReason();
  if (limits_.stop_at_target && target_reached) return TargetReason();
  return std::nullopt;
}

bool StopPolicy::WorkMayContinue(int64_t samples, int64_t steps) const {
  if (static_cast<double>(samples) >= total_samples_) return false;
  return !(limits_.max_steps > 0 && steps >= limits_.max_steps);
}

std::string StopPolicy::EpochsReason() const {
  return "reached " + limits_.epochs_text + " epochs";
}
std::string StopPolicy::StepsReason() const {
  return "reached max_steps " + std::to_string(limits_.max_steps);
}
std::string StopPolicy::TimeReason() const { return "reached max_time_s " + limits_.max_time_text; }
std::string StopPolicy::TargetReason() const {
  return "reached target accuracy " + limits_.target_text;
}

std::string StopPolicy::NonFiniteLossReason(double loss, int64_t update) const {
  return "training loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") + " at update " +
         std::to_string(update) + "; lower algorithm.learning_rate (now " +
         limits_.learning_rate_text + ")";
}

std::string NonFiniteFirstLossReason(double loss, const std::string& who,
                                     const std::string& model) {
  return "training loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") + who +
         " at the first step, before any update: the model (" + model +
         ") produced it from the initial parameters on the first batch, so the learning rate "
         "played no part; check the model's forward (and the data)";
}

std::string StopPolicy::SignalReason(int signal) {
  return signal == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)";
}

// ---- EvalSchedule --------------------------------------------------------------------

EvalSchedule::EvalSchedule(double every_samples, double every_s, int64_t eval_examples)
    : every_samples_(every_samples),
      every_s_(every_s),
      eval_examples_(eval_examples),
      next_samples_(every_samples) {
  ASGD_CHECK(every_samples_ > 0, "EvalSchedule needs every_samples > 0, got ", every_samples_);
}

EvalSchedule EvalSchedule::FromConfig(const Config& config, int64_t train_examples) {
  return EvalSchedule(
      config.Double("metrics.eval_every_epochs") * static_cast<double>(train_examples),
      config.Double("metrics.eval_every_s"), config.Int("metrics.eval_examples"));
}

bool EvalSchedule::Due(int64_t samples, double seconds) const {
  return static_cast<double>(samples) >= next_samples_ ||
         (every_s_ > 0 && seconds - last_s_ >= every_s_);
}

// The mark advances by repeated addition (not k × every), as the drivers always did, so
// that the evaluation points, and with them the CSVs, stay bit for bit the same.
void EvalSchedule::Evaluated(int64_t samples, double seconds, bool full) {
  while (next_samples_ <= static_cast<double>(samples)) next_samples_ += every_samples_;
  last_s_ = seconds;
  last_samples_ = samples;
  last_full_ = full;
}

bool EvalSchedule::FinalNeeded(int64_t samples) const {
  return !(last_samples_ == samples && (last_full_ || samples == 0));
}

// ---- TrainingClock -------------------------------------------------------------------

TrainingClock::TrainingClock(const Clock* clock, double base_s) : clock_(clock), base_s_(base_s) {
  ASGD_CHECK(clock_ != nullptr, "TrainingClock needs a clock");
}

void TrainingClock::Start() {
  if (started_) return;
  started_ = true;
  start_ = clock_->Now();
  // A hold that began before training counts from the start.
  if (held_) held_since_ = start_;
}

double TrainingClock::Seconds() const {
  if (!started_) return base_s_;
  const Duration now = held_ ? held_since_ : clock_->Now();
  return base_s_ + std::chrono::duration<double>(now - start_ - held_total_).count();
}

void TrainingClock::Hold() {
  ASGD_CHECK(!held_, "TrainingClock::Hold while already held");
  held_ = true;
  held_since_ = started_ ? clock_->Now() : Duration{0};
}

void TrainingClock::Release() {
  ASGD_CHECK(held_, "TrainingClock::Release without Hold");
  held_ = false;
  if (started_) held_total_ += clock_->Now() - held_since_;
}

double TrainingClock::held_s() const {
  Duration total = held_total_;
  if (held_ && started_) total += clock_->Now() - held_since_;
  return std::chrono::duration<double>(total).count();
}

}  // namespace asgd::experiments
