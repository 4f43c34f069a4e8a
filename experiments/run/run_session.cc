#include "experiments/run/run_session.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <utility>

#include "algorithms/schedule.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "experiments/config/setup.h"
#include "experiments/run/evaluation.h"

namespace asgd::experiments {

using ::asgd::internal::StrCat;

// ---- RunCounters ------------------------------------------------------------------------

void RunCounters::AddStep(int64_t batch, int64_t local_steps, int64_t step_pushes, float loss) {
  samples.fetch_add(batch, std::memory_order_relaxed);
  steps.fetch_add(local_steps, std::memory_order_relaxed);
  pushes.fetch_add(step_pushes, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  loss_sum_ += static_cast<double>(loss) * static_cast<double>(batch);
  loss_count_ += batch;
}

double RunCounters::TakeMeanLoss() {
  std::lock_guard<std::mutex> lock(mu_);
  const double mean = loss_count_ > 0 ? loss_sum_ / static_cast<double>(loss_count_) : std::nan("");
  loss_sum_ = 0;
  loss_count_ = 0;
  return mean;
}

void RunCounters::Fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = why;
  }
  stop.store(true);
}

std::string RunCounters::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

// ---- RunSession -------------------------------------------------------------------------

namespace {

// A resumed run's newest valid checkpoint, verified before anything is touched.
LoadedCheckpoint VerifiedResume(const RunRequest& request, const RunPlan& plan,
                                const SessionOptions& options) {
  if (request.resume_dir.empty()) return {};
  LoadedCheckpoint c = LoadNewestCheckpoint(request.resume_dir, plan.config_hash);
  const auto want = static_cast<std::size_t>(
      options.checkpoint_shards > 0 ? options.checkpoint_shards : plan.checkpoint_shards());
  if (c.shards.size() != want) {
    throw DataError(c.dir, StrCat("holds ", c.shards.size(), " shards, the run has ", want));
  }
  return c;
}

// Keeps the staleness rows of the pushes the saved shards hold, and recounts the manifest
// from them (SessionOptions::staleness_of_saved_shards).
void KeepStalenessOfSavedShards(const RunDir& run, const RunPlan& plan, CheckpointManifest& m) {
  std::vector<uint64_t> versions;
  for (const auto& shard : m.shards) versions.push_back(shard.version);
  const KeptStaleness kept = FilterStalenessCsv(run.File("staleness.csv"), versions);
  m.staleness_rows = kept.rows;
  m.staleness_histogram = kept.histogram;
  if (plan.strategy->synchronous || plan.family != algorithms::Family::kStore) return;
  // Asynchronous: a push is one row per shard, so the rows count each worker's pushes that
  // the model holds.
  for (auto& w : m.workers) {
    int64_t records = 0;
    const auto it = kept.histogram.find(static_cast<uint32_t>(w.worker));
    if (it != kept.histogram.end()) {
      for (const auto& entry : it->second) records += entry.second;
    }
    w.pushes = records / static_cast<int64_t>(m.shards.size());
  }
}

RunDir OpenRunDir(const Config& config, const RunRequest& request, const Problem& problem,
                  const SessionOptions& options, LoadedCheckpoint& resume) {
  if (request.resume_dir.empty()) {
    return RunDir::Create(WithDataStatistics(config, problem.data.train), request.name,
                          request.command_line);
  }
  const bool keep_saved = options.staleness_of_saved_shards &&
                          resume.manifest.staleness_rows < problem.plan.staleness_rows;
  RunDir run = ReopenRunDir(request.resume_dir, request.command_line, resume.manifest,
                            /*truncate_staleness=*/!keep_saved);
  if (keep_saved) KeepStalenessOfSavedShards(run, problem.plan, resume.manifest);
  ASGD_LOG(kInfo, "resuming ", run.id(), " from ", resume.dir, " (",
           CheckpointPosition(resume.manifest), ", ", resume.manifest.samples, " samples, ",
           resume.manifest.time_s, " s)");
  return run;
}

}  // namespace

