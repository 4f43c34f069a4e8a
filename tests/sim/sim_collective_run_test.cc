// `asgd run` of the strategies on a collective with cluster.transport = sim
// (experiments/run/sim_driver.h): the same parameters as the thread runner on
// gloo, byte-identical on a second run, and a straggler's step plus the collective's cost
// per synchronous round.
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/sim/sim_run_helpers.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;

const char* kProblem =
    "[data]\ndataset = synthetic\nsynthetic_train = 1200\nsynthetic_test = 400\n"
    "synthetic_classes = 3\nsynthetic_features = 16\n[model]\nname = mlp\nhidden = 16\n";

using sim_run_helpers::Cells;
using sim_run_helpers::ExpectSameRecords;
using sim_run_helpers::SimRun;
using sim_run_helpers::SummaryCell;

SimRun RunConfig(const testing::TempDir& tmp, const std::string& label, const std::string& body) {
  return sim_run_helpers::RunConfig(tmp, label, body, kProblem);
}

// convergence.csv by column name, without the columns that depend on when (time_s) and on
// the order in which threads added their losses (train_loss, a mean of the steps since the
// previous row summed in thread order); test_loss and test_accuracy are computed from the
// parameters, consensus_distance from every rank's.
std::vector<std::string> RowsWithoutTime(const SimRun& r) {
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
  const SimRun threads = RunConfig(tmp, "threads", body);
  const SimRun sim = RunConfig(tmp, "sim",
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
        // One optimizer state for the simulated replicas (algorithms::SharedReplica):
        // Adam's moments and step count, and the warm-up's rate, as every rank's own.
        Equivalence{"allreduce_adam_warmup",
                    "[algorithm]\nname = allreduce_sgd\nworkers = 3\nlearning_rate = 0.01\n"
                    "optimizer = adam\nwarmup_epochs = 0.5\nlinear_scaling = true\n"
                    "[collective]\nalgorithm = ring\n"},
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
  const SimRun a = RunConfig(tmp, "a", body);
  const SimRun b = RunConfig(tmp, "b", body);
  ASSERT_EQ(a.status, 0) << a.err << a.out;
  ASSERT_EQ(b.status, 0) << b.err << b.out;
  ExpectSameRecords(a, b);
  const SimRun c = RunConfig(tmp, "c", body + "[experiment]\nseed = 7\n");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(a.File("staleness.csv"), c.File("staleness.csv"));
}

// collective.overlap is not modelled (docs/simulator.md): a simulated allreduce_sgd run
// with it is the run without it, byte for byte, with the ranks' replica held once or each
// rank's own (sim.share_buffers), and two runs with it are byte-identical.
TEST(SimCollectiveRunDeterminism, OverlapChangesNothingInTheSimulator) {
  testing::TempDir tmp;
  const std::string body =
      "epochs = 1\n[metrics]\neval_every_epochs = 0.25\n"
      "[algorithm]\nname = allreduce_sgd\nworkers = 3\nlearning_rate = 0.1\n"
      "[cluster]\ntransport = sim\n"
      "[delay]\ncompute = lognormal\nmean_ms = 2\nstddev_ms = 1\n"
      "[network]\npreset = dc_10gbe\n";
  const SimRun off = RunConfig(tmp, "off", body);
  const std::string on_body = body + "[collective]\noverlap = true\nbucket_kib = 1\n";
  const SimRun on = RunConfig(tmp, "on", on_body);
  const SimRun again = RunConfig(tmp, "again", on_body);
  const SimRun own = RunConfig(tmp, "own", on_body + "[sim]\nshare_buffers = false\n");
  for (const SimRun* r : {&off, &on, &again, &own}) ASSERT_EQ(r->status, 0) << r->err;
  ExpectSameRecords(off, on);
  ExpectSameRecords(on, again);
  ExpectSameRecords(on, own);
}

// A straggler holds every synchronous round back by exactly its step: allreduce_sgd on 2
// ranks, a constant 5 ms step, one straggler 4× slower (20 ms), 100 µs of latency and no
// transfer time, so each ring collective on 2 ranks costs 2 steps of 100 µs = 200 µs. The
// run (max_steps 32: 16 steps per rank) is the broadcast (200 µs), the vote before step 0
// (200 µs), 16 rounds of 20 ms + 200 µs, the vote at step 16 (200 µs; the replicas' check
// there, for the final evaluation, takes no time) and the two barriers (400 µs): 324.2 ms.
TEST(SimCollectiveRunTime, StragglerStepPlusTheCollectivePerRound) {
  testing::TempDir tmp;
  const SimRun r = RunConfig(tmp, "straggler",
                             "epochs = 100\nmax_steps = 32\n[metrics]\neval_every_epochs = 1000\n"
                             "[algorithm]\nname = allreduce_sgd\nworkers = 2\n"
                             "[cluster]\ntransport = sim\n"
                             "[delay]\ncompute = constant\nmean_ms = 5\nstraggler_fraction = 0.5\n"
                             "straggler_factor = 4\n"
                             "[network]\nlatency_us = 100\n");
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_EQ(SummaryCell(r, "steps"), "32");
  EXPECT_NEAR(std::stod(SummaryCell(r, "wall_time_s")), 0.3242, 1e-9);
  // The broadcast, 16 rounds and the barrier on the payload group.
  EXPECT_EQ(r.Provenance()["sim_collective_operations"], "18");
  // Two votes, the check and the barrier on the control group, the check untimed.
  EXPECT_EQ(r.Provenance()["sim_control_operations"], "4");
  EXPECT_NEAR(std::stod(r.Provenance()["sim_control_time_s"].get<std::string>()), 0.0006, 1e-12);
  EXPECT_NEAR(std::stod(r.Provenance()["sim_collective_wait_s"].get<std::string>()), 16 * 0.015,
              1e-9);  // the fast rank waits 15 ms a round
  // Without the straggler every round is 5 ms + 200 µs.
  const SimRun fast =
      RunConfig(tmp, "fast",
                "epochs = 100\nmax_steps = 32\n[metrics]\neval_every_epochs = 1000\n"
                "[algorithm]\nname = allreduce_sgd\nworkers = 2\n"
                "[cluster]\ntransport = sim\n"
                "[delay]\ncompute = constant\nmean_ms = 5\n"
                "[network]\nlatency_us = 100\n");
  ASSERT_EQ(fast.status, 0) << fast.err;
  EXPECT_NEAR(std::stod(SummaryCell(fast, "wall_time_s")), 0.0842, 1e-9);
}

// The training clock leaves evaluations out, as the real runners' does: the same run
// evaluated every 0.2 epoch and only at its start and end takes the same virtual training
// time to the last digit. At 4 ms of latency the boundary's check that the replicas agree
// (and for dpsgd, whose replicas differ, the two averages) would cost 2(N−1) · 4 ms each on
// the ring. The votes, every 16 steps whatever is evaluated, are the same in both.
struct EvalCase {
  const char* name;
  const char* body;  // [algorithm], [delay]
};

class SimCollectiveClock : public ::testing::TestWithParam<EvalCase> {};

TEST_P(SimCollectiveClock, EvaluationsTakeNoTrainingTime) {
  testing::TempDir tmp;
  const std::string body = std::string("epochs = 1\n") + GetParam().body +
                           "[cluster]\ntransport = sim\n[network]\nlatency_us = 4000\n";
  const SimRun often = RunConfig(tmp, "often", body + "[metrics]\neval_every_epochs = 0.2\n");
  const SimRun once = RunConfig(tmp, "once", body + "[metrics]\neval_every_epochs = 1000\n");
  ASSERT_EQ(often.status, 0) << often.err << often.out;
  ASSERT_EQ(once.status, 0) << once.err << once.out;
  EXPECT_GE(RowsWithoutTime(often).size(), 4u);
  EXPECT_EQ(RowsWithoutTime(once).size(), 2u);
  EXPECT_EQ(SummaryCell(often, "wall_time_s"), SummaryCell(once, "wall_time_s"));
  EXPECT_EQ(SummaryCell(often, "steps"), SummaryCell(once, "steps"));
  EXPECT_EQ(often.Provenance()["sim_control_time_s"], once.Provenance()["sim_control_time_s"]);
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, SimCollectiveClock,
    ::testing::Values(
        // Stragglers too: allreduce_sgd's ranks meet at every step anyway.
        EvalCase{"allreduce_sgd",
                 "[algorithm]\nname = allreduce_sgd\nworkers = 3\nlearning_rate = 0.1\n"
                 "[delay]\ncompute = lognormal\nmean_ms = 2\nstddev_ms = 1\n"
                 "straggler_fraction = 0.34\nstraggler_factor = 3\n"},
        EvalCase{"local_sgd",
                 "[algorithm]\nname = local_sgd\nworkers = 3\nwindow = 3\nlearning_rate = 0.1\n"
                 "[delay]\ncompute = constant\nmean_ms = 2\n"},
        EvalCase{"dpsgd",
                 "[algorithm]\nname = dpsgd\nworkers = 4\nlearning_rate = 0.1\n"
                 "[delay]\ncompute = constant\nmean_ms = 2\n"}),
    [](const auto& p) { return std::string(p.param.name); });

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
      const SimRun r = RunConfig(
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

// Refusals: one line naming the key, exit status 2, no run folder.
TEST(SimCollectiveRunRefusal, CheckpointsAreRefused) {
  testing::TempDir tmp;
  const SimRun r = RunConfig(tmp, "bad",
                             "checkpoint_every_steps = 10\n[algorithm]\nname = allreduce_sgd\n"
                             "workers = 2\n[cluster]\ntransport = sim\n");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("experiment.checkpoint_every_steps"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.dir.empty());
}

// The transport's CPU charge (sim.transport_*) on a collective: only time changes. Two
// ranks on two cores, a ring allreduce of the MLP's gradient each step: each of its 2
// steps takes 2·⌈2/2⌉·c(b) more, so every collective operation 4·c(b) more, and the
// trained model is the same.
TEST(SimCollectiveRun, TheTransportsCpuChargeAddsTimeOnly) {
  const std::string base =
      "epochs = 0.2\n[algorithm]\nname = allreduce_sgd\nworkers = 2\n[cluster]\n"
      "transport = sim\n[delay]\ncompute = constant\nmean_ms = 2\n[network]\n"
      "preset = dc_10gbe\n[sim]\ncores = 2\n";
  testing::TempDir tmp;
  const SimRun plain = RunConfig(tmp, "plain", base);
  const SimRun charged = RunConfig(tmp, "charged", base + "transport_us_per_message = 50\n");
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(charged.status, 0) << charged.err;
  const nlohmann::json a = plain.Provenance(), b = charged.Provenance();
  const double ops = std::stod(a["sim_collective_operations"].get<std::string>());
  ASSERT_GT(ops, 0);
  EXPECT_EQ(b["sim_collective_operations"], a["sim_collective_operations"]);
  EXPECT_NEAR(std::stod(b["sim_collective_time_s"].get<std::string>()) -
                  std::stod(a["sim_collective_time_s"].get<std::string>()),
              ops * 4 * 50e-6, 1e-6);
  EXPECT_EQ(SummaryCell(plain, "final_test_accuracy"), SummaryCell(charged, "final_test_accuracy"));
  EXPECT_GT(std::stod(SummaryCell(charged, "wall_time_s")),
            std::stod(SummaryCell(plain, "wall_time_s")));
}

// Fair and interleaved sharing are the simulated store's network model; the simulated
// collective times its own transfers, so a collective run refuses them.
TEST(SimCollectiveRunRefusal, FairAndInterleavedSharingAreRefused) {
  for (const std::string sharing : {"fair", "interleaved"}) {
    testing::TempDir tmp;
    const SimRun r = RunConfig(tmp, "bad",
                               "[algorithm]\nname = allreduce_sgd\nworkers = 2\n[cluster]\n"
                               "transport = sim\n[network]\nsharing = " +
                                   sharing + "\n");
    EXPECT_EQ(r.status, 2) << sharing;
    EXPECT_THAT(r.err, HasSubstr("network.sharing"));
    EXPECT_THAT(r.err, HasSubstr("parameter-server strategies only")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.dir.empty()) << sharing;
  }
  // fifo, said explicitly, is what the collective runs anyway.
  testing::TempDir ok;
  const SimRun f = RunConfig(ok, "ok",
                             "epochs = 0.1\n[algorithm]\nname = allreduce_sgd\nworkers = 2\n"
                             "[cluster]\ntransport = sim\n[network]\nsharing = fifo\n");
  EXPECT_EQ(f.status, 0) << f.err;
}

}  // namespace
}  // namespace asgd::experiments
