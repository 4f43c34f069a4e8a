// `asgd run` with cluster.transport = sim (experiments/run/sim_driver.h): the usual run
// folder in virtual seconds, byte-identical on a second run, equal to the in-memory
// store's run with one worker, and one-line refusals of what cannot be simulated.
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "algorithms/strategy.h"
#include "core/file_util.h"
#include "experiments/analysis/compare.h"
#include "experiments/cli/cli.h"
#include "experiments/record/metrics.h"
#include "tests/sim/sim_run_helpers.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

// A small separable problem: seconds per run.
const char* kProblem =
    "[data]\ndataset = synthetic\nsynthetic_train = 2000\nsynthetic_test = 500\n"
    "synthetic_classes = 3\nsynthetic_features = 16\n[model]\nname = mlp\nhidden = 16\n";

using sim_run_helpers::Cells;
using sim_run_helpers::ExpectSameRecords;
using sim_run_helpers::SimRun;
using sim_run_helpers::SummaryCell;

// Runs `body` (then kProblem; body starts in [experiment]) into its own folder under tmp; `label`
// names the config.
SimRun RunSim(const testing::TempDir& tmp, const std::string& label, const std::string& body) {
  return sim_run_helpers::RunConfig(tmp, label, body, kProblem);
}

const char* kStragglers =
    "epochs = 0.5\n[metrics]\neval_every_epochs = 0.1\n"
    "[algorithm]\nname = downpour\nworkers = 6\nwindow = 2\nlearning_rate = 0.1\n"
    "[cluster]\ntransport = sim\nshards = 2\n"
    "[delay]\ncompute = lognormal\nmean_ms = 3\nstddev_ms = 1\nstraggler_fraction = 0.2\n"
    "straggler_factor = 4\npause_probability = 0.05\npause_ms = 10\n"
    "[network]\npreset = dc_10gbe\n";

// Determinism (issue 13 item 3): the same config and seed give the same bytes in every
// CSV. summary.csv's run_id is the one field that differs: it is the folder's name, which
// holds the wall-clock start time.
TEST(SimRun, SameConfigAndSeedGiveIdenticalCsvs) {
  testing::TempDir tmp;
  const SimRun a = RunSim(tmp, "a", kStragglers);
  const SimRun b = RunSim(tmp, "b", kStragglers);
  ASSERT_EQ(a.status, 0) << a.err << a.out;
  ASSERT_EQ(b.status, 0) << b.err << b.out;
  ExpectSameRecords(a, b);
  // And the run is not trivially constant: a different seed changes the times.
  const SimRun c = RunSim(tmp, "c", std::string(kStragglers) + "[experiment]\nseed = 7\n");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(a.File("staleness.csv"), c.File("staleness.csv"));
}

// signsgd_vote draws the sign of each exact zero from the worker's seeded stream
// (WorkerRuleSeed): on sparse data, where every batch leaves most coordinates of the
// logistic regression's gradient exactly 0, the coins are a large part of every push, and
// the same config and seed still give the same bytes in every CSV. And it learns: with
// sign(0) = +1 every coordinate a batch left at 0 moved by −η a round, and this run ended
// at a test accuracy of 0.67.
TEST(SimRun, SignSgdVoteCoinsForZerosAreReproducible) {
  testing::TempDir tmp;
  const std::string body =
      "epochs = 3\n[metrics]\neval_every_epochs = 0.5\n"
      "[algorithm]\nname = signsgd_vote\nworkers = 4\nlearning_rate = 0.01\nbatch_size = 16\n"
      "[cluster]\ntransport = sim\nshards = 2\n"
      "[delay]\ncompute = lognormal\nmean_ms = 3\nstddev_ms = 1\n[network]\npreset = dc_10gbe\n";
  const std::string sparse =
      "[data]\ndataset = synthetic\nsynthetic_train = 2000\nsynthetic_test = 500\n"
      "synthetic_features = 200\nsynthetic_nonzeros = 8\n[model]\nname = logreg\n";
  const SimRun a = sim_run_helpers::RunConfig(tmp, "a", body, sparse);
  const SimRun b = sim_run_helpers::RunConfig(tmp, "b", body, sparse);
  ASSERT_EQ(a.status, 0) << a.err << a.out;
  ASSERT_EQ(b.status, 0) << b.err << b.out;
  ExpectSameRecords(a, b);
  EXPECT_GE(std::stod(SummaryCell(a, "final_test_accuracy")), 0.85) << a.out;
}