RunSession::RunSession(const Config& config, const RunRequest& request, const Problem& problem,
                       const SessionOptions& options)
    : problem_(problem),
      resuming_(!request.resume_dir.empty()),
      resume_(VerifiedResume(request, problem.plan, options)),
      stop_(StopPolicy::FromConfig(config, problem.data.train.num_examples)),
      eval_schedule_(EvalSchedule::FromConfig(config, problem.data.train.num_examples)),
      run_(OpenRunDir(config, request, problem, options, resume_)),
      training_(options.clock, resuming_ ? resume_.manifest.time_s : 0.0),
      progress_(Progress::DecideLive(problem.plan.progress), std::cerr) {
  const RunPlan& plan = problem.plan;
  // Buffered staleness: stores record while holding their shard; the evaluating thread
  // writes the rows (Flush).
  records_ = RunRecords::Open(
      run_, stop_.target_accuracy(), options.ef_residual && plan.ef_residual,
      options.staleness ? plan.staleness_rows : -1, resuming_ ? &resume_.manifest : nullptr);
  if (resuming_) {
    counters_.samples.store(resume_.manifest.samples);
    counters_.steps.store(resume_.manifest.steps);
    counters_.pushes.store(resume_.manifest.step);
  }
  if (plan.checkpointing()) {
    checkpointer_ = std::make_unique<Checkpointer>(run_.path(), plan.checkpoint_keep);
  }
}

RunSession::~RunSession() = default;

const std::string& RunSession::path() const { return run_.path(); }

uint64_t RunSession::WorkerSeed() const {
  const uint64_t seed = problem_.plan.seed;
  return resuming_ ? DeriveSeed(seed, "resume", static_cast<uint64_t>(resume_.manifest.resumes + 1))
                   : seed;
}

double RunSession::LearningRateScaleAt(int64_t samples) const {
  return algorithms::LearningRateScale(
      problem_.schedule,
      static_cast<double>(samples) / static_cast<double>(problem_.data.train.num_examples));
}

double RunSession::LearningRateAt(int64_t samples) const {
  return problem_.plan.learning_rate * LearningRateScaleAt(samples);
}

bool RunSession::WorkerMayStep(double* lr_scale) const {
  const int64_t done = counters_.samples.load(std::memory_order_relaxed);
  if (!stop_.WorkMayContinue(done, counters_.steps.load(std::memory_order_relaxed))) return false;
  *lr_scale = LearningRateScaleAt(done);
  return true;
}

bool RunSession::Evaluate(models::Model& model, std::span<const float> params, const EvalInput& in,
                          double time_s, bool full) {
  const models::EvalResult r =
      EvaluateOn(model, params, problem_.EvalSet(full), problem_.data.train);
  const double best_before = records_.recorder->best_test_accuracy();
  const bool reached = Record(r, in, time_s);
  SaveBestModel(model, params, r.accuracy(), best_before, run_.path());
  return reached;
}

bool RunSession::Record(const models::EvalResult& r, const EvalInput& in, double time_s) {
  ConvergenceRow row =
      MakeConvergenceRow({time_s, in.samples, in.updates, in.train_loss, in.learning_rate}, r,
                         problem_.data.train.num_examples);
  row.consensus_distance = in.consensus;
  if (in.ef_residual_norm) row.ef_residual_norm = *in.ef_residual_norm;
  const bool reached = records_.recorder->Convergence(row);
  progress_.Evaluated(MakeProgressState(row, problem_.plan.epochs), r.mean_loss());
  return reached;
}

EvalInput RunSession::CountersAt(int64_t samples) {
  EvalInput in;
  in.samples = samples;
  in.updates = counters_.pushes.load();
  in.train_loss = counters_.TakeMeanLoss();
  in.learning_rate = LearningRateAt(samples);
  return in;
}

bool RunSession::EvaluateNow(models::Model& model, std::span<const float> params, bool full) {
  const double t = Seconds();
  return Evaluate(model, params, CountersAt(counters_.samples.load()), t, full);
}

