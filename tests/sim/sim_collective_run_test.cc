// `asgd run` of the strategies on a collective with cluster.transport = sim
// (experiments/run/sim_collective_runner.h): the same parameters as the thread runner on
// gloo, byte-identical on a second run, and a straggler's step plus the collective's cost
// per synchronous round.
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const char* kProblem =
    "[data]\ndataset = synthetic\nsynthetic_train = 1200\nsynthetic_test = 400\n"
    "synthetic_classes = 3\nsynthetic_features = 16\n[model]\nname = mlp\nhidden = 16\n";

struct CollRun {
  int status = 0;
  std::string out, err, dir;
  std::string File(const std::string& name) const { return ReadFile(dir + "/" + name); }
  nlohmann::json Provenance() const { return nlohmann::json::parse(File("provenance.json")); }
};

CollRun RunConfig(const testing::TempDir& tmp, const std::string& label, const std::string& body) {
  const std::string runs = tmp.File(label + "-runs");
  const std::string config = tmp.File(label + ".ini");
  testing::WriteTestFile(config, "[experiment]\nname = " + label +
                                     "\nprogress = off\nlog_level = error\nout_dir = " + runs +
                                     "\n" + body + kProblem);
  std::ostringstream out, err;
  CollRun r;
  r.status = Main({"run", config}, out, err);
  r.out = out.str();
  r.err = err.str();
  if (fs::exists(runs)) {
    for (const auto& e : fs::directory_iterator(runs)) r.dir = e.path().string();
  }
  return r;
}

std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream split(line);
  for (std::string cell; std::getline(split, cell, ',');) cells.push_back(cell);
  return cells;
}

// convergence.csv by column name, without the columns that depend on when (time_s) and on
// the order in which threads added their losses (train_loss, a mean of the steps since the
// previous row summed in thread order); test_loss and test_accuracy are computed from the
// parameters, consensus_distance from every rank's.
std::vector<std::string> RowsWithoutTime(const CollRun& r) {
  std::istringstream in(r.File("convergence.csv"));
  std::string header;
  std::getline(in, header);
  const std::vector<std::string> names = Cells(header);
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells = Cells(line);
    std::string row;
    for (std::size_t i = 0; i < cells.size() && i < names.size(); ++i) {
      if (names[i] == "time_s" || names[i] == "train_loss") continue;
      row += names[i] + "=" + cells[i] + " ";
    }
    rows.push_back(row);
  }
  return rows;
}

std::string SummaryCell(const CollRun& r, const std::string& column) {
  std::istringstream in(r.File("summary.csv"));
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  const std::vector<std::string> names = Cells(header), cells = Cells(row);
  for (std::size_t i = 0; i < names.size() && i < cells.size(); ++i) {
    if (names[i] == column) return cells[i];
  }
  ADD_FAILURE() << "no column " << column;
  return "";
}

struct Equivalence {
  const char* name;
  const char* body;  // [algorithm] and [collective] keys
};

class SimCollectiveRun : public ::testing::TestWithParam<Equivalence> {};