// Fair sharing (network.sharing = fair, sim/network_model.h) is as deterministic: its
// flows' ends are events of the same scheduler. The model is the one used: on a slow
// link the same config under FIFO gives other staleness rows.
TEST(SimRun, FairSharingGivesIdenticalCsvsToo) {
  testing::TempDir tmp;
  const std::string fair = std::string(kStragglers) + "link_gbps = 0.1\nsharing = fair\n";
  const SimRun a = RunSim(tmp, "a", fair);
  const SimRun b = RunSim(tmp, "b", fair);
  ASSERT_EQ(a.status, 0) << a.err << a.out;
  ASSERT_EQ(b.status, 0) << b.err << b.out;
  ExpectSameRecords(a, b);
  EXPECT_THAT(a.Provenance()["time_model"].get<std::string>(), HasSubstr("network.sharing=fair"));
  const SimRun fifo = RunSim(tmp, "fifo", std::string(kStragglers) + "link_gbps = 0.1\n");
  ASSERT_EQ(fifo.status, 0) << fifo.err;
  EXPECT_NE(a.File("staleness.csv"), fifo.File("staleness.csv"));
}

// Interleaved chunks (network.sharing = interleaved) draw from the model's own stream of
// the run's seed: the same seed gives the same bytes; and the model is the one used (on
// a slow link FIFO gives other staleness rows).
TEST(SimRun, InterleavedSharingGivesIdenticalCsvsToo) {
  testing::TempDir tmp;
  const std::string slow = std::string(kStragglers) + "link_gbps = 0.1\n";
  const std::string interleaved = slow + "sharing = interleaved\nchunk_kib = 4\n";
  const SimRun a = RunSim(tmp, "a", interleaved);
  const SimRun b = RunSim(tmp, "b", interleaved);
  ASSERT_EQ(a.status, 0) << a.err << a.out;
  ASSERT_EQ(b.status, 0) << b.err << b.out;
  ExpectSameRecords(a, b);
  const std::string model = a.Provenance()["time_model"].get<std::string>();
  EXPECT_THAT(model, HasSubstr("network.sharing=interleaved"));
  EXPECT_THAT(model, HasSubstr("network.chunk_kib=4"));
  const SimRun fifo = RunSim(tmp, "fifo", slow);
  ASSERT_EQ(fifo.status, 0) << fifo.err;
  EXPECT_NE(a.File("staleness.csv"), fifo.File("staleness.csv"));
}

// The run folder says it was simulated, and with which model; times are virtual.
TEST(SimRun, WritesTheUsualFolderInVirtualSeconds) {
  testing::TempDir tmp;
  const SimRun r = RunSim(tmp, "folder",
                          "epochs = 0.4\n[algorithm]\nname = async_sgd\nworkers = 4\n"
                          "[cluster]\ntransport = sim\n[delay]\ncompute = constant\nmean_ms = 5\n"
                          "[network]\npreset = loopback\n");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  for (const char* f : {"convergence.csv", "staleness.csv", "staleness_histogram.csv",
                        "summary.csv", "workers.csv", "provenance.json", "config.ini"}) {
    EXPECT_TRUE(fs::exists(r.dir + "/" + f)) << f;
  }
  const nlohmann::json p = r.Provenance();
  EXPECT_EQ(p["status"], "completed");
  EXPECT_EQ(p["simulated"], "true");
  EXPECT_EQ(p["time_model"],
            "virtual: delay.compute=constant delay.mean_ms=5 network.preset=loopback");
  const std::string summary = r.File("summary.csv");
  EXPECT_THAT(summary, HasSubstr(",sim,"));
  EXPECT_THAT(summary, HasSubstr(",completed,virtual: delay.compute=constant"));
  // 2000 x 0.4 = 800 samples = 13 steps of 64 (rounded up over 4 workers): each worker's
  // steps take 5 ms of compute plus the loopback round trips (54 us each way).
  const double wall = std::stod(p["wall_time_s"].get<std::string>());
  EXPECT_GT(wall, 0.015);
  EXPECT_LT(wall, 0.030);
  std::istringstream workers(r.File("workers.csv"));
  std::string header, row;
  std::getline(workers, header);
  EXPECT_THAT(header, HasSubstr("compute_time_s,wait_time_s"));
  EXPECT_THAT(header, HasSubstr(",comm_time_s"));
  ASSERT_TRUE(std::getline(workers, row));
  // Worker 0: compute is its steps x 5 ms exactly; its steps' other time is all in store
  // calls, which also count the first pull (before its steps): one loopback round trip.
  const std::vector<std::string> cells = Cells(row);
  ASSERT_EQ(cells.size(), WorkersColumns().size()) << row;  // comm_time_s is the 11th
  const double steps = std::stod(cells[1]);
  EXPECT_DOUBLE_EQ(std::stod(cells[4]), steps * 0.005) << row;
  EXPECT_GT(std::stod(cells[10]), 0.0) << row;  // comm_time_s
  const double comm = std::stod(cells[10]), wait = std::stod(cells[5]);
  EXPECT_GE(comm, wait) << row;
  EXPECT_GT(comm - wait, 2 * 54e-6) << row;
  EXPECT_LT(comm - wait, 1e-3) << row;
}

