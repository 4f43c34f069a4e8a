#include "experiments/run/parallel_runner.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iostream>
#include <mutex>
#include <ostream>
#include <thread>

#include "algorithms/hogwild.h"
#include "algorithms/memory_store.h"
#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "core/aligned.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/loader.h"
#include "datasets/partition.h"
#include "datasets/sampler.h"
#include "experiments/config/setup.h"
#include "experiments/record/checkpoint.h"
#include "experiments/record/csv.h"
#include "experiments/record/metrics.h"
#include "experiments/record/progress.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/evaluation.h"
#include "experiments/run/problem.h"
#include "experiments/run/server_bounds.h"
#include "experiments/run/worker_loop.h"
#include "models/factory.h"
#include "ps/placement.h"
#include "sim/delay_model.h"
#include "transport/context.h"
#include "transport/ps_client.h"
#include "transport/ps_param_client.h"
#include "transport/shard_server.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;
namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

// Shared progress of all workers.
struct Shared {
  std::atomic<int64_t> samples{0};
  std::atomic<int64_t> steps{0};
  std::atomic<int64_t> pushes{0};
  std::atomic<bool> stop{false};
  // While the main thread evaluates: workers start no step (TrainingClock's held time).
  std::atomic<bool> hold{false};
  std::mutex mu;
  double loss_sum = 0;  // guarded by mu: since the last convergence row
  int64_t loss_count = 0;
  std::string failure;  // guarded by mu: the first worker failure
};

}  // namespace

