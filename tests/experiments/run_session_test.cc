// The parts every in-process driver shares: the one store interface (every store the
// factory makes keeps the same contract) and the run session (counters, checkpoint timing,
// evaluation rows, the end of a run).
#include "experiments/run/run_session.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "datasets/partition.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/setup.h"
#include "experiments/record/csv.h"
#include "experiments/run/param_stores.h"
#include "experiments/run/problem.h"
#include "sim/network_model.h"
#include "sim/scheduler.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

Config SyntheticConfig(const std::string& out_dir, const std::vector<std::string>& sets) {
  return Config::FromString(
      "[experiment]\nname = session\nprogress = off\nlog_level = error\nepochs = 1\n"
      "out_dir = " +
          out_dir +
          "\n[data]\ndataset = synthetic\nsynthetic_train = 400\nsynthetic_test = 100\n"
          "synthetic_classes = 3\nsynthetic_features = 8\n[model]\nname = mlp\nhidden = 4\n"
          "[algorithm]\nworkers = 2\n",
      sets, ExperimentSchema());
}

// The first data row of a CSV file as column -> cell.
std::map<std::string, std::string> FirstRow(const fs::path& file) {
  std::ifstream in(file);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  const std::vector<std::string> names = ParseCsvLine(header);
  const std::vector<std::string> cells = ParseCsvLine(row);
  std::map<std::string, std::string> m;
  for (std::size_t i = 0; i < names.size() && i < cells.size(); ++i) m[names[i]] = cells[i];
  return m;
}

// The data rows of a CSV file.
int DataRows(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  int rows = -1;  // the header
  while (std::getline(in, line)) ++rows;
  return rows;
}

struct StoreCase {
  std::string name;       // the test's name
  std::string strategy;   // algorithm.name
  std::string transport;  // cluster.transport
  StoreKind kind;
  int ps_shards;
  int snapshots;
};

class EveryStore : public ::testing::TestWithParam<StoreCase> {};

// Every store the factory makes: clients that push into it, Read, a snapshot of every
// shard that restores into a fresh store, one stats type, and one DataError line naming the
// checkpoint for snapshots that do not fit.
TEST_P(EveryStore, ServesReadsSnapshotsAndRestores) {
  const StoreCase& c = GetParam();
  testing::TempDir dir;
  const Config config = SyntheticConfig(
      dir.File("runs"),
      {"algorithm.name=" + c.strategy, "cluster.transport=" + c.transport, "cluster.shards=2"});
  const Problem problem = LoadProblem(config, {});
  ASSERT_EQ(problem.plan.store, c.kind);
  const auto n = static_cast<std::size_t>(problem.n_params);
  std::vector<float> initial(n);
  for (std::size_t i = 0; i < n; ++i) initial[i] = static_cast<float>(i % 7);

  sim::Scheduler sched;
  sim::NetworkModel network(problem.plan.sim.network, problem.plan.workers, problem.plan.shards);
  auto clock = NewSystemClock();
  StoreParts parts;
  parts.initial = initial;
  parts.clock = clock.get();
  parts.run_id = "session-test-" + c.name;
  parts.scheduler = &sched;
  parts.network = &network;
  // A simulated store's clients block their scheduler task: run the calls as one.
  auto call = [&](const std::function<void()>& body) {
    if (c.kind != StoreKind::kSimulated) return body();
    sched.Spawn("test", body);
    sched.Run();
  };

  std::unique_ptr<ps::ParamStore> store = NewParamStore(problem, parts);
  EXPECT_EQ(store->transport(), c.kind == StoreKind::kShared ? "shared" : c.transport);
  EXPECT_EQ(store->ps_shards(), c.ps_shards);
  EXPECT_EQ(store->snapshot_count(), c.snapshots);
  EXPECT_EQ(store->size(), problem.n_params);
  EXPECT_FALSE(store->Describe().empty());

  std::vector<float> read(n);
  ASSERT_TRUE(store->Read(read).ok());
  EXPECT_EQ(read, initial);

  // Two workers push ones, then twos: the add rule (async_sgd) and Hogwild's add.
  std::vector<float> ones(n, 1.0f), twos(n, 2.0f);
  call([&] {
    auto a = store->NewClient(0, ps::Role::kWorker);
    auto b = store->NewClient(1, ps::Role::kWorker);
    std::vector<float> pulled(n);
    ASSERT_TRUE(a->Pull(pulled).ok());
    ASSERT_TRUE(b->Pull(pulled).ok());
    ASSERT_TRUE(a->Push(ones, 1).ok());
    ASSERT_TRUE(b->Push(twos, 1).ok());
  });
  ASSERT_TRUE(store->Read(read).ok());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(read[i], initial[i] + 3.0f) << i;
  const ps::StoreStats stats = store->stats();
  // One record per push and shard; b's push came one version after what it pulled.
  const auto shards = static_cast<uint64_t>(std::max(1, c.ps_shards));
  EXPECT_EQ(stats.records, 2 * shards);
  EXPECT_EQ(stats.staleness_sum, shards);
  EXPECT_EQ(stats.pushes_dropped, 0u);

  int held = 0;
  const std::vector<ps::ShardSnapshot> snaps = store->Snapshot([&] { ++held; });
  EXPECT_EQ(held, 1);
  ASSERT_EQ(snaps.size(), static_cast<std::size_t>(c.snapshots));

  // A fresh store from other values, restored: the pushed values and versions.
  const std::vector<float> zeros(n, 0.0f);
  parts.initial = zeros;
  parts.run_id += "-restored";
  store.reset();
  std::unique_ptr<ps::ParamStore> restored = NewParamStore(problem, parts);
  restored->Restore(snaps, "ckpt-7");
  std::vector<float> after(n);
  ASSERT_TRUE(restored->Read(after).ok());
  EXPECT_EQ(after, read);
  const std::vector<ps::ShardSnapshot> again = restored->Snapshot();
  for (std::size_t s = 0; s < snaps.size(); ++s) EXPECT_EQ(again[s].version, snaps[s].version);

  // Snapshots that do not fit: one DataError naming the checkpoint.
  std::vector<ps::ShardSnapshot> more = snaps;
  more.push_back(snaps.back());
  try {
    restored->Restore(more, "ckpt-7");
    ADD_FAILURE() << "a checkpoint with one shard too many was restored";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ckpt-7"));
    EXPECT_THAT(e.what(), HasSubstr("shards"));
  }
  // Other values, the last shard one too long: refused before any shard is touched.
  std::vector<ps::ShardSnapshot> longer = snaps;
  for (auto& snap : longer) std::fill(snap.values.begin(), snap.values.end(), 9.0f);
  longer.back().values.push_back(0.0f);
  EXPECT_THROW(restored->Restore(longer, "ckpt-7"), DataError);
  // Nothing changed by the refused restores.
  ASSERT_TRUE(restored->Read(after).ok());
  EXPECT_EQ(after, read);
}

