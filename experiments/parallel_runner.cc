#include "experiments/parallel_runner.h"

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
#include "experiments/csv.h"
#include "experiments/evaluation.h"
#include "experiments/progress.h"
#include "experiments/ps_param_client.h"
#include "experiments/run_dir.h"
#include "experiments/setup.h"
#include "models/factory.h"
#include "transport/context.h"
#include "transport/placement.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;
namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

const std::vector<std::string> kConvergenceColumns = {
    "time_s",    "epoch",     "samples",       "updates",       "train_loss",
    "test_loss", "test_accuracy", "eval_examples", "learning_rate"};
const std::vector<std::string> kStalenessColumns = {
    "time_s", "worker", "shard", "step", "pulled_version", "applied_version", "staleness",
    "outcome"};

// Writes staleness records as CSV rows as they come (thread-safe; shards and workers
// call it concurrently) and keeps the sums for the summary.
class CsvStalenessSink final : public tp::StalenessSink {
 public:
  explicit CsvStalenessSink(std::ostream& out) : writer_(out, kStalenessColumns) {}
  void Record(const tp::StalenessRecord& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    writer_.Write(r.wall_time_s, static_cast<int64_t>(r.worker), static_cast<int64_t>(r.shard),
                  r.step, static_cast<int64_t>(r.pulled_version),
                  static_cast<int64_t>(r.applied_version), r.staleness,
                  std::string(tp::PushOutcomeName(r.outcome)));
    ++count_;
    sum_ += std::max<int64_t>(0, r.staleness);
    max_ = std::max(max_, r.staleness);
  }
  int64_t count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }
  double mean() const {
    std::lock_guard<std::mutex> lock(mu_);
    return count_ > 0 ? static_cast<double>(sum_) / static_cast<double>(count_) : 0.0;
  }
  int64_t max() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_;
  }

 private:
  mutable std::mutex mu_;
  CsvWriter writer_;
  int64_t count_ = 0, sum_ = 0, max_ = 0;
};

// Shared progress of all workers.
struct Shared {
  std::atomic<int64_t> samples{0};
  std::atomic<int64_t> steps{0};
  std::atomic<int64_t> pushes{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  double loss_sum = 0;  // guarded by mu: since the last convergence row
  int64_t loss_count = 0;
  std::string failure;  // guarded by mu: the first worker failure
};

}  // namespace

