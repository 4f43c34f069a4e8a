#include "experiments/run/collective_runner.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>

#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "core/aligned.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/loader.h"
#include "datasets/partition.h"
#include "experiments/config/setup.h"
#include "experiments/record/checkpoint.h"
#include "experiments/record/metrics.h"
#include "experiments/record/progress.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/collective_rank.h"
#include "experiments/run/evaluation.h"
#include "experiments/run/worker_loop.h"
#include "models/factory.h"
#include "sim/delay_model.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;
namespace col = ::asgd::collective;
using ::asgd::internal::StrCat;

// What the workers and the evaluating main thread share.
struct Shared {
  std::atomic<int64_t> samples{0};
  std::atomic<int64_t> steps{0};
  // The workers' pushes summed (every rank pushes once per communication round, so the
  // rounds are pushes / N: Rounds below).
  std::atomic<int64_t> pushes{0};
  std::atomic<bool> stop{false};        // the main thread's wish: the workers vote on it
  std::atomic<bool> hold{false};        // the main thread wants an evaluation
  std::atomic<bool> checkpoint{false};  // the main thread wants a checkpoint (by seconds)
  // experiment.checkpoint_every_steps: the pushes at which the next checkpoint is due (0:
  // none; the setting counts rounds, each N pushes). The workers read it at their votes, so a
  // checkpoint by steps does not wait for the main thread to notice (a short run could end before
  // it did).
  std::atomic<int64_t> next_checkpoint_push{0};
  std::mutex mu;
  std::condition_variable cv;
  // Guarded by mu.
  double loss_sum = 0;
  int64_t loss_count = 0;
  std::string failure;
  std::vector<float> average;  // the last published average θ̄ (rank 0 writes it)
  double consensus = 0;        // (1/N)·Σ‖θ_i − θ̄‖² at that point
  int64_t published = 0;       // publications so far
  int64_t boundary_step = 0;   // the last published boundary: its step and what it is for
  bool boundary_evaluates = false;
  bool boundary_checkpoints = false;
  int parked = 0;        // workers waiting for the evaluation to end
  int64_t releases = 0;  // evaluations ended
  int finished = 0;      // worker threads that returned
};

}  // namespace

void CheckCollectiveCheckpoint(const LoadedCheckpoint& c, int64_t n_params) {
  if (c.shards.size() != 1) {
    throw DataError(c.dir, StrCat("holds ", c.shards.size(),
                                  " shards, a run on a collective saves one (the average)"));
  }
  if (static_cast<int64_t>(c.shards[0].values.size()) != n_params) {
    throw DataError(c.dir, StrCat("holds ", c.shards[0].values.size(),
                                  " parameters, the model has ", n_params));
  }
}

void RefuseCurveOnCollective(const Config& config) {
  const std::string name = config.String("algorithm.name");
  if (!config.Bool("cluster.curve") || !alg::FindStrategy(name).collective) return;
  throw ConfigError("cluster.curve", config.Raw("cluster.curve"),
                    StrCat("false with algorithm.name = ", name,
                           ": its workers talk over gloo's TCP connections, which CURVE does "
                           "not cover (they are not encrypted)"));
}

void RefuseCollectiveRole(const Config& config, const std::string& role) {
  const std::string name = config.String("algorithm.name");
  if (!alg::FindStrategy(name).collective) return;
  RefuseCurveOnCollective(config);
  if (role == "ps" || role == "evaluator") {
    throw ConfigError("algorithm.name", name,
                      StrCat("a strategy over the parameter server for the ", role, " role: ", name,
                             " runs on a collective of its workers, without shards or an "
                             "evaluator (start the coordinator and the workers only)"));
  }
}