// Equivalence at the driver: with one worker and a free network, a simulated run ends on
// the same parameters as the in-memory store's run of the same config: its final, full
// evaluation is equal in every field but time_s and train_loss (the mean training loss
// since the previous row, whose place the thread runner's evaluator picks by wall time).
TEST(SimRun, OneWorkerEqualsTheMemoryStoreRun) {
  testing::TempDir tmp;
  const std::string body =
      "epochs = 1\n[algorithm]\nname = agn\nworkers = 1\nwindow = 3\nlearning_rate = 0.1\n";
  const SimRun sim = RunSim(tmp, "sim",
                            body +
                                "[cluster]\ntransport = sim\n[delay]\ncompute = "
                                "constant\nmean_ms = 1\n");
  const SimRun mem = RunSim(tmp, "mem", body + "[cluster]\ntransport = memory\n");
  ASSERT_EQ(sim.status, 0) << sim.err;
  ASSERT_EQ(mem.status, 0) << mem.err;
  auto last_row_without_time = [](const SimRun& r) {
    std::istringstream in(r.File("convergence.csv"));
    std::string line, last;
    while (std::getline(in, line)) last = line;
    std::vector<std::string> cells = Cells(last);
    cells[0] = cells[4] = "";  // time_s, train_loss
    return cells;
  };
  EXPECT_EQ(last_row_without_time(sim), last_row_without_time(mem));
  EXPECT_EQ(sim.Provenance()["final_test_accuracy"], mem.Provenance()["final_test_accuracy"]);

  // `asgd compare` on both says that they mix virtual and wall seconds.
  CompareOptions options;
  options.run_dirs = {sim.dir, mem.dir};
  options.out_dir = tmp.File("comparison");
  options.plots = false;
  std::ostringstream out;
  const auto runs = CompareRuns(options, out);
  EXPECT_TRUE(IsSimulated(runs[0]));
  EXPECT_FALSE(IsSimulated(runs[1]));
  EXPECT_THAT(out.str(), HasSubstr("note: 1 of these 2 runs are simulated"));
  EXPECT_THAT(ReadFile(tmp.File("comparison/comparison.md")),
              HasSubstr("their times and rates are not comparable"));
  options.run_dirs = {sim.dir};
  std::ostringstream alone;
  CompareRuns(options, alone);
  EXPECT_THAT(alone.str(), Not(HasSubstr("note:")));
}