INSTANTIATE_TEST_SUITE_P(
    Stores, EveryStore,
    ::testing::Values(StoreCase{"shared", "hogwild", "inproc", StoreKind::kShared, 0, 1},
                      StoreCase{"memory", "async_sgd", "memory", StoreKind::kMemory, 1, 1},
                      StoreCase{"inproc", "async_sgd", "inproc", StoreKind::kShardServers, 2, 2},
                      StoreCase{"sim", "async_sgd", "sim", StoreKind::kSimulated, 2, 2}),
    [](const ::testing::TestParamInfo<StoreCase>& p) { return p.param.name; });

// The run plan holds, typed, what the drivers and the ranks of a collective read from
// [experiment], [metrics], the schedule and the shard servers' [cluster] bounds: the stop
// rules and the evaluations it builds are those the config's keys give.
TEST(RunPlan, HoldsTheStopRulesTheEvaluationsTheScheduleAndTheServerBounds) {
  const Config config = SyntheticConfig(
      "unused", {"experiment.epochs=2.5", "experiment.max_steps=40", "experiment.max_time_s=7",
                 "experiment.target_accuracy=0.9", "experiment.stop_at_target=true",
                 "metrics.eval_every_epochs=0.25", "metrics.eval_every_s=3",
                 "metrics.eval_examples=50", "algorithm.lr_decay=0.5", "algorithm.warmup_epochs=1",
                 "cluster.max_queued_reply_bytes=123456789", "cluster.barrier_timeout_s=2.5",
                 "cluster.max_barriers_per_peer=3"});
  const RunPlan plan = RunPlan::FromConfig(config);
  EXPECT_EQ(plan.schedule.decay, 0.5);
  EXPECT_EQ(plan.schedule.warmup_epochs, BuildScheduleOptions(config).warmup_epochs);
  EXPECT_EQ(plan.server_bounds.max_queued_reply_bytes, 123456789u);
  EXPECT_EQ(plan.server_bounds.barrier_timeout_s, 2.5);
  EXPECT_EQ(plan.server_bounds.max_barriers_per_peer, 3);

  const StopPolicy expected = StopPolicy::FromConfig(config, 400);
  const StopPolicy stop = plan.MakeStopPolicy(400);
  EXPECT_EQ(stop.total_samples(), expected.total_samples());
  EXPECT_EQ(stop.limits().max_steps, 40);
  EXPECT_EQ(stop.TimeReason(), expected.TimeReason());
  EXPECT_EQ(stop.TargetReason(), expected.TargetReason());
  EXPECT_EQ(stop.Check(999, 40, 0, false), expected.Check(999, 40, 0, false));

  EvalSchedule want = EvalSchedule::FromConfig(config, 400);
  EvalSchedule got = plan.MakeEvalSchedule(400);
  EXPECT_EQ(got.next_samples(), want.next_samples());
  EXPECT_EQ(got.ScheduledIsFull(), want.ScheduledIsFull());
  EXPECT_EQ(got.Due(0, 3.0), want.Due(0, 3.0));
  EXPECT_FALSE(got.Due(0, 2.9));
}