// Only time is simulated: the simulated run's every evaluation (of the ranks' average, its
// consensus distance) and its bytes equal the thread runner's on gloo over loopback, with
// stragglers in the simulation (they change when, not what).
TEST_P(SimCollectiveRun, SameParametersAsTheThreadRunner) {
  testing::TempDir tmp;
  const std::string body =
      std::string("epochs = 1\n[metrics]\neval_every_epochs = 0.25\n") + GetParam().body;
  const CollRun threads = RunConfig(tmp, "threads", body);
  const CollRun sim = RunConfig(tmp, "sim",
                            body +
                                "[cluster]\ntransport = sim\n"
                                "[delay]\ncompute = lognormal\nmean_ms = 2\nstddev_ms = 1\n"
                                "straggler_fraction = 0.34\nstraggler_factor = 3\n"
                                "[network]\npreset = dc_10gbe\n");
  ASSERT_EQ(threads.status, 0) << threads.err << threads.out;
  ASSERT_EQ(sim.status, 0) << sim.err << sim.out;
  const std::vector<std::string> a = RowsWithoutTime(threads), b = RowsWithoutTime(sim);
  EXPECT_GE(a.size(), 4u);
  EXPECT_EQ(a, b);
  for (const char* c : {"samples", "updates", "bytes_pushed", "bytes_pulled", "steps"}) {
    EXPECT_EQ(SummaryCell(threads, c), SummaryCell(sim, c)) << c;
  }
  EXPECT_EQ(SummaryCell(sim, "transport"), "sim");
  EXPECT_EQ(sim.Provenance()["simulated"], "true");
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, SimCollectiveRun,
    ::testing::Values(
        Equivalence{"allreduce_ring",
                    "[algorithm]\nname = allreduce_sgd\nworkers = 3\nlearning_rate = 0.1\n"
                    "[collective]\nalgorithm = ring\n"},
        Equivalence{"allreduce_ring_chunked",
                    "[algorithm]\nname = allreduce_sgd\nworkers = 4\nlearning_rate = 0.1\n"
                    "[collective]\nalgorithm = ring_chunked\n"},
        Equivalence{"allreduce_halving_doubling",
                    "[algorithm]\nname = allreduce_sgd\nworkers = 3\nlearning_rate = 0.1\n"
                    "[collective]\nalgorithm = halving_doubling\n"},
        Equivalence{"local_sgd",
                    "[algorithm]\nname = local_sgd\nworkers = 3\nwindow = 3\n"
                    "learning_rate = 0.1\n"},
        Equivalence{"dpsgd", "[algorithm]\nname = dpsgd\nworkers = 4\nlearning_rate = 0.1\n"}),
    [](const auto& p) { return std::string(p.param.name); });

// Determinism: the same config and seed give the same bytes in every CSV (summary.csv but
// its run_id, which holds the start time); another seed changes the stragglers' times.
TEST(SimCollectiveRunDeterminism, SameConfigAndSeedGiveIdenticalCsvs) {
  testing::TempDir tmp;
  const std::string body =
      "epochs = 1\n[metrics]\neval_every_epochs = 0.2\n"
      "[algorithm]\nname = dpsgd\nworkers = 5\nlearning_rate = 0.1\n"
      "[cluster]\ntransport = sim\n"
      "[delay]\ncompute = lognormal\nmean_ms = 3\nstddev_ms = 1\nstraggler_fraction = 0.2\n"
      "straggler_factor = 4\npause_probability = 0.05\npause_ms = 10\n"
      "[network]\npreset = dc_10gbe\n";
  const CollRun a = RunConfig(tmp, "a", body);
  const CollRun b = RunConfig(tmp, "b", body);
  ASSERT_EQ(a.status, 0) << a.err << a.out;
  ASSERT_EQ(b.status, 0) << b.err << b.out;
  for (const char* f :
       {"convergence.csv", "staleness.csv", "staleness_histogram.csv", "workers.csv"}) {
    EXPECT_EQ(a.File(f), b.File(f)) << f;
  }
  auto without_run_id = [](const CollRun& r) {
    std::istringstream in(r.File("summary.csv"));
    std::string line, out;
    while (std::getline(in, line)) out += line.substr(line.find(',')) + "\n";
    return out;
  };
  EXPECT_EQ(without_run_id(a), without_run_id(b));
  const CollRun c = RunConfig(tmp, "c", body + "[experiment]\nseed = 7\n");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(a.File("staleness.csv"), c.File("staleness.csv"));
}