// Compressed pushes in virtual time (issue 17 item 2 under issue 13's transport): each
// shard's part travels compressed and the network model charges its encoded bytes, so on
// a slow link a sign-compressed run finishes the same epochs in less virtual time than
// the dense run; the shards decode it in ShardCore; the run is reproducible and learns.
// DOWNPOUR pushes every step and fetches every 4th, so the pushes load the shards' links
// more than the (dense) replies: with a push-pull every step the shards' outgoing replies
// would set the pace whatever the pushes weigh.
TEST(SimRun, CompressedPushesAreChargedTheirEncodedBytes) {
  testing::TempDir tmp;
  const std::string body =
      "epochs = 1\n[algorithm]\nname = downpour\nworkers = 4\nwindow = 1\nfetch_window = 4\n"
      "learning_rate = 0.1\n"
      "[cluster]\ntransport = sim\nshards = 2\n[delay]\ncompute = constant\nmean_ms = 1\n"
      "[network]\nlatency_us = 50\nlink_gbps = 0.002\n";
  const std::string sign = "[compression]\nname = sign\nerror_feedback = true\n";
  const SimRun dense = RunSim(tmp, "dense", body);
  const SimRun a = RunSim(tmp, "sign-a", body + sign);
  const SimRun b = RunSim(tmp, "sign-b", body + sign);
  ASSERT_EQ(dense.status, 0) << dense.err << dense.out;
  ASSERT_EQ(a.status, 0) << a.err << a.out;
  ASSERT_EQ(b.status, 0) << b.err << b.out;
  EXPECT_EQ(SummaryCell(a, "compression"), "sign+ef");
  // 1 bit per element and a scale per shard: over 20 times fewer bytes than float32.
  EXPECT_GT(std::stod(SummaryCell(a, "compression_ratio")), 20.0);
  EXPECT_EQ(SummaryCell(dense, "compression_ratio"), "1");
  EXPECT_EQ(SummaryCell(a, "dense_bytes_pushed"), SummaryCell(dense, "dense_bytes_pushed"));
  // On this link a dense push of the model takes longer than a step's compute (1 ms); a
  // compressed one about 23 times less.
  const double dense_s = std::stod(SummaryCell(dense, "wall_time_s"));
  const double sign_s = std::stod(SummaryCell(a, "wall_time_s"));
  EXPECT_LT(sign_s, 0.75 * dense_s) << "sign " << sign_s << " s, dense " << dense_s << " s";
  EXPECT_THAT(a.File("convergence.csv"), HasSubstr("ef_residual_norm"));
  EXPECT_GE(std::stod(SummaryCell(a, "final_test_accuracy")), 0.8) << a.out;
  for (const char* f : {"convergence.csv", "staleness.csv", "workers.csv"}) {
    EXPECT_EQ(a.File(f), b.File(f)) << f;
  }
}

// With one worker and a free network a compressed simulated run is the in-memory
// store's compressed run (the same encodings from the same seeds, decoded by the same
// core), as OneWorkerEqualsTheMemoryStoreRun shows for dense pushes.
TEST(SimRun, OneCompressingWorkerEqualsTheMemoryStoreRun) {
  testing::TempDir tmp;
  const std::string body =
      "epochs = 1\n[algorithm]\nname = agn\nworkers = 1\nwindow = 3\nlearning_rate = 0.1\n"
      "[compression]\nname = qsgd\nlevels = 7\nerror_feedback = true\n";
  const SimRun sim = RunSim(
      tmp, "sim", body + "[cluster]\ntransport = sim\n[delay]\ncompute = constant\nmean_ms = 1\n");
  const SimRun mem = RunSim(tmp, "mem", body + "[cluster]\ntransport = memory\n");
  ASSERT_EQ(sim.status, 0) << sim.err;
  ASSERT_EQ(mem.status, 0) << mem.err;
  EXPECT_EQ(sim.Provenance()["final_test_accuracy"], mem.Provenance()["final_test_accuracy"]);
  for (const char* column : {"bytes_pushed", "dense_bytes_pushed", "final_test_accuracy"}) {
    EXPECT_EQ(SummaryCell(sim, column), SummaryCell(mem, column)) << column;
  }
}