RunResult RunCollective(const Config& config, const RunRequest& request, std::ostream& out) {
  const auto seed = static_cast<uint64_t>(config.Int("experiment.seed"));
  const std::string name = config.String("algorithm.name");
  const alg::Strategy& strategy = alg::FindStrategy(name);
  const int workers = static_cast<int>(config.Int("algorithm.workers"));
  RefuseCurveOnCollective(config);
  const int64_t checkpoint_every_steps = config.Int("experiment.checkpoint_every_steps");
  const double checkpoint_every_s = config.Double("experiment.checkpoint_every_s");
  const bool checkpointing = checkpoint_every_steps > 0 || checkpoint_every_s > 0;
  const std::string config_hash = TrainingConfigHash(config);

  datasets::TrainTest data = datasets::LoadDataset(BuildDataOptions(config, request.data_dirs));
  const datasets::Dataset& train = data.train;
  const datasets::Dataset& test = data.test;
  std::unique_ptr<models::Model> model =
      models::NewModelOn(BuildModelOptions(config), InputSpecFor(train), models::Device{});
  const int64_t n_params = model->layout().size();
  const alg::OptimizerOptions optimizer_options = BuildOptimizerOptions(config);
  (void)alg::NewOptimizer(optimizer_options, n_params);  // validate before the folder
  const alg::StrategyOptions so = BuildStrategyOptions(config, train.num_examples);
  (void)strategy.worker_rule(so);  // validates the strategy's keys
  const alg::ScheduleOptions schedule = BuildScheduleOptions(config);
  col::CollectiveOptions co;
  co.size = workers;
  co.algorithm = col::ParseAlgorithm(config.String("collective.algorithm"));
  co.timeout = std::chrono::milliseconds(config.Int("collective.timeout_ms"));
  co.Validate();

  std::vector<models::Device> devices;
  std::vector<std::unique_ptr<models::Model>> worker_models;
  for (int w = 0; w < workers; ++w) {
    devices.push_back(WorkerDevice(config, w, workers));
    worker_models.push_back(
        devices.back().is_cuda()
            ? models::NewModelOn(BuildModelOptions(config), InputSpecFor(train), devices.back())
            : nullptr);
  }
  const int64_t batch_size = config.Int("algorithm.batch_size");
  const auto partitions =
      datasets::PartitionIndices(train.num_examples, workers, DeriveSeed(seed, "partition"));
  for (const auto& p : partitions) {
    if (p.empty()) {
      throw ConfigError("algorithm.workers", std::to_string(workers),
                        StrCat("at most ", train.num_examples, " workers (one example each)"));
    }
  }
  const StopPolicy stop = StopPolicy::FromConfig(config, train.num_examples);
  EvalSchedule eval_schedule = EvalSchedule::FromConfig(config, train.num_examples);
  const double lr0 = config.Double("algorithm.learning_rate");
  CollectivePlan plan = CollectivePlan::Make(config, strategy, so, partitions, train.num_examples);
  // The [delay] model as injected sleeps after each gradient, as in the thread runner of
  // the parameter server (the same seed: the same stragglers).
  const sim::SimOptions sim_options = BuildSimOptions(config);  // validates [delay] etc.
  std::unique_ptr<sim::DelayModel> delay;
  if (HasDelayModel(config)) {
    delay =
        std::make_unique<sim::DelayModel>(sim_options.delay, workers, DeriveSeed(seed, "delay"));
  }

  // A resumed run: the newest valid checkpoint (the workers' average at a round boundary),
  // verified before anything is touched.
  const bool resuming = !request.resume_dir.empty();
  LoadedCheckpoint resume;
  if (resuming) {
    resume = LoadNewestCheckpoint(request.resume_dir, config_hash);
    CheckCollectiveCheckpoint(resume, n_params);
    plan.first_step = static_cast<int64_t>(resume.shards[0].version);
  }
  RunDir run = resuming ? RunDir::Resume(request.resume_dir, request.command_line)
                        : RunDir::Create(WithDataStatistics(config, train), request.name,
                                         request.command_line);
  if (resuming) {
    // The CSVs as they were at the checkpoint; this run appends to them.
    UpgradeConvergenceCsv(run.File("convergence.csv"));
    TruncateCsv(run.File("convergence.csv"), resume.manifest.convergence_rows);
    UpgradeStalenessCsv(run.File("staleness.csv"));
    TruncateCsv(run.File("staleness.csv"), resume.manifest.staleness_rows);
    ASGD_LOG(kInfo, "resuming ", run.id(), " from ", resume.dir, " (step ", plan.first_step, ", ",
             resume.manifest.samples, " samples, ", resume.manifest.time_s, " s)");
  }
  RunRecorder recorder(run, stop.target_accuracy(),
                       resuming ? resume.manifest.convergence_rows : -1);
  auto staleness_file = resuming ? run.OpenAppend("staleness.csv") : run.Open("staleness.csv");
  const double time_base = resuming ? resume.manifest.time_s : 0.0;
  StalenessRecorder staleness(staleness_file.get(), config.Int("metrics.staleness_rows"), time_base,
                              resuming ? resume.manifest.staleness_rows : -1,
                              /*buffered=*/true);
  for (const auto& [worker, counts] : resume.manifest.staleness_histogram) {
    for (const auto& [value, count] : counts) staleness.AddCounts(worker, value, count);
  }
  AlignedVector<float> initial(static_cast<std::size_t>(n_params));
  if (resuming) {
    std::copy(resume.shards[0].values.begin(), resume.shards[0].values.end(), initial.begin());
  } else {
    model->Initialize(initial, DeriveSeed(seed, "init"));
  }
  auto clock = NewSystemClock();
  TrainingClock training(clock.get(), time_base);
  training.Start();
  auto seconds = [&] { return training.Seconds(); };
  ASGD_LOG(kInfo, "run ", run.id(), ": ", name, " with ", workers, " workers on gloo (",
           col::AlgorithmName(co.algorithm), ", tcp over 127.0.0.1), ", model->Describe(),
           " (workers on ", DescribeDevices(devices), "), ", train.name, " (", train.num_examples,
           " examples)");

  Shared shared;
  // What the updates columns count for a strategy on a collective: communication rounds
  // (allreduce_sgd's allreduces, dpsgd's gossip steps, local_sgd's averagings), each of
  // which every worker takes part in, not the pushes summed over the workers.
  auto rounds = [&] { return shared.pushes.load() / workers; };
  if (resuming) {
    shared.samples.store(resume.manifest.samples);
    shared.steps.store(resume.manifest.steps);
    shared.pushes.store(resume.manifest.step);
    recorder.RestoreAccount(resume.manifest.best_test_accuracy, resume.manifest.time_to_target_s);
  }
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(shared.mu);
    if (shared.failure.empty()) shared.failure = why;
    shared.stop.store(true);
  };
  Progress progress(Progress::DecideLive(config.String("experiment.progress")), std::cerr);

  // Evaluates `params` (the workers' average) seen after `samples`, with the consensus
  // distance (NaN: not measured).
  auto evaluate = [&](std::span<const float> params, double consensus, int64_t samples, bool full) {
    const double t = seconds();
    models::EvalResult r =
        EvaluateOn(*model, params, test, train, full ? 0 : eval_schedule.ScheduledExamples());
    double train_loss = std::nan("");
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      if (shared.loss_count > 0)
        train_loss = shared.loss_sum / static_cast<double>(shared.loss_count);
      shared.loss_sum = 0;
      shared.loss_count = 0;
    }
    ConvergenceRow row;
    row.time_s = t;
    row.epoch = static_cast<double>(samples) / static_cast<double>(train.num_examples);
    row.samples = samples;
    row.updates = rounds();
    row.train_loss = train_loss;
    row.test_loss = r.mean_loss();
    row.test_accuracy = r.accuracy();
    row.eval_examples = r.count;
    row.learning_rate = lr0 * alg::LearningRateScale(schedule, row.epoch);
    row.consensus_distance = consensus;
    const double best_before = recorder.best_test_accuracy();
    if (recorder.Convergence(row) && stop.stop_at_target()) shared.stop.store(true);
    SaveBestModel(*model, params, r.accuracy(), best_before, run.path());
    ProgressState ps;
    ps.epoch = row.epoch;
    ps.target_epochs = config.Double("experiment.epochs");
    ps.updates = row.updates;
    ps.train_loss = std::isnan(train_loss) ? 0.0 : train_loss;
    ps.test_accuracy = r.accuracy();
    ps.elapsed_s = t;
    ps.updates_per_s = t > 0 ? static_cast<double>(ps.updates) / t : 0.0;
    progress.Evaluated(ps, r.mean_loss());
    eval_schedule.Evaluated(samples, t, full);
  };
  // Every worker starts here (the broadcast). A resumed run adds no row: the checkpoint's
  // rows are those of the run before it, as if it had not stopped.
  if (!resuming) evaluate(initial, 0.0, 0, false);
  eval_schedule.SetLastTime(seconds());

  // ---- workers ----------------------------------------------------------------------
  const auto payload_rendezvous = col::NewInMemoryRendezvous();
  const auto control_rendezvous = col::NewInMemoryRendezvous();
  std::vector<std::unique_ptr<WorkerLoop>> loops;
  for (int w = 0; w < workers; ++w) {
    WorkerSetup ws;
    ws.worker = w;
    ws.num_workers = workers;
    ws.strategy = &strategy;
    ws.options = so;
    ws.optimizer = optimizer_options;
    ws.learning_rate = lr0;  // one rate: the replicas apply the same step
    const auto wi = static_cast<std::size_t>(w);
    ws.model = worker_models[wi] ? worker_models[wi].get() : model.get();
    ws.train = &train;
    ws.examples = partitions[wi];
    ws.batch_size = batch_size;
    ws.augment = BuildAugmentOptions(config);
    ws.seed = seed;
    ws.skip_batches = plan.first_step;  // a resumed run continues the batches' sequence
    ws.clock = clock.get();
    if (delay) ws.after_gradient = InjectedDelay(delay.get(), clock.get(), w);
    loops.push_back(std::make_unique<WorkerLoop>(std::move(ws)));
  }
  auto worker_thread = [&](int w) {
    WorkerOutcome outcome;
    try {
      col::CollectiveOptions mine = co;
      mine.rank = w;
      const std::unique_ptr<col::Collective> payload = col::Connect(mine, payload_rendezvous);
      const std::unique_ptr<col::Collective> control = col::Connect(mine, control_rendezvous);
      CollectiveRankHooks hooks;
      hooks.stop_wanted = [&] { return shared.stop.load(); };
      hooks.eval_wanted = [&]() -> int64_t { return shared.hold.load() ? 1 : 0; };
      hooks.checkpoint_wanted = [&] {
        const int64_t due = shared.next_checkpoint_push.load();
        return shared.checkpoint.load() || (due > 0 && shared.pushes.load() >= due);
      };
      hooks.boundary = [&](const CollectiveBoundary& b) {
        std::unique_lock<std::mutex> lock(shared.mu);
        if (w == 0) {
          shared.average.assign(b.average.begin(), b.average.end());
          shared.consensus = b.consensus;
          shared.boundary_step = b.step;
          shared.boundary_evaluates = b.evaluate;
          shared.boundary_checkpoints = b.checkpoint;
          ++shared.published;
        }
        if (b.final) return;
        // Held until the main thread evaluated the average or saved it.
        const int64_t releases = shared.releases;
        ++shared.parked;
        shared.cv.notify_all();
        shared.cv.wait(lock, [&] { return shared.releases != releases; });
      };
      hooks.after_step = [&](const alg::StepResult& r, int64_t batch, int64_t step) {
        shared.samples.fetch_add(batch);
        shared.steps.fetch_add(r.local_steps);
        shared.pushes.fetch_add(r.pushes);
        // No update is stale: each applies a gradient to the parameters it was computed on.
        transport::StalenessRecord rec;
        rec.worker = static_cast<uint32_t>(w);
        rec.step = step;
        rec.pulled_version = static_cast<uint64_t>(step - 1);
        rec.applied_version = rec.pulled_version;
        rec.wall_time_s = std::chrono::duration<double>(clock->Now()).count();
        staleness.Record(rec);
        std::lock_guard<std::mutex> lock(shared.mu);
        shared.loss_sum += static_cast<double>(r.loss) * static_cast<double>(batch);
        shared.loss_count += batch;
      };
      outcome = RunCollectiveRank(*loops[static_cast<std::size_t>(w)], plan, config, w, *payload,
                                  *control, initial, hooks);
    } catch (const std::exception& e) {
      outcome.failure = StrCat("worker ", w, ": ", e.what());
    }
    if (!outcome.failure.empty()) fail(outcome.failure);
    std::lock_guard<std::mutex> lock(shared.mu);
    ++shared.finished;
    shared.cv.notify_all();
  };
  if (checkpoint_every_steps > 0) {
    shared.next_checkpoint_push.store(shared.pushes.load() + checkpoint_every_steps * workers);
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) threads.emplace_back(worker_thread, w);

  // ---- checkpoints: the workers' average at a round boundary ---------------------------
  // One "shard" holding θ̄, its version the steps every worker took (the boundary), in the
  // checkpoint format of the other runners (experiments/record/checkpoint.h). Called while
  // the workers are parked at that boundary (or have ended there), so the counters and the
  // staleness rows are exactly those of the steps before it.
  Checkpointer checkpointer(run.path(), static_cast<int>(config.Int("experiment.checkpoint_keep")));
  double last_checkpoint_s = seconds();
  auto save_checkpoint = [&](const std::vector<float>& average, int64_t step) {
    CheckpointManifest m =
        ManifestOfRun(name, config_hash, resuming ? resume.manifest.resumes + 1 : 0, recorder);
    m.step = shared.pushes.load();
    m.steps = shared.steps.load();
    m.samples = shared.samples.load();
    m.time_s = seconds();
    staleness.Flush();
    m.staleness_rows = staleness.rows_written();
    m.staleness_histogram = staleness.histogram();
    for (std::size_t i = 0; i < loops.size(); ++i) {
      m.workers.push_back(loops[i]->Snapshot());
      if (i < resume.manifest.workers.size()) {
        AddWorkerMetrics(m.workers.back(), resume.manifest.workers[i]);
      }
    }
    transport::ShardSnapshot snap;
    snap.version = static_cast<uint64_t>(step);
    snap.values = average;
    try {
      const std::string dir = checkpointer.Save(std::move(m), {snap});
      ASGD_LOG(kInfo, "checkpoint: ", dir);
    } catch (const IoError& e) {
      ASGD_LOG(kError, "checkpoint failed: ", e.what());  // the previous ones are intact
    }
    if (checkpoint_every_steps > 0) {
      int64_t next = shared.next_checkpoint_push.load();
      while (next <= shared.pushes.load()) next += checkpoint_every_steps * workers;
      shared.next_checkpoint_push.store(next);
    }
    last_checkpoint_s = seconds();
    shared.checkpoint.store(false);
  };

  // ---- the evaluator: the main thread -------------------------------------------------
  // The workers park at the round boundaries where an evaluation or a checkpoint is due;
  // this thread evaluates or saves their average and lets them go on. It decides the time
  // limit, the evaluations by seconds and the checkpoints, which the workers learn at
  // their next vote.
  std::string reason;
  std::unique_lock<std::mutex> lock(shared.mu);
  for (;;) {
    shared.cv.wait_for(lock, std::chrono::milliseconds(5),
                       [&] { return shared.parked == workers || shared.finished > 0; });
    if (shared.parked == workers) {
      training.Hold();
      const std::vector<float> average = shared.average;
      const double consensus = shared.consensus;
      const int64_t step = shared.boundary_step;
      const bool evaluates = shared.boundary_evaluates, checkpoints = shared.boundary_checkpoints;
      lock.unlock();
      // The evaluation first: the checkpoint's rows include it.
      if (evaluates) evaluate(average, consensus, shared.samples.load(), false);
      if (checkpoints) save_checkpoint(average, step);
      lock.lock();
      if (evaluates) shared.hold.store(false);
      shared.parked = 0;
      ++shared.releases;
      shared.cv.notify_all();
      training.Release();
      continue;
    }
    if (shared.finished > 0) break;
    lock.unlock();
    staleness.Flush();
    const int64_t samples = shared.samples.load();
    if (auto why = stop.Check(samples, shared.steps.load(), seconds(), false);
        why && !shared.stop.load()) {
      reason = *why;
      shared.stop.store(true);
    }
    // By seconds only (samples 0): the workers hold themselves at the evaluations by epochs.
    if (eval_schedule.Due(0, seconds())) shared.hold.store(true);
    if (checkpoint_every_s > 0 && seconds() - last_checkpoint_s >= checkpoint_every_s) {
      shared.checkpoint.store(true);
    }
    lock.lock();
  }
  // Workers still parked when a peer failed go on, into the failure.
  shared.parked = 0;
  ++shared.releases;
  shared.cv.notify_all();
  lock.unlock();
  shared.stop.store(true);
  for (auto& t : threads) t.join();
  const double wall = seconds();
  const int64_t samples = shared.samples.load();
  const bool failed = !shared.failure.empty();
  if (failed) {
    reason = shared.failure;
  } else {
    if (reason.empty()) {
      reason = stop.Check(samples, shared.steps.load(), wall, recorder.time_to_target_s() >= 0)
                   .value_or(stop.TargetReason());
    }
    // The workers published their final average when they voted to stop.
    evaluate(shared.average, shared.consensus, samples, true);
    SaveFinalModel(*model, shared.average, run.path());
    // A finished run's last checkpoint: `--resume` with more epochs extends it.
    if (checkpointing) save_checkpoint(shared.average, shared.boundary_step);
  }
  progress.Done();
  staleness.Flush();

  RunResult result;
  result.run_dir = run.path();
  result.wall_time_s = wall;
  result.final_test_accuracy = recorder.final_test_accuracy();
  result.final_test_loss = recorder.final_test_loss();
  result.best_test_accuracy = recorder.best_test_accuracy();
  result.updates = rounds();
  result.samples = samples;
  result.reason = reason;
  result.status = failed ? "failed" : "completed";
  result.exit_status = failed ? 2 : 0;
  const StalenessRecorder::Stats st = staleness.stats();
  SummaryRow summary = recorder.Summary();
  summary.run_id = run.id();
  summary.algorithm = name;
  summary.model = config.String("model.name");
  summary.device = DescribeDevices(devices);
  summary.dataset = config.String("data.dataset");
  summary.workers = workers;
  summary.ps_shards = 0;
  summary.transport = StrCat("gloo-", col::AlgorithmName(co.algorithm));
  summary.seed = static_cast<int64_t>(seed);
  summary.epochs = static_cast<double>(samples) / static_cast<double>(train.num_examples);
  summary.samples = samples;
  summary.updates = result.updates;
  summary.wall_time_s = wall;
  summary.staleness = st;
  std::vector<WorkerMetrics> worker_metrics;
  for (const auto& loop : loops) {
    worker_metrics.push_back(loop->Snapshot());
    const std::size_t i = worker_metrics.size() - 1;
    if (i < resume.manifest.workers.size()) {
      AddWorkerMetrics(worker_metrics.back(), resume.manifest.workers[i]);
    }
    summary.bytes_pushed += worker_metrics.back().bytes_pushed;
    summary.bytes_pulled += worker_metrics.back().bytes_pulled;
  }
  summary.status = result.status;
  RunRecorder::Finish(run, summary, worker_metrics, &staleness, reason);
  if (failed) {
    ASGD_LOG(kError, reason);
    out << "run stopped: " << reason << "\nrun folder: " << run.path() << "\n";
    return result;
  }
  char line[320];
  std::snprintf(line, sizeof(line),
                "final test accuracy: %.4f (loss %.4f) after %.2f epochs, %lld communication "
                "rounds, %.1f s (%s)\nmean staleness: %.2f (max %lld) over %lld worker steps; "
                "consensus distance %.3g\n",
                result.final_test_accuracy, result.final_test_loss, summary.epochs,
                static_cast<long long>(result.updates), wall, reason.c_str(),
                st.count > 0 ? st.mean : 0.0, static_cast<long long>(st.max),
                static_cast<long long>(st.count), shared.consensus);
  out << line << "run folder: " << run.path() << "\n";
  return result;
}

}  // namespace asgd::experiments