// A straggler holds every synchronous round back by exactly its step: allreduce_sgd on 2
// ranks, a constant 5 ms step, one straggler 4× slower (20 ms), 100 µs of latency and no
// transfer time, so each ring collective on 2 ranks costs 2 steps of 100 µs = 200 µs. The
// run (max_steps 32: 16 steps per rank) is the broadcast (200 µs), the vote before step 0
// (200 µs), 16 rounds of 20 ms + 200 µs, the vote and the replicas' check at step 16
// (400 µs) and the two barriers (400 µs): 324.4 ms.
TEST(SimCollectiveRunTime, StragglerStepPlusTheCollectivePerRound) {
  testing::TempDir tmp;
  const CollRun r = RunConfig(tmp, "straggler",
                          "epochs = 100\nmax_steps = 32\n[metrics]\neval_every_epochs = 1000\n"
                          "[algorithm]\nname = allreduce_sgd\nworkers = 2\n"
                          "[cluster]\ntransport = sim\n"
                          "[delay]\ncompute = constant\nmean_ms = 5\nstraggler_fraction = 0.5\n"
                          "straggler_factor = 4\n"
                          "[network]\nlatency_us = 100\n");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_EQ(SummaryCell(r, "steps"), "32");
  EXPECT_NEAR(std::stod(SummaryCell(r, "wall_time_s")), 0.3244, 1e-9);
  // The broadcast, 16 rounds and the barrier on the payload group.
  EXPECT_EQ(r.Provenance()["sim_collective_operations"], "18");
  EXPECT_NEAR(std::stod(r.Provenance()["sim_collective_wait_s"].get<std::string>()), 16 * 0.015,
              1e-9);  // the fast rank waits 15 ms a round
  // Without the straggler every round is 5 ms + 200 µs.
  const CollRun fast = RunConfig(tmp, "fast",
                             "epochs = 100\nmax_steps = 32\n[metrics]\neval_every_epochs = 1000\n"
                             "[algorithm]\nname = allreduce_sgd\nworkers = 2\n"
                             "[cluster]\ntransport = sim\n"
                             "[delay]\ncompute = constant\nmean_ms = 5\n"
                             "[network]\nlatency_us = 100\n");
  ASSERT_EQ(fast.status, 0) << fast.err;
  EXPECT_NEAR(std::stod(SummaryCell(fast, "wall_time_s")), 0.0844, 1e-9);
}

// Refusals: one line naming the key, exit status 2, no run folder.
// dpsgd's gossip step is a constant number of link hops whatever the number of workers: a
// step's virtual time (between runs of 17 and 31 steps per worker, which both vote on
// stopping at step 16 only) is the same at 4 and 8 workers: the compute and four hops
// (each of the two exchanges is even ranks to odd, then odd to even). Before, rank 0 sent
// first and every other rank received first: a chain of N hops each way.
TEST(SimCollectiveRunTime, DpsgdStepIsConstantInTheWorkers) {
  testing::TempDir tmp;
  auto step_s = [&](int workers) {
    double t[2] = {0, 0};
    const int steps[2] = {17, 31};
    for (int i = 0; i < 2; ++i) {
      const std::string label = "dpsgd-" + std::to_string(workers) + "-" + std::to_string(i);
      const CollRun r = RunConfig(
          tmp, label,
          "epochs = 100\nmax_steps = " + std::to_string(steps[i] * workers) +
              "\n[metrics]\neval_every_epochs = 1000\n[algorithm]\nname = dpsgd\nworkers = " +
              std::to_string(workers) +
              "\n[cluster]\ntransport = sim\n[delay]\ncompute = constant\nmean_ms = 5\n"
              "[network]\nlatency_us = 10000\n");
      EXPECT_EQ(r.status, 0) << r.err << r.out;
      t[i] = std::stod(SummaryCell(r, "wall_time_s"));
    }
    return (t[1] - t[0]) / (steps[1] - steps[0]);
  };
  const double four = step_s(4), eight = step_s(8);
  EXPECT_NEAR(four, eight, 1e-6);
  // 5 ms of compute and four hops of 10 ms, plus the transfers (the chain: 2 · 8 hops).
  EXPECT_NEAR(eight, 0.045, 1e-4);
}

TEST(SimCollectiveRunRefusal, CheckpointsAreRefused) {
  testing::TempDir tmp;
  const CollRun r = RunConfig(tmp, "bad",
                          "checkpoint_every_steps = 10\n[algorithm]\nname = allreduce_sgd\n"
                          "workers = 2\n[cluster]\ntransport = sim\n");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("experiment.checkpoint_every_steps"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.dir.empty());
}

}  // namespace
}  // namespace asgd::experiments