// sim.cores: four workers on a host of two cores take twice the virtual time of four
// machines for the same epochs (FCFS, sim/core_pool.h), and the run records the time its
// steps waited for a core.
TEST(SimRun, WorkersSharingTwoCoresTakeTwiceAsLong) {
  testing::TempDir tmp;
  const std::string body =
      "epochs = 1\n[algorithm]\nname = async_sgd\nworkers = 4\n[cluster]\ntransport = sim\n"
      "[delay]\ncompute = constant\nmean_ms = 10\n";
  const SimRun own = RunSim(tmp, "own", body);
  const SimRun shared = RunSim(tmp, "shared", body + "[sim]\ncores = 2\n");
  ASSERT_EQ(own.status, 0) << own.err;
  ASSERT_EQ(shared.status, 0) << shared.err;
  const double own_s = std::stod(SummaryCell(own, "wall_time_s"));
  const double shared_s = std::stod(SummaryCell(shared, "wall_time_s"));
  EXPECT_NEAR(shared_s / own_s, 2.0, 0.1) << own_s << " s vs " << shared_s << " s";
  EXPECT_EQ(own.Provenance()["sim_core_wait_s"], "0");
  EXPECT_GT(std::stod(shared.Provenance()["sim_core_wait_s"].get<std::string>()), 0);
  EXPECT_THAT(shared.Provenance()["time_model"].get<std::string>(), HasSubstr("sim.cores=2"));
}

// sim.transport_us_per_message reaches the store and takes the cores: one worker on one
// core, a free network, constant 5 ms steps and 1 ms of CPU per message at each end. The
// run is the initial pull's four charges (4 ms) and, per step, the gradient and its
// push-pull's four charges (9 ms): 4 + 20 x 9 = 184 ms for 20 steps.
TEST(SimRun, TransportCpuIsChargedOnTheCores) {
  testing::TempDir tmp;
  const std::string body =
      "max_steps = 20\n[metrics]\neval_every_epochs = 100\n[algorithm]\nname = async_sgd\n"
      "[cluster]\ntransport = sim\n[delay]\ncompute = constant\nmean_ms = 5\n"
      "[sim]\ncores = 1\ntransport_us_per_message = 1000\n";
  const SimRun one = RunSim(tmp, "one", body + "[algorithm]\nworkers = 1\n");
  ASSERT_EQ(one.status, 0) << one.err << one.out;
  EXPECT_EQ(SummaryCell(one, "steps"), "20");
  EXPECT_EQ(SummaryCell(one, "wall_time_s"), "0.184");
  EXPECT_EQ(one.Provenance()["sim_core_wait_s"], "0");
  EXPECT_THAT(one.Provenance()["time_model"].get<std::string>(),
              HasSubstr("sim.transport_us_per_message=1000"));
  // Two workers: every step's 9 ms and both initial pulls' 4 ms on the one core, which is
  // never idle, so the run lasts their sum.
  const SimRun two = RunSim(tmp, "two", body + "[algorithm]\nworkers = 2\n");
  ASSERT_EQ(two.status, 0) << two.err << two.out;
  const int64_t steps = std::stoll(SummaryCell(two, "steps"));
  EXPECT_NEAR(std::stod(SummaryCell(two, "wall_time_s")), 0.008 + 0.009 * steps, 5e-4) << steps;
  EXPECT_GT(std::stod(two.Provenance()["sim_core_wait_s"].get<std::string>()), 0);
}

// Synchronous strategies run too, and end when their peers stop.
TEST(SimRun, SynchronousStrategyWithBackupsEnds) {
  testing::TempDir tmp;
  const SimRun r = RunSim(tmp, "sync",
                          "epochs = 0.5\n[algorithm]\nname = sync_sgd\nworkers = 5\n"
                          "replicas_to_aggregate = 4\n[cluster]\ntransport = sim\n"
                          "[delay]\ncompute = exponential\nmean_ms = 4\n");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_GT(std::stoll(r.Provenance()["dropped_pushes"].get<std::string>()), 0);
}

// Every strategy that can be simulated runs end to end under `asgd run`, synchronous ones
// included (rounds, clocks, elastic exchanges end when their peers stop), with stragglers
// on a datacenter network, and learns the small problem.
class EverySimulatedStrategy : public ::testing::TestWithParam<std::string> {};