void RunSession::StartCheckpoints(int64_t pushes_per_step) {
  checkpoint_unit_ = pushes_per_step;
  const int64_t every = problem_.plan.checkpoint_every_steps;
  next_checkpoint_pushes_.store(every > 0 ? counters_.pushes.load() + every * pushes_per_step : 0);
  last_checkpoint_s_ = Seconds();
}

bool RunSession::CheckpointDueByPushes(int64_t pushes) const {
  const int64_t next = next_checkpoint_pushes_.load();
  return next > 0 && pushes >= next;
}

bool RunSession::CheckpointDueBySeconds() const {
  const double every = problem_.plan.checkpoint_every_s;
  return every > 0 && Seconds() - last_checkpoint_s_ >= every;
}

void RunSession::CheckpointSaved(int64_t pushes) {
  const int64_t every = problem_.plan.checkpoint_every_steps * checkpoint_unit_;
  if (every > 0) {
    int64_t next = next_checkpoint_pushes_.load();
    while (next <= pushes) next += every;
    next_checkpoint_pushes_.store(next);
  }
  last_checkpoint_s_ = Seconds();
}

CheckpointManifest RunSession::NewManifest() const {
  return ManifestOfRun(problem_.plan.name, problem_.plan.config_hash,
                       resuming_ ? resume_.manifest.resumes + 1 : 0, *records_.recorder);
}

void RunSession::AddEarlierWorkerMetrics(std::vector<WorkerMetrics>& workers) const {
  for (std::size_t i = 0; i < workers.size() && i < resume_.manifest.workers.size(); ++i) {
    AddWorkerMetrics(workers[i], resume_.manifest.workers[i]);
  }
}

void RunSession::SaveCheckpoint(CheckpointManifest manifest,
                                const std::vector<ps::ShardSnapshot>& shards) {
  ASGD_CHECK(checkpointer_ != nullptr, "SaveCheckpoint in a run that does not checkpoint");
  AddEarlierWorkerMetrics(manifest.workers);
  // The file holds at least the manifest.staleness_rows rows the manifest names.
  if (staleness() != nullptr) staleness()->Flush();
  try {
    const std::string dir = checkpointer_->Save(std::move(manifest), shards);
    ASGD_LOG(kInfo, "checkpoint: ", dir);
  } catch (const IoError& e) {
    // The run goes on; the previous checkpoints are intact.
    ASGD_LOG(kError, "checkpoint failed: ", e.what());
  }
}

RunResult RunSession::Finish(const models::Model& model, std::span<const float> final_params,
                             const RunEnd& how, std::vector<WorkerMetrics> workers,
                             const std::map<std::string, std::string>& more, std::ostream& out) {
  const RunPlan& plan = problem_.plan;
  if (!how.failed && !final_params.empty()) SaveFinalModel(model, final_params, run_.path());
  progress_.Done();
  AddEarlierWorkerMetrics(workers);
  RunEnd end = how;
  end.algorithm = plan.name;
  end.model = plan.model_name;
  end.dataset = plan.dataset;
  end.workers = plan.workers;
  end.seed = static_cast<int64_t>(plan.seed);
  end.compression = plan.compression.name + (plan.ef_residual ? "+ef" : "");
  end.epochs =
      static_cast<double>(end.samples) / static_cast<double>(problem_.data.train.num_examples);
  if (end.failed) ASGD_LOG(kError, end.reason);
  EndRun(run_, recorder(), staleness(), end, workers, more, out);

  RunResult result;
  result.run_dir = run_.path();
  result.wall_time_s = end.time_s;
  result.final_test_accuracy = recorder().final_test_accuracy();
  result.final_test_loss = recorder().final_test_loss();
  result.best_test_accuracy = recorder().best_test_accuracy();
  result.updates = end.updates;
  result.samples = end.samples;
  result.reason = end.reason;
  result.status = end.failed ? "failed" : "completed";
  result.exit_status = end.failed ? 2 : 0;
  return result;
}

}  // namespace asgd::experiments