// What no executor of the group family does is refused by the plan, once, before any
// driver or role starts, with the key: CURVE (gloo's TCP is not encrypted) and, in a
// simulation, a network sharing other than fifo. The store family keeps both.
TEST(RunPlan, RefusesWhatNoExecutorOfTheGroupFamilyDoes) {
  const auto key_of = [](const std::vector<std::string>& sets) -> std::string {
    try {
      (void)RunPlan::FromConfig(SyntheticConfig("unused", sets));
    } catch (const ConfigError& e) {
      return e.key();
    }
    return "";
  };
  EXPECT_EQ(key_of({"algorithm.name=allreduce_sgd", "cluster.curve=true"}), "cluster.curve");
  EXPECT_EQ(key_of({"algorithm.name=dpsgd", "algorithm.workers=4", "cluster.transport=sim",
                    "network.sharing=fair"}),
            "network.sharing");
  EXPECT_EQ(key_of({"algorithm.name=local_sgd", "network.sharing=fair"}), "");
  EXPECT_EQ(key_of({"algorithm.name=async_sgd", "cluster.transport=sim", "network.sharing=fair"}),
            "");
  EXPECT_EQ(key_of({"algorithm.name=async_sgd", "cluster.curve=true"}), "");
}

TEST(RunCounters, MeanLossIsPerExampleAndStartsAfreshAndTheFirstFailureStays) {
  RunCounters c;
  EXPECT_TRUE(std::isnan(c.TakeMeanLoss()));
  c.AddStep(10, 1, 1, 2.0f);
  c.AddStep(30, 2, 0, 4.0f);
  EXPECT_EQ(c.samples.load(), 40);
  EXPECT_EQ(c.steps.load(), 3);
  EXPECT_EQ(c.pushes.load(), 1);
  EXPECT_DOUBLE_EQ(c.TakeMeanLoss(), (10 * 2.0 + 30 * 4.0) / 40);
  EXPECT_TRUE(std::isnan(c.TakeMeanLoss()));
  EXPECT_FALSE(c.stop.load());
  c.Fail("worker 1: first");
  c.Fail("worker 0: second");
  EXPECT_TRUE(c.stop.load());
  EXPECT_EQ(c.failure(), "worker 1: first");
}

// metrics.eval_examples = k: the scheduled evaluations use k test examples drawn with the
// run's seed, the same k in every process that loads the problem; the final one and
// k = 0 (or k at least the test set) use the whole test set.
TEST(Problem, ScheduledEvaluationsUseASeededSampleOfTheTestSet) {
  testing::TempDir dir;
  auto load = [&](const std::vector<std::string>& sets) {
    return LoadProblem(SyntheticConfig(dir.File("runs"), sets), {});
  };
  const Problem p = load({"metrics.eval_examples=30", "experiment.seed=5"});
  ASSERT_EQ(p.eval_subset.num_examples, 30);
  EXPECT_EQ(&p.EvalSet(false), &p.eval_subset);
  EXPECT_EQ(&p.EvalSet(true), &p.data.test);
  const std::vector<int64_t> drawn =
      datasets::SampleIndices(100, 30, DeriveSeed(5, "eval_examples"));
  EXPECT_NE(drawn.back(), 29);  // not the first 30
  const auto d = static_cast<std::size_t>(p.data.test.num_features);
  for (std::size_t k = 0; k < drawn.size(); ++k) {
    const auto i = static_cast<std::size_t>(drawn[k]);
    EXPECT_EQ(p.eval_subset.labels[k], p.data.test.labels[i]) << k;
    EXPECT_TRUE(std::equal(p.data.test.Row(drawn[k]), p.data.test.Row(drawn[k]) + d,
                           p.eval_subset.Row(static_cast<int64_t>(k))))
        << k;
  }
  const Problem again = load({"metrics.eval_examples=30", "experiment.seed=5"});
  EXPECT_EQ(again.eval_subset.labels, p.eval_subset.labels);
  EXPECT_TRUE(std::equal(again.eval_subset.dense.begin(), again.eval_subset.dense.end(),
                         p.eval_subset.dense.begin(), p.eval_subset.dense.end()));
  for (const char* all : {"metrics.eval_examples=0", "metrics.eval_examples=100"}) {
    const Problem q = load({all});
    EXPECT_EQ(q.eval_subset.num_examples, 0) << all;
    EXPECT_EQ(&q.EvalSet(false), &q.data.test) << all;
  }
}