RunResult RunParallel(const Config& config, const RunRequest& request, std::ostream& out) {
  Problem problem = LoadProblem(config, request);  // validated before the folder
  const uint64_t seed = problem.seed;
  const std::string& name = problem.name;
  const alg::Strategy& strategy = *problem.strategy;
  const int workers = problem.workers;
  const datasets::Dataset& train = problem.data.train;
  const datasets::Dataset& test = problem.data.test;
  std::unique_ptr<models::Model>& model = problem.model;
  const int64_t n_params = problem.n_params;
  const algorithms::OptimizerOptions& optimizer_options = problem.optimizer;
  const alg::StrategyOptions& so = problem.strategy_options;
  const alg::ScheduleOptions& schedule = problem.schedule;
  const compression::CompressionOptions compression = BuildCompressionOptions(config);
  const int64_t chunk_bytes = ChunkBytes(config);  // checked; inproc:// never chunks
  const bool ef_residual = compression.name != "none" && compression.error_feedback;
  // The [delay] model as injected sleeps (issue 13): a straggler experiment run for real.
  const sim::SimOptions sim_options = BuildSimOptions(config);  // validates [delay] etc.
  std::unique_ptr<sim::DelayModel> delay;
  if (HasDelayModel(config)) {
    delay =
        std::make_unique<sim::DelayModel>(sim_options.delay, workers, DeriveSeed(seed, "delay"));
  }
  // Hogwild on a sparse model with plain SGD touches only the batch's coordinates.
  const bool sparse = strategy.supports_sparse && model->HasSparseGradient() &&
                      optimizer_options.name == "sgd" && optimizer_options.weight_decay == 0;

  // Each worker's model on its device (model.device); the evaluator's stays on the CPU.
  std::vector<models::Device> devices;
  std::vector<std::unique_ptr<models::Model>> worker_models;
  for (int w = 0; w < workers; ++w) {
    devices.push_back(WorkerDevice(config, w, workers));
    worker_models.push_back(
        devices.back().is_cuda()
            ? models::NewModelOn(BuildModelOptions(config), InputSpecFor(train), devices.back())
            : nullptr);
  }

  const StopPolicy stop = StopPolicy::FromConfig(config, train.num_examples);
  EvalSchedule eval_schedule = EvalSchedule::FromConfig(config, train.num_examples);
  const double lr0 = config.Double("algorithm.learning_rate");
  const std::string transport_kind = config.String("cluster.transport");
  const int num_shards = static_cast<int>(config.Int("cluster.shards"));

  const int64_t checkpoint_every_steps = config.Int("experiment.checkpoint_every_steps");
  const double checkpoint_every_s = config.Double("experiment.checkpoint_every_s");
  const std::string config_hash = TrainingConfigHash(config);
  // A resumed run: its newest valid checkpoint, verified before anything is touched.
  const bool resuming = !request.resume_dir.empty();
  LoadedCheckpoint resume;
  if (resuming) {
    resume = LoadNewestCheckpoint(request.resume_dir, config_hash);
    const std::size_t want = strategy.shared_memory || transport_kind == "memory"
                                 ? 1
                                 : static_cast<std::size_t>(num_shards);
    if (resume.shards.size() != want) {
      throw DataError(resume.dir,
                      StrCat("holds ", resume.shards.size(), " shards, the run has ", want));
    }
  }

  RunDir run = resuming ? RunDir::Resume(request.resume_dir, request.command_line)
                        : RunDir::Create(WithDataStatistics(config, problem.data.train),
                                         request.name, request.command_line);
  if (resuming) {
    // The CSVs as they were at the checkpoint; this run appends to them.
    UpgradeConvergenceCsv(run.File("convergence.csv"));  // a run of before its last column
    TruncateCsv(run.File("convergence.csv"), resume.manifest.convergence_rows);
    UpgradeStalenessCsv(run.File("staleness.csv"));  // a run of before its last columns
    TruncateCsv(run.File("staleness.csv"), resume.manifest.staleness_rows);
    ASGD_LOG(kInfo, "resuming ", run.id(), " from ", resume.dir, " (update ", resume.manifest.step,
             ", ", resume.manifest.samples, " samples, ", resume.manifest.time_s, " s)");
  }
  RunRecorder recorder(run, stop.target_accuracy(),
                       resuming ? resume.manifest.convergence_rows : -1, ef_residual);
  // The workers' compressing clients (null: not compressing), for ef_residual_norm.
  std::vector<const alg::CompressingClient*> compressing_clients;
  auto staleness_file = resuming ? run.OpenAppend("staleness.csv") : run.Open("staleness.csv");
  const double time_base = resuming ? resume.manifest.time_s : 0.0;  // training time so far
  // Buffered: shard servers record while holding their shard; this thread writes the rows.
  StalenessRecorder staleness(staleness_file.get(), config.Int("metrics.staleness_rows"), time_base,
                              resuming ? resume.manifest.staleness_rows : -1, /*buffered=*/true);
  for (const auto& [worker, counts] : resume.manifest.staleness_histogram) {
    for (const auto& [s, count] : counts) staleness.AddCounts(worker, s, count);
  }

  AlignedVector<float> initial(static_cast<std::size_t>(n_params));
  model->Initialize(initial, DeriveSeed(seed, "init"));
  auto clock = NewSystemClock();
  // time_s is training time (TrainingClock's rule): from here, with the evaluations, during
  // which workers start no step, taken out.
  TrainingClock training(clock.get(), time_base);
  training.Start();

  // The parameter store, and a way to read the centre for evaluation.
  std::unique_ptr<alg::HogwildStore> hogwild;
  std::unique_ptr<alg::MemoryStore> memory;
  std::shared_ptr<tp::Context> context;
  std::vector<std::unique_ptr<tp::ShardServer>> servers;
  tp::Placement placement;
  std::string store_description;
  if (resuming && resume.shards.size() == 1 &&
      (strategy.shared_memory || transport_kind == "memory")) {
    const auto& v = resume.shards[0].values;
    if (static_cast<int64_t>(v.size()) != n_params) {
      throw DataError(resume.dir,
                      StrCat("holds ", v.size(), " parameters, the model has ", n_params));
    }
    std::copy(v.begin(), v.end(), initial.begin());
  }
  if (strategy.shared_memory) {
    hogwild = std::make_unique<alg::HogwildStore>(initial, clock.get(), &staleness,
                                                  alg::HogwildStore::AddModeOf(so));
    if (resuming) hogwild->RestoreVersion(resume.shards[0].version);
    store_description =
        sparse ? "one shared vector (lock-free, sparse updates)" : "one shared vector (lock-free)";
  } else if (transport_kind == "memory") {
    memory =
        std::make_unique<alg::MemoryStore>(std::vector<float>(initial.begin(), initial.end()),
                                           strategy.server_rule(so, 0), clock.get(), &staleness);
    if (resuming) memory->Restore(resume.shards[0]);
    store_description = "the in-memory store";
  } else {
    context = tp::NewContext();
    tp::PlacementOptions po;
    po.policy = tp::ParsePlacementPolicy(config.String("cluster.placement"));
    placement = tp::Placement::Build(model->layout(), num_shards, po);
    tp::ServerOptions base;
    base.clock = clock.get();
    base.staleness_sink = &staleness;
    ApplyServerBounds(config, &base);
    const std::string prefix = "inproc://" + run.id() + "-ps-";
    servers = tp::StartShardServers(
        context, placement, initial, [&](uint32_t s) { return strategy.server_rule(so, s); },
        [&](int s) { return prefix + std::to_string(s); }, base);
    if (resuming) {
      for (std::size_t s = 0; s < servers.size(); ++s) {
        if (resume.shards[s].values.size() !=
            static_cast<std::size_t>(placement.shard_size(static_cast<int>(s)))) {
          throw DataError(resume.dir, StrCat("shard ", s, " holds ", resume.shards[s].values.size(),
                                             " values, the placement gives it ",
                                             placement.shard_size(static_cast<int>(s))));
        }
        servers[s]->Restore(resume.shards[s]);
      }
    }
    store_description =
        StrCat(num_shards, " shard server", num_shards > 1 ? "s" : "", " over inproc://");
  }
  auto make_client = [&](uint32_t id) -> std::unique_ptr<alg::ParamClient> {
    if (hogwild) return std::make_unique<alg::HogwildClient>(hogwild.get(), id);
    if (memory) return std::make_unique<alg::MemoryClient>(memory.get(), id);
    tp::ClientOptions co;
    co.id = id;
    co.role = id < static_cast<uint32_t>(workers) ? tp::Role::kWorker : tp::Role::kEvaluator;
    co.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(config.Double("cluster.timeout_s") * 1000.0));
    co.chunk_bytes = chunk_bytes;
    return std::make_unique<tp::PsParamClient>(
        std::make_unique<tp::PsClient>(context, tp::Endpoints(servers), placement, co));
  };
  // Synchronous strategies hold workers in rounds: at the end the store is closed, so
  // that a worker waiting for peers that already stopped is answered (kShuttingDown).
  // Closed shard servers still answer pulls: the final evaluation reads through them.
  auto close_store = [&] {
    if (memory) memory->Shutdown();
    for (auto& server : servers) server->Close();
  };

  ASGD_LOG(kInfo, "run ", run.id(), ": ", name, " with ", workers, " workers on ",
           store_description, ", ", model->Describe(), " (workers on ", DescribeDevices(devices),
           "), ", train.name, " (", train.num_examples, " examples)");

  Shared shared;
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(shared.mu);
    if (shared.failure.empty()) shared.failure = why;
    shared.stop.store(true);
  };
  auto lr_scale_at = [&](int64_t samples) {
    return alg::LearningRateScale(
        schedule, static_cast<double>(samples) / static_cast<double>(train.num_examples));
  };

  // ---- the evaluator: the main thread ---------------------------------------------------
  std::unique_ptr<alg::ParamClient> reader = make_client(static_cast<uint32_t>(workers));
  AlignedVector<float> centre(static_cast<std::size_t>(n_params));
  auto read_centre = [&]() -> alg::Status {
    if (hogwild) {
      hogwild->Read(centre);
      return alg::Status::Ok();
    }
    if (memory) {
      const auto v = memory->values();
      std::copy(v.begin(), v.end(), centre.begin());
      return alg::Status::Ok();
    }
    return reader->Pull(centre);
  };
  Progress progress(Progress::DecideLive(config.String("experiment.progress")), std::cerr);
  auto seconds = [&] { return training.Seconds(); };
  if (resuming) {
    shared.samples.store(resume.manifest.samples);
    shared.steps.store(resume.manifest.steps);
    shared.pushes.store(resume.manifest.step);
    recorder.RestoreAccount(resume.manifest.best_test_accuracy, resume.manifest.time_to_target_s);
  }
  auto hold = [&] {
    shared.hold.store(true, std::memory_order_release);
    training.Hold();
  };
  auto release = [&] {
    training.Release();
    shared.hold.store(false, std::memory_order_release);
  };
  auto evaluate = [&](bool full) {
    // A worker in a step finishes it (a synchronous one may wait in its round); none
    // starts another until release().
    hold();
    const double t = seconds();
    const int64_t samples = shared.samples.load();
    alg::Status st = read_centre();
    if (!st.ok()) {
      release();
      fail("evaluator: reading the centre: " + st.ToString());
      return;
    }
    models::EvalResult r =
        EvaluateOn(*model, centre, test, train, full ? 0 : eval_schedule.ScheduledExamples());
    double train_loss = std::nan("");
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      if (shared.loss_count > 0) {
        train_loss = shared.loss_sum / static_cast<double>(shared.loss_count);
      }
      shared.loss_sum = 0;
      shared.loss_count = 0;
    }
    ConvergenceRow row = MakeConvergenceRow(
        {t, samples, shared.pushes.load(), train_loss, lr0 * lr_scale_at(samples)}, r,
        train.num_examples);
    if (ef_residual) row.ef_residual_norm = ResidualNorm(compressing_clients);
    const double best_before = recorder.best_test_accuracy();
    if (recorder.Convergence(row) && stop.stop_at_target()) shared.stop.store(true);
    SaveBestModel(*model, centre, r.accuracy(), best_before, run.path());
    progress.Evaluated(MakeProgressState(row, config.Double("experiment.epochs")), r.mean_loss());
    release();
  };

  // The first row: the initial parameters, before any worker starts.
  evaluate(false);

  // ---- workers ----------------------------------------------------------------------
  std::vector<std::unique_ptr<WorkerLoop>> loops;
  std::vector<std::unique_ptr<alg::ParamClient>> clients;
  for (int w = 0; w < workers; ++w) {
    WorkerSetup ws = MakeWorkerSetup(config, problem, w);
    const auto wi = static_cast<std::size_t>(w);
    if (worker_models[wi]) ws.model = worker_models[wi].get();
    // A resumed run draws fresh batches (not a replay of those before the checkpoint).
    ws.seed = resuming
                  ? DeriveSeed(seed, "resume", static_cast<uint64_t>(resume.manifest.resumes + 1))
                  : seed;
    ws.sparse = sparse;
    ws.clock = clock.get();
    if (delay) ws.after_gradient = InjectedDelay(delay.get(), clock.get(), w);
    loops.push_back(std::make_unique<WorkerLoop>(std::move(ws)));
    const alg::CompressingClient* compressing = nullptr;
    clients.push_back(
        CompressPushes(make_client(static_cast<uint32_t>(w)), compression, seed, w, &compressing));
    compressing_clients.push_back(compressing);
  }
  WorkerHooks hooks;
  hooks.before_step = [&](double* lr_scale) {
    while (shared.hold.load(std::memory_order_acquire)) {
      if (shared.stop.load(std::memory_order_relaxed)) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (shared.stop.load(std::memory_order_relaxed)) return false;
    const int64_t done = shared.samples.load(std::memory_order_relaxed);
    if (!stop.WorkMayContinue(done, shared.steps.load(std::memory_order_relaxed))) return false;
    *lr_scale = lr_scale_at(done);
    return true;
  };
  hooks.after_step = [&](const alg::StepResult& r, int64_t batch) {
    shared.samples.fetch_add(batch, std::memory_order_relaxed);
    shared.steps.fetch_add(r.local_steps, std::memory_order_relaxed);
    shared.pushes.fetch_add(r.pushes, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(shared.mu);
    shared.loss_sum += static_cast<double>(r.loss) * static_cast<double>(batch);
    shared.loss_count += batch;
  };
  // After the run ended, a synchronous worker's pending request is answered with
  // kShuttingDown: that is the end of its last round, not a failure.
  hooks.ending = [&] { return shared.stop.load(); };
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      const auto i = static_cast<std::size_t>(w);
      const WorkerOutcome o = loops[i]->Run(*clients[i], hooks);
      if (!o.failure.empty()) fail(o.failure);
    });
  }

  // ---- checkpoints ---------------------------------------------------------------
  Checkpointer checkpointer(run.path(), static_cast<int>(config.Int("experiment.checkpoint_keep")));
  const int64_t base_pushes = shared.pushes.load();
  int64_t next_checkpoint_step =
      checkpoint_every_steps > 0 ? base_pushes + checkpoint_every_steps : 0;
  double last_checkpoint_s = seconds();
  auto save_checkpoint = [&] {
    CheckpointManifest m =
        ManifestOfRun(name, config_hash, resuming ? resume.manifest.resumes + 1 : 0, recorder);
    std::vector<tp::ShardSnapshot> shards;
    // The counters and the staleness records are read while every shard is held, so they
    // describe exactly the pushes the snapshots contain (the workers' own counters may
    // run a step ahead: they are for workers.csv, not for the model).
    auto read_counters = [&] {
      m.step = shared.pushes.load();
      m.steps = shared.steps.load();
      m.samples = shared.samples.load();
      m.time_s = seconds();
      m.staleness_rows = staleness.rows_written();
      m.staleness_histogram = staleness.histogram();
    };
    if (hogwild) {
      read_counters();  // lock-free: a copy taken while workers may write (Hogwild's own view)
      tp::ShardSnapshot snap;
      snap.version = hogwild->version();
      snap.values = hogwild->values();
      shards.push_back(std::move(snap));
    } else if (memory) {
      shards.push_back(memory->Snapshot(read_counters));
    } else {
      shards = tp::SnapshotTogether(servers, read_counters);
    }
    for (const auto& loop : loops) m.workers.push_back(loop->Snapshot());
    for (std::size_t i = 0; i < m.workers.size() && i < resume.manifest.workers.size(); ++i) {
      AddWorkerMetrics(m.workers[i], resume.manifest.workers[i]);
    }
    if (!strategy.synchronous) {
      // The pushes the snapshots contain, from their records (one per push per shard):
      // the workers' own counters lag by a push still in flight when it was taken.
      int64_t total = 0;
      const auto per_push = static_cast<int64_t>(shards.size());
      for (auto& w : m.workers) {
        int64_t records = 0;
        const auto it = m.staleness_histogram.find(static_cast<uint32_t>(w.worker));
        if (it != m.staleness_histogram.end()) {
          for (const auto& entry : it->second) records += entry.second;
        }
        w.pushes = records / per_push;
        total += w.pushes;
      }
      m.step = total;
    }
    // The file holds at least the m.staleness_rows rows the manifest names.
    staleness.Flush();
    const std::string dir = checkpointer.Save(std::move(m), shards);
    ASGD_LOG(kInfo, "checkpoint: ", dir);
  };

  eval_schedule.SetLastTime(seconds());
  std::string reason;
  for (;;) {
    if ((checkpoint_every_steps > 0 && shared.pushes.load() >= next_checkpoint_step) ||
        (checkpoint_every_s > 0 && seconds() - last_checkpoint_s >= checkpoint_every_s)) {
      if (checkpoint_every_steps > 0) {
        while (next_checkpoint_step <= shared.pushes.load())
          next_checkpoint_step += checkpoint_every_steps;
      }
      try {
        save_checkpoint();
      } catch (const IoError& e) {
        // The run goes on; the previous checkpoints are intact.
        ASGD_LOG(kError, "checkpoint failed: ", e.what());
      }
      last_checkpoint_s = seconds();
    }
    const int64_t samples = shared.samples.load();
    if (shared.stop.load()) break;
    // The target is reached in evaluate(), which raises shared.stop.
    if (auto why = stop.Check(samples, shared.steps.load(), seconds(), false)) {
      reason = *why;
      break;
    }
    if (eval_schedule.Due(samples, seconds())) {
      evaluate(false);
      // The schedule by seconds counts training time (the evaluation is held time).
      eval_schedule.Evaluated(samples, seconds(), false);
      continue;
    }
    staleness.Flush();
    clock->SleepFor(std::chrono::milliseconds(5));
  }
  shared.stop.store(true);
  if (strategy.synchronous) close_store();
  for (auto& t : threads) t.join();
  const double wall = seconds();
  {
    std::lock_guard<std::mutex> lock(shared.mu);
    if (!shared.failure.empty()) reason = shared.failure;
  }
  const bool failed = reason == shared.failure && !shared.failure.empty();
  if (reason.empty()) reason = stop.TargetReason();
  if (!failed) evaluate(true);
  if (!failed) SaveFinalModel(*model, centre, run.path());
  // A finished run's last checkpoint: `--resume` with more epochs extends it.
  if (!failed && (checkpoint_every_steps > 0 || checkpoint_every_s > 0)) {
    try {
      save_checkpoint();
    } catch (const IoError& e) {
      ASGD_LOG(kError, "checkpoint failed: ", e.what());
    }
  }
  progress.Done();
  reader.reset();
  clients.clear();
  servers.clear();
  staleness.Flush();

  std::vector<WorkerMetrics> worker_metrics;
  for (const auto& loop : loops) {
    worker_metrics.push_back(loop->Snapshot());
    const std::size_t i = worker_metrics.size() - 1;
    if (i < resume.manifest.workers.size()) {
      AddWorkerMetrics(worker_metrics.back(), resume.manifest.workers[i]);
    }
  }
  RunEnd end;
  end.time_s = wall;
  end.samples = shared.samples.load();
  end.updates = shared.pushes.load();
  end.reason = reason;
  end.failed = failed;
  end.device = DescribeDevices(devices);
  end.ps_shards = hogwild ? 0 : memory ? 1 : num_shards;
  end.transport = hogwild ? "shared" : transport_kind;
  return FinishRun(config, problem, run, recorder, staleness, end, worker_metrics, {}, out);
}

}  // namespace asgd::experiments