RunResult RunParallel(const Config& config, const RunRequest& request, std::ostream& out) {
  const auto seed = static_cast<uint64_t>(config.Int("experiment.seed"));
  const std::string name = config.String("algorithm.name");
  const alg::Strategy& strategy = alg::FindStrategy(name);
  const int workers = static_cast<int>(config.Int("algorithm.workers"));

  datasets::TrainTest data = datasets::LoadDataset(BuildDataOptions(config, request.data_dirs));
  const datasets::Dataset& train = data.train;
  const datasets::Dataset& test = data.test;
  std::unique_ptr<models::Model> model =
      models::NewModel(BuildModelOptions(config), InputSpecFor(train));
  const int64_t n_params = model->layout().size();
  const algorithms::OptimizerOptions optimizer_options = BuildOptimizerOptions(config);
  (void)algorithms::NewOptimizer(optimizer_options, n_params);  // validate before the folder

  const alg::StrategyOptions so = BuildStrategyOptions(config);
  (void)strategy.server_rule(so, 0);  // validates the server options
  const alg::ScheduleOptions schedule = BuildScheduleOptions(config);
  // Hogwild on a sparse model with plain SGD touches only the batch's coordinates.
  const bool sparse = strategy.supports_sparse && model->HasSparseGradient() &&
                      optimizer_options.name == "sgd" && optimizer_options.weight_decay == 0;

  const int64_t batch_size = config.Int("algorithm.batch_size");
  const auto shards_of_data = datasets::PartitionIndices(train.num_examples, workers,
                                                         DeriveSeed(seed, "partition"));
  for (int w = 0; w < workers; ++w) {
    if (static_cast<int64_t>(shards_of_data[static_cast<std::size_t>(w)].size()) < 1) {
      throw ConfigError("algorithm.workers", std::to_string(workers),
                        StrCat("at most ", train.num_examples, " workers (one example each)"));
    }
  }
  const double total_samples =
      config.Double("experiment.epochs") * static_cast<double>(train.num_examples);
  const int64_t max_steps = config.Int("experiment.max_steps");
  const double max_time_s = config.Double("experiment.max_time_s");
  const double target = config.Double("experiment.target_accuracy");
  const bool stop_at_target = config.Bool("experiment.stop_at_target");
  if (stop_at_target && target <= 0) {
    throw ConfigError("experiment.stop_at_target", "true",
                      "experiment.target_accuracy > 0 when stop_at_target is true");
  }
  const double eval_every_samples =
      config.Double("metrics.eval_every_epochs") * static_cast<double>(train.num_examples);
  const double eval_every_s = config.Double("metrics.eval_every_s");
  const int64_t eval_examples = config.Int("metrics.eval_examples");
  const double lr0 = config.Double("algorithm.learning_rate");
  const std::string transport_kind = config.String("cluster.transport");
  const int num_shards = static_cast<int>(config.Int("cluster.shards"));

  RunDir run = RunDir::Create(config, request.name, request.command_line);
  auto convergence_file = run.Open("convergence.csv");
  auto staleness_file = run.Open("staleness.csv");
  CsvWriter convergence(*convergence_file, kConvergenceColumns);
  CsvStalenessSink staleness(*staleness_file);

  AlignedVector<float> initial(static_cast<std::size_t>(n_params));
  model->Initialize(initial, DeriveSeed(seed, "init"));
  auto clock = NewSystemClock();

  // The parameter store, and a way to read the centre for evaluation.
  std::unique_ptr<alg::HogwildStore> hogwild;
  std::unique_ptr<alg::MemoryStore> memory;
  std::shared_ptr<tp::Context> context;
  std::vector<std::unique_ptr<tp::ShardServer>> servers;
  tp::Placement placement;
  std::string store_description;
  if (strategy.shared_memory) {
    hogwild = std::make_unique<alg::HogwildStore>(initial, clock.get(), &staleness);
    store_description = sparse ? "one shared vector (lock-free, sparse updates)"
                               : "one shared vector (lock-free)";
  } else if (transport_kind == "memory") {
    memory = std::make_unique<alg::MemoryStore>(
        std::vector<float>(initial.begin(), initial.end()), strategy.server_rule(so, 0),
        clock.get(), &staleness);
    store_description = "the in-memory store";
  } else {
    context = tp::NewContext();
    tp::PlacementOptions po;
    po.policy = tp::ParsePlacementPolicy(config.String("cluster.placement"));
    placement = tp::Placement::Build(model->layout(), num_shards, po);
    tp::ServerOptions base;
    base.clock = clock.get();
    base.staleness_sink = &staleness;
    const std::string prefix = "inproc://" + run.id() + "-ps-";
    servers = tp::StartShardServers(
        context, placement, initial,
        [&](uint32_t s) { return strategy.server_rule(so, s); },
        [&](int s) { return prefix + std::to_string(s); }, base);
    store_description = StrCat(num_shards, " shard server", num_shards > 1 ? "s" : "",
                               " over inproc://");
  }
  auto make_client = [&](uint32_t id) -> std::unique_ptr<alg::ParamClient> {
    if (hogwild) return std::make_unique<alg::HogwildClient>(hogwild.get(), id);
    if (memory) return std::make_unique<alg::MemoryClient>(memory.get(), id);
    tp::ClientOptions co;
    co.id = id;
    co.role = id < static_cast<uint32_t>(workers) ? tp::Role::kWorker : tp::Role::kEvaluator;
    co.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(config.Double("cluster.timeout_s") * 1000.0));
    return std::make_unique<PsParamClient>(
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
           store_description, ", ", model->Describe(), ", ", train.name, " (",
           train.num_examples, " examples)");

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
  RunResult result;
  result.run_dir = run.path();
  double time_to_target = -1;
  auto seconds = [&] { return std::chrono::duration<double>(clock->Now()).count(); };
  auto evaluate = [&](bool full) {
    const double t = seconds();
    const int64_t samples = shared.samples.load();
    alg::Status st = read_centre();
    if (!st.ok()) {
      fail("evaluator: reading the centre: " + st.ToString());
      return;
    }
    models::EvalResult r = EvaluateOn(*model, centre, test, full ? 0 : eval_examples);
    double train_loss = std::nan("");
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      if (shared.loss_count > 0) {
        train_loss = shared.loss_sum / static_cast<double>(shared.loss_count);
      }
      shared.loss_sum = 0;
      shared.loss_count = 0;
    }
    const double epoch = static_cast<double>(samples) / static_cast<double>(train.num_examples);
    convergence.Write(t, epoch, samples, shared.pushes.load(), train_loss, r.mean_loss(),
                      r.accuracy(), r.count, lr0 * lr_scale_at(samples));
    ProgressState ps;
    ps.epoch = epoch;
    ps.target_epochs = config.Double("experiment.epochs");
    ps.updates = shared.pushes.load();
    ps.train_loss = std::isnan(train_loss) ? 0.0 : train_loss;
    ps.test_accuracy = r.accuracy();
    ps.elapsed_s = t;
    ps.updates_per_s = t > 0 ? static_cast<double>(ps.updates) / t : 0.0;
    progress.Evaluated(ps, r.mean_loss());
    result.final_test_accuracy = r.accuracy();
    result.final_test_loss = r.mean_loss();
    result.best_test_accuracy = std::max(result.best_test_accuracy, r.accuracy());
    if (target > 0 && time_to_target < 0 && r.accuracy() >= target) {
      time_to_target = t;
      if (stop_at_target) shared.stop.store(true);
    }
  };

  // The first row: the initial parameters, before any worker starts.
  evaluate(false);

  // ---- workers ----------------------------------------------------------------------
  std::atomic<int64_t> dropped{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::unique_ptr<alg::ParamClient> client;
      // After the run ended, a synchronous worker's pending request is answered with
      // kShuttingDown: that is the end of its last round, not a failure.
      auto stopped = [&](const alg::Status& st) {
        return shared.stop.load() && st.error_code() == tp::ErrorCode::kShuttingDown;
      };
      try {
        std::unique_ptr<models::Model> local = model->Clone();
        datasets::SamplerOptions sopt;
        sopt.batch_size = batch_size;
        sopt.seed = DeriveSeed(seed, "sampler", static_cast<uint64_t>(w));
        datasets::BatchSampler sampler(train, shards_of_data[static_cast<std::size_t>(w)], sopt);
        auto optimizer = algorithms::NewOptimizer(optimizer_options, n_params);
        client = make_client(static_cast<uint32_t>(w));
        int64_t last_batch = 0;
        alg::WorkerEnv env;
        env.worker = w;
        env.num_workers = workers;
        env.ps = client.get();
        env.optimizer = optimizer.get();
        env.clock = clock.get();
        env.options = so.worker;
        env.options.learning_rate = WorkerLearningRate(config, w);
        env.gradient = [&](std::span<const float> params, std::span<float> grad) {
          datasets::BatchView batch = sampler.Next();
          last_batch = batch.size;
          return local->LossAndGradient(params, batch, grad);
        };
        AlignedVector<float> sparse_params;
        models::SparseGradient sparse_grad;
        std::vector<int64_t> touched;
        if (sparse) {
          sparse_params.assign(static_cast<std::size_t>(n_params), 0.0f);
          env.sparse_gradient = [&](const alg::SparseReader& read, alg::SparseUpdate* grad,
                                    alg::Status* status) -> float {
            datasets::BatchView batch = sampler.Next();
            last_batch = batch.size;
            // The coordinates the batch touches: its features and the bias (the last).
            touched.assign(batch.indices + batch.indptr[0], batch.indices + batch.indptr[batch.size]);
            touched.push_back(n_params - 1);
            std::sort(touched.begin(), touched.end());
            touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
            *status = read(touched, sparse_params);
            if (!status->ok()) return std::nanf("");
            const float loss = local->LossAndSparseGradient(sparse_params, batch, &sparse_grad);
            grad->indices.swap(sparse_grad.indices);
            grad->values.swap(sparse_grad.values);
            return loss;
          };
        }
        auto rule = strategy.worker_rule(so);
        alg::Status st = rule->Start(env);
        if (!st.ok()) {
          if (!stopped(st)) fail(StrCat("worker ", w, ": first pull: ", st.ToString()));
          return;
        }
        while (!shared.stop.load(std::memory_order_relaxed)) {
          const int64_t done = shared.samples.load(std::memory_order_relaxed);
          if (static_cast<double>(done) >= total_samples) break;
          if (max_steps > 0 && shared.steps.load(std::memory_order_relaxed) >= max_steps) break;
          env.learning_rate_scale = lr_scale_at(done);
          alg::StepResult r = rule->Step(env);
          if (stopped(r.status)) break;
          if (!std::isfinite(r.loss)) {
            return fail(StrCat("training loss is ", std::isnan(r.loss) ? "NaN" : "infinite",
                               " on worker ", w, "; lower algorithm.learning_rate (now ",
                               config.Raw("algorithm.learning_rate"), ")"));
          }
          if (!r.status.ok()) return fail(StrCat("worker ", w, ": ", r.status.ToString()));
          shared.samples.fetch_add(last_batch, std::memory_order_relaxed);
          shared.steps.fetch_add(1, std::memory_order_relaxed);
          shared.pushes.fetch_add(r.pushes, std::memory_order_relaxed);
          std::lock_guard<std::mutex> lock(shared.mu);
          shared.loss_sum += static_cast<double>(r.loss) * static_cast<double>(last_batch);
          shared.loss_count += last_batch;
        }
        st = rule->Finish(env);
        if (!st.ok() && !stopped(st)) fail(StrCat("worker ", w, ": finishing: ", st.ToString()));
      } catch (const std::exception& e) {
        fail(StrCat("worker ", w, ": ", e.what()));
      }
      if (client) dropped.fetch_add(client->dropped_pushes());
    });
  }

  double next_eval_samples = eval_every_samples;
  double last_eval_s = seconds();
  std::string reason;
  for (;;) {
    const int64_t samples = shared.samples.load();
    if (shared.stop.load()) break;
    if (static_cast<double>(samples) >= total_samples) {
      reason = "reached " + config.Raw("experiment.epochs") + " epochs";
      break;
    }
    if (max_steps > 0 && shared.steps.load() >= max_steps) {
      reason = "reached max_steps " + std::to_string(max_steps);
      break;
    }
    if (max_time_s > 0 && seconds() >= max_time_s) {
      reason = "reached max_time_s " + config.Raw("experiment.max_time_s");
      break;
    }
    if (static_cast<double>(samples) >= next_eval_samples ||
        (eval_every_s > 0 && seconds() - last_eval_s >= eval_every_s)) {
      while (next_eval_samples <= static_cast<double>(samples)) next_eval_samples += eval_every_samples;
      evaluate(false);
      last_eval_s = seconds();
      continue;
    }
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
  if (reason.empty()) reason = "reached target accuracy " + config.Raw("experiment.target_accuracy");
  if (!failed) evaluate(true);
  progress.Done();
  reader.reset();
  servers.clear();

  result.wall_time_s = wall;
  result.updates = shared.pushes.load();
  result.samples = shared.samples.load();
  result.reason = reason;
  result.status = failed ? "failed" : "completed";
  result.exit_status = failed ? 2 : 0;
  std::map<std::string, std::string> extra = {
      {"final_test_accuracy", CsvCell(result.final_test_accuracy)},
      {"updates", std::to_string(result.updates)},
      {"wall_time_s", CsvCell(result.wall_time_s)},
      {"mean_staleness", CsvCell(staleness.mean())},
      {"max_staleness", std::to_string(staleness.max())},
      {"staleness_records", std::to_string(staleness.count())},
      {"dropped_pushes", std::to_string(dropped.load())}};
  if (time_to_target >= 0) extra["time_to_target_s"] = CsvCell(time_to_target);
  run.Finish(result.status, reason, extra);
  if (failed) {
    ASGD_LOG(kError, reason);
    out << "run stopped: " << reason << "\nrun folder: " << run.path() << "\n";
    return result;
  }
  char line[320];
  std::snprintf(line, sizeof(line),
                "final test accuracy: %.4f (loss %.4f) after %.2f epochs, %lld pushes, %.1f s "
                "(%s)\nmean staleness: %.2f (max %lld) over %lld pushes%s\n",
                result.final_test_accuracy, result.final_test_loss,
                static_cast<double>(result.samples) / static_cast<double>(train.num_examples),
                static_cast<long long>(result.updates), wall, reason.c_str(), staleness.mean(),
                static_cast<long long>(staleness.max()), static_cast<long long>(staleness.count()),
                dropped.load() > 0 ? StrCat("; ", dropped.load(), " dropped as stale").c_str() : "");
  out << line << "run folder: " << run.path() << "\n";
  return result;
}

}  // namespace asgd::experiments