TEST_P(EverySimulatedStrategy, RunsAndLearns) {
  testing::TempDir tmp;
  // As the thread runner's test: SAGN's mean takes one window-normalised step per round.
  const std::string extra = GetParam() == "sagn" ? "aggregation = sum\n" : "";
  const SimRun r = RunSim(tmp, "every",
                          "epochs = 3\n[algorithm]\nname = " + GetParam() +
                              "\nworkers = " + std::to_string(testing::RunTestWorkers(GetParam())) +
                              "\nwindow = 2\nlearning_rate = 0.1\n" + extra +
                              "[cluster]\ntransport = sim\nshards = 2\n"
                              "[delay]\ncompute = lognormal\nmean_ms = 2\nstddev_ms = 1\n"
                              "straggler_fraction = 0.34\nstraggler_factor = 3\n"
                              "[network]\npreset = dc_10gbe\n");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_EQ(r.Provenance()["status"], "completed");
  EXPECT_GE(std::stod(r.Provenance()["final_test_accuracy"].get<std::string>()), 0.85) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Strategies, EverySimulatedStrategy, ::testing::ValuesIn([] {
                           std::vector<std::string> names;
                           for (const algorithms::Strategy* s : algorithms::Strategies()) {
                             if (s->can_simulate) names.push_back(s->name);
                           }
                           return names;
                         }()));

// Issue 33: simulated workers share the model's scratch and a gradient buffer, their
// compute-time sleeps wait for their next store call, and async_sgd's worker pushes from
// its parameters (sim.share_buffers, experiments/run/worker_loop.h). None of it changes a
// bit: with and without sharing (each worker owning its buffers, as before issue 33) every
// CSV is the same, for every strategy that can be simulated, on a network that takes time,
// with stragglers, pauses and two shards. The extra cases: async_sgd with momentum and
// weight decay (the update written into the parameters it decays), and compressed pushes.
struct SharingCase {
  std::string label;
  std::string body;  // [algorithm] lines after the name
};
void PrintTo(const SharingCase& c, std::ostream* os) { *os << c.label; }
class SharedBuffers : public ::testing::TestWithParam<SharingCase> {};

TEST_P(SharedBuffers, LeaveEveryCsvUnchanged) {
  testing::TempDir tmp;
  const std::string extra = GetParam().label == "sagn" ? "aggregation = sum\n" : "";
  const std::string body = "epochs = 1\n[metrics]\neval_every_epochs = 0.25\n[algorithm]\n" +
                           GetParam().body + extra +
                           "workers = 5\nwindow = 2\nlearning_rate = 0.1\nbatch_size = 16\n"
                           "[cluster]\ntransport = sim\nshards = 2\n"
                           "[delay]\ncompute = lognormal\nmean_ms = 2\nstddev_ms = 1\n"
                           "straggler_fraction = 0.2\nstraggler_factor = 3\n"
                           "pause_probability = 0.05\npause_ms = 5\n"
                           "[network]\npreset = dc_10gbe\n";
  const SimRun own = RunSim(tmp, "own", body + "[sim]\nshare_buffers = false\n");
  const SimRun shared = RunSim(tmp, "shared", body);
  ASSERT_EQ(own.status, 0) << own.err << own.out;
  ASSERT_EQ(shared.status, 0) << shared.err << shared.out;
  ExpectSameRecords(own, shared);
  EXPECT_GT(std::stoll(SummaryCell(shared, "samples")), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, SharedBuffers, ::testing::ValuesIn([] {
      std::vector<SharingCase> cases;
      for (const algorithms::Strategy* s : algorithms::Strategies()) {
        if (s->can_simulate) cases.push_back({s->name, "name = " + s->name + "\n"});
      }
      cases.push_back({"async_sgd_momentum_decay",
                       "name = async_sgd\noptimizer = momentum\nmomentum = 0.9\n"
                       "weight_decay = 0.01\n"});
      cases.push_back({"async_sgd_topk",
                       "name = async_sgd\n[compression]\nname = topk\nratio = 0.1\n"
                       "error_feedback = true\n[algorithm]\n"});
      return cases;
    }()),
    [](const ::testing::TestParamInfo<SharingCase>& p) { return p.param.label; });

// Bad configs: one line naming the key, exit status 2, no run folder.
struct Refusal {
  const char* body;
  const char* key;
};
class SimRefusal : public ::testing::TestWithParam<Refusal> {};

TEST_P(SimRefusal, OneLineExitTwo) {
  testing::TempDir tmp;
  const SimRun r =
      RunSim(tmp, "bad", std::string("[cluster]\ntransport = sim\n") + GetParam().body);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_THAT(r.err, HasSubstr(GetParam().key));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.dir.empty()) << "a refused config made a run folder";
}