// Checkpoints by pushes count experiment.checkpoint_every_steps in the driver's unit (a
// collective's round is every worker's push) from where the workers start; by seconds,
// training seconds since the last one.
TEST(RunSession, CheckpointsAreDueByPushesInTheDriversUnitAndBySeconds) {
  testing::TempDir dir;
  const Config config =
      SyntheticConfig(dir.File("runs"),
                      {"algorithm.name=async_sgd", "cluster.transport=memory",
                       "experiment.checkpoint_every_steps=5", "experiment.checkpoint_every_s=10"});
  const Problem problem = LoadProblem(config, {});
  ManualClock clock;
  SessionOptions options;
  options.clock = &clock;
  RunSession session(config, {}, problem, options);
  session.training().Start();
  session.counters().pushes.store(3);
  session.StartCheckpoints(/*pushes_per_step=*/2);  // due at 3 + 5 * 2
  EXPECT_FALSE(session.CheckpointDue(12));
  EXPECT_TRUE(session.CheckpointDueByPushes(13));
  EXPECT_FALSE(session.CheckpointDueBySeconds());
  session.CheckpointSaved(25);  // the next mark past 25: 13 + 2 * 10
  EXPECT_FALSE(session.CheckpointDueByPushes(32));
  EXPECT_TRUE(session.CheckpointDueByPushes(33));
  clock.Advance(std::chrono::seconds(10));
  EXPECT_TRUE(session.CheckpointDueBySeconds());
  // Held time (an evaluation) is not training time.
  session.CheckpointSaved(25);
  session.training().Hold();
  clock.Advance(std::chrono::seconds(30));
  session.training().Release();
  EXPECT_FALSE(session.CheckpointDueBySeconds());
}

// One evaluation's row holds what the driver passed and the result; the end of the run
// writes the summary from the plan and the last lines in the driver's words.
TEST(RunSession, EvaluationRowsAndTheEndOfTheRun) {
  testing::TempDir dir;
  const Config config =
      SyntheticConfig(dir.File("runs"), {"algorithm.name=allreduce_sgd", "experiment.seed=17"});
  const Problem problem = LoadProblem(config, {});
  ManualClock clock;
  SessionOptions options;
  options.clock = &clock;
  RunSession session(config, {}, problem, options);
  session.training().Start();
  std::vector<float> params(static_cast<std::size_t>(problem.n_params));
  problem.model->Initialize(params, 5);
  EvalInput in;
  in.samples = 200;  // half an epoch
  in.updates = 7;
  in.train_loss = 1.5;
  in.learning_rate = 0.25;
  in.consensus = 0.125;
  session.Evaluate(*problem.model, params, in, 2.5, /*full=*/true);
  EXPECT_EQ(session.recorder().convergence_rows(), 1);

  RunEnd end;
  end.time_s = 3;
  end.samples = 200;
  end.updates = 7;
  end.reason = "reached 0.5 epochs";
  end.transport = "gloo-ring";
  end.updates_word = "communication rounds";
  end.staleness_word = "worker steps";
  end.tail = "; consensus distance 0.125";
  WorkerMetrics w0, w1;
  w0.bytes_pushed = 100;
  w1.bytes_pushed = 20;
  w1.dense_bytes_pushed = 20;
  std::ostringstream out;
  const RunResult r =
      session.Finish(*problem.model, params, end, {w0, w1}, {{"extra", "yes"}}, out);
  EXPECT_EQ(r.status, "completed");
  EXPECT_EQ(r.exit_status, 0);
  EXPECT_THAT(out.str(), HasSubstr("after 0.50 epochs, 7 communication rounds, 3.0 s "
                                   "(reached 0.5 epochs)\nmean staleness: 0.00 (max 0) over 0 "
                                   "worker steps; consensus distance 0.125\nrun folder: "));

  const fs::path run = r.run_dir;
  EXPECT_EQ(DataRows(run / "convergence.csv"), 1);
  auto row = FirstRow(run / "convergence.csv");
  EXPECT_EQ(row["time_s"], "2.5");
  EXPECT_EQ(row["samples"], "200");
  EXPECT_EQ(row["updates"], "7");
  EXPECT_EQ(row["learning_rate"], "0.25");
  EXPECT_EQ(row["consensus_distance"], "0.125");
  auto summary = FirstRow(run / "summary.csv");
  EXPECT_EQ(summary["algorithm"], "allreduce_sgd");
  EXPECT_EQ(summary["workers"], "2");
  EXPECT_EQ(summary["seed"], "17");
  EXPECT_EQ(summary["transport"], "gloo-ring");
  EXPECT_EQ(summary["bytes_pushed"], "120");
  EXPECT_EQ(summary["dense_bytes_pushed"], "20");
  EXPECT_EQ(summary["compression"], "none");
  EXPECT_TRUE(fs::exists(run / "staleness_histogram.csv"));
}