INSTANTIATE_TEST_SUITE_P(
    Configs, SimRefusal,
    ::testing::Values(
        Refusal{"[algorithm]\nname = hogwild\nworkers = 2\n", "algorithm.name"},
        Refusal{"[algorithm]\nname = sgd\n", "algorithm.name"},
        Refusal{"[algorithm]\nname = async_sgd\n[delay]\ncompute = weibull\n", "delay.compute"},
        Refusal{"[algorithm]\nname = async_sgd\n[network]\nlink_gbps = -1\n", "network.link_gbps"},
        Refusal{"[algorithm]\nname = async_sgd\n[network]\npreset = lan\n", "network.preset"},
        Refusal{"[algorithm]\nname = async_sgd\n[network]\nsharing = lifo\n", "network.sharing"},
        Refusal{"[algorithm]\nname = async_sgd\n[experiment]\n"
                "checkpoint_every_steps = 10\n",
                "experiment.checkpoint_every_steps"},
        Refusal{"[algorithm]\nname = async_sgd\nworkers = 10001\n", "algorithm.workers"}));

// Up to 10,000 workers may be simulated (their buffers are shared); threads and
// processes stay at 1,024: one line naming the key and both limits.
TEST(SimRun, MoreThan1024WorkersOnlyWhenSimulated) {
  testing::TempDir tmp;
  const SimRun threads = RunSim(tmp, "threads",
                                "[algorithm]\nname = async_sgd\nworkers = 1025\n"
                                "[cluster]\ntransport = memory\n");
  EXPECT_EQ(threads.status, 2) << threads.out;
  EXPECT_THAT(threads.err, HasSubstr("algorithm.workers"));
  EXPECT_THAT(threads.err, HasSubstr("at most 1024 with cluster.transport = memory"));
  EXPECT_THAT(threads.err, HasSubstr("up to 10000 with sim"));
  EXPECT_EQ(std::count(threads.err.begin(), threads.err.end(), '\n'), 1) << threads.err;
  EXPECT_TRUE(threads.dir.empty());
  const SimRun sim = RunSim(tmp, "sim",
                            "epochs = 0.02\n[algorithm]\nname = async_sgd\nworkers = 1025\n"
                            "batch_size = 1\n[cluster]\ntransport = sim\n");
  EXPECT_EQ(sim.status, 0) << sim.err << sim.out;
}

// The delay model in a real run (threads): a straggler's injected sleeps show in its
// compute time.
TEST(InjectedDelays, StragglerComputesLongerInARealRun) {
  testing::TempDir tmp;
  const SimRun r = RunSim(tmp, "real",
                          "epochs = 1\n[algorithm]\nname = async_sgd\nworkers = 2\n"
                          "[cluster]\ntransport = memory\n[delay]\ncompute = constant\n"
                          "mean_ms = 2\nspeeds = 1,0.25\n");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  std::istringstream workers(r.File("workers.csv"));
  std::string line;
  std::getline(workers, line);
  std::vector<double> per_step;
  while (std::getline(workers, line)) {
    const std::vector<std::string> cells = Cells(line);
    // Both workers step: one epoch is a few dozen steps, the straggler's share several (at
    // 0.3 epochs a late-scheduled straggler could finish none, and 0 / 0 is no time).
    ASSERT_GT(std::stod(cells[1]), 0) << line;
    per_step.push_back(std::stod(cells[4]) / std::stod(cells[1]));
  }
  ASSERT_EQ(per_step.size(), 2u);
  // At least the model's time (sleeps only lengthen a step), 2 ms and 8 ms.
  EXPECT_GE(per_step[0], 0.002);
  EXPECT_GE(per_step[1], 0.008);
}

}  // namespace
}  // namespace asgd::experiments