// A driver whose workers and evaluations are in other processes (the coordinator): an
// evaluation made elsewhere is recorded as it came, without the ef_residual_norm column
// the residuals of which it cannot see.
TEST(RunSession, RecordsAnEvaluationMadeElsewhere) {
  testing::TempDir dir;
  const Config config = SyntheticConfig(
      dir.File("runs"),
      {"algorithm.name=async_sgd", "compression.name=topk", "compression.error_feedback=true"});
  const Problem problem = LoadProblem(config, {});
  ASSERT_TRUE(problem.plan.ef_residual);
  ManualClock clock;
  SessionOptions options;
  options.clock = &clock;
  options.ef_residual = false;
  RunSession session(config, {}, problem, options);
  models::EvalResult r;
  r.loss_sum = 30;
  r.correct = 40;
  r.count = 50;
  EvalInput in;
  in.samples = 100;
  in.updates = 9;
  in.learning_rate = 0.5;
  session.Record(r, in, 1.25);
  EXPECT_EQ(session.recorder().convergence_rows(), 1);
  EXPECT_DOUBLE_EQ(session.recorder().best_test_accuracy(), 0.8);
  auto row = FirstRow(fs::path(session.path()) / "convergence.csv");
  EXPECT_EQ(row["time_s"], "1.25");
  EXPECT_EQ(row["updates"], "9");
  EXPECT_EQ(row["test_accuracy"], "0.8");
  EXPECT_EQ(row.count("ef_residual_norm"), 0u);
}

// A resumed checkpoint must hold the driver's snapshot count when the driver gives one
// (the coordinator: one per shard server of its cluster), else the plan's.
TEST(RunSession, AResumeChecksTheDriversSnapshotCount) {
  testing::TempDir dir;
  const Config config =
      SyntheticConfig(dir.File("runs"), {"algorithm.name=async_sgd", "cluster.transport=memory",
                                         "experiment.checkpoint_every_steps=5"});
  const Problem problem = LoadProblem(config, {});
  ManualClock clock;
  SessionOptions options;
  options.clock = &clock;
  std::string run_dir;
  {
    RunSession session(config, {}, problem, options);
    run_dir = session.path();
    ps::ShardSnapshot shard;
    shard.version = 5;
    shard.values.assign(static_cast<std::size_t>(problem.n_params), 0.5f);
    CheckpointManifest m = session.NewManifest();
    m.step = 5;
    session.SaveCheckpoint(m, {shard});
  }
  RunRequest resume;
  resume.resume_dir = run_dir;
  options.checkpoint_shards = 2;
  try {
    RunSession refused(config, resume, problem, options);
    ADD_FAILURE() << "a checkpoint of 1 shard resumed a run of 2";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("holds 1 shards, the run has 2"));
  }
  options.checkpoint_shards = 0;  // the plan's: one vector in memory
  RunSession resumed(config, resume, problem, options);
  EXPECT_TRUE(resumed.resuming());
  EXPECT_EQ(resumed.resume().manifest.step, 5);
}

}  // namespace
}  // namespace asgd::experiments
