// The strategies on a collective (allreduce_sgd, local_sgd, dpsgd) as processes: `asgd
// launch` with the workers as the ranks of a gloo group (the record as `asgd run` writes
// it, bit for bit for allreduce_sgd), a checkpoint resumed after the coordinator was
// killed, a killed and a silent rank each stopping the run in one line, and a run placed
// by mpirun. Every process is ended by PID; each test times out on its own.
#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include "core/file_util.h"
#include "experiments/record/csv.h"
#include "tests/experiments/launch_test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;
using namespace launch_test;  // NOLINT: the helpers of launch_test_util.h

// The strategies on a collective as processes: the coordinator and the workers only (the
// ranks of a gloo group), the record as `asgd run` writes it. allreduce_sgd is
// deterministic (every rank applies the same allreduced gradient) and so is the run in
// one process with threads: the same final accuracy and loss, the same convergence rows
// (test columns), the same bytes per worker. dpsgd runs 4 workers (RunTestWorkers), the
// others 3.
TEST(Launch, CollectiveStrategiesRunAsProcesses) {
  for (const std::string name : {"allreduce_sgd", "local_sgd", "dpsgd"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    const std::string config = TrainingConfig(dir, name);
    const std::string n = std::to_string(testing::RunTestWorkers(name));
    Subprocess launch({kAsgd, "launch", config, "--set", "algorithm.workers=" + n},
                      dir.File("launch.log"));
    const auto status = launch.Wait(kTimeout);
    ASSERT_TRUE(status.has_value()) << "launch hung:\n" << launch.Output();
    EXPECT_EQ(*status, 0) << launch.Output();
    const std::string out = launch.Output();
    EXPECT_THAT(out, HasSubstr("[worker 2] worker 2: "));
    EXPECT_THAT(out, ::testing::Not(HasSubstr("[ps 0]")));
    EXPECT_THAT(out, ::testing::Not(HasSubstr("[evaluator]")));
    fs::path run;
    auto s = Summary(dir, &run);
    EXPECT_EQ(s["status"], "completed");
    EXPECT_EQ(s["transport"], "gloo-halving_doubling");  // the default algorithm
    EXPECT_EQ(s["ps_shards"], "0");
    EXPECT_EQ(s["workers"], n);
    EXPECT_EQ(s["staleness_max"], "0");
    EXPECT_GE(std::stod(s["final_test_accuracy"]), 0.85);
    EXPECT_GT(std::stoll(s["bytes_pushed"]), 0);
    for (const char* file : {"convergence.csv", "workers.csv", "staleness.csv", "summary.csv",
                             "provenance.json", "config.ini"}) {
      EXPECT_TRUE(fs::exists(run / file)) << file;
    }
    EXPECT_FALSE(fs::exists(run / "rendezvous"));  // the ranks' store is removed
    // One staleness-0 row per worker step.
    EXPECT_EQ(static_cast<int64_t>(CsvLines(run, "staleness.csv").size()) - 1,
              std::stoll(s["steps"]));
    // The consensus distance is measured at every row (0 at the start: one broadcast).
    const auto rows = CsvLines(run, "convergence.csv");
    ASSERT_GE(rows.size(), 4u);
    const auto header = ParseCsvLine(rows[0]);
    ASSERT_EQ(header.back(), "consensus_distance");
    for (std::size_t i = 1; i < rows.size(); ++i) {
      const std::string cell = ParseCsvLine(rows[i]).back();
      EXPECT_NE(cell, "nan") << rows[i];
      EXPECT_GE(std::stod(cell), 0.0) << rows[i];
    }
    EXPECT_EQ(ParseCsvLine(rows[1]).back(), "0");
    for (pid_t pid : ChildPids(out)) EXPECT_FALSE(Alive(pid)) << pid;
    if (name != "allreduce_sgd") continue;

    Subprocess here({kAsgd, "run", config, "--set", "experiment.out_dir=" + dir.File("here")},
                    dir.File("run.log"));
    ASSERT_EQ(here.Wait(kTimeout), 0) << here.Output();
    ASSERT_NO_FATAL_FAILURE(ExpectSameFinalLine(out, here.Output()));
    std::vector<fs::path> here_runs(fs::directory_iterator(dir.File("here")), {});
    ASSERT_EQ(here_runs.size(), 1u);
    // Convergence rows: the same evaluation points and test figures (time and the
    // training loss, averaged over the reports that arrived between rows, differ).
    const auto here_rows = CsvLines(here_runs[0], "convergence.csv");
    ASSERT_EQ(here_rows.size(), rows.size());
    for (std::size_t i = 1; i < rows.size(); ++i) {
      const auto x = ParseCsvLine(rows[i]), y = ParseCsvLine(here_rows[i]);
      for (const std::size_t col : {1u, 2u, 3u, 5u, 6u, 7u, 9u}) {
        EXPECT_EQ(x.at(col), y.at(col)) << header.at(col) << " in row " << i;
      }
    }
    // workers.csv: the same steps, samples, pushes and bytes per worker.
    const auto workers = CsvLines(run, "workers.csv"),
               here_workers = CsvLines(here_runs[0], "workers.csv");
    ASSERT_EQ(workers.size(), 4u);
    ASSERT_EQ(here_workers.size(), 4u);
    for (std::size_t i = 1; i < workers.size(); ++i) {
      const auto x = ParseCsvLine(workers[i]), y = ParseCsvLine(here_workers[i]);
      for (const std::size_t col : {0u, 1u, 2u, 6u, 7u, 8u}) EXPECT_EQ(x.at(col), y.at(col)) << i;
    }
  }
}

// As processes too, the [delay] model sets the step time (a constant 50 ms: 8 steps per
// worker cannot take less than 0.4 s of compute nor of training time; lower bounds only,
// a slow machine adds to them), and the final line and the `updates` columns count
// communication rounds: 8 allreduces for allreduce_sgd, 4 averagings for local_sgd with
// H = 2, not the pushes summed over the 3 workers.
TEST(Launch, CollectiveRunsTakeTheDelayAndCountRounds) {
  constexpr double kMinimumS = 8 * 0.050;
  for (const auto& [name, rounds] : std::vector<std::pair<std::string, std::string>>{
           {"allreduce_sgd", "8"}, {"local_sgd", "4"}}) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    const std::string config =
        TrainingConfig(dir, name, "[delay]\ncompute = constant\nmean_ms = 50\n");
    Subprocess launch({kAsgd, "launch", config, "--set", "experiment.max_steps=24"},
                      dir.File("launch.log"));
    const auto status = launch.Wait(kTimeout);
    ASSERT_TRUE(status.has_value()) << "launch hung:\n" << launch.Output();
    ASSERT_EQ(*status, 0) << launch.Output();
    const std::string out = launch.Output();
    EXPECT_THAT(out, HasSubstr(", " + rounds + " communication rounds, ")) << out;
    fs::path run;
    auto s = Summary(dir, &run);
    EXPECT_EQ(s["steps"], "24");
    EXPECT_EQ(s["updates"], rounds);
    EXPECT_GE(std::stod(s["wall_time_s"]), kMinimumS);
    const auto rows = CsvLines(run, "convergence.csv");
    ASSERT_GE(rows.size(), 2u);
    EXPECT_EQ(ParseCsvLine(rows.back()).at(3), rounds) << rows.back();
    const auto workers = CsvLines(run, "workers.csv");
    ASSERT_EQ(workers.size(), 4u);
    const auto header = ParseCsvLine(workers[0]);
    const auto compute = std::find(header.begin(), header.end(), "compute_time_s");
    const auto pushes = std::find(header.begin(), header.end(), "pushes");
    ASSERT_NE(compute, header.end());
    ASSERT_NE(pushes, header.end());
    for (std::size_t i = 1; i < workers.size(); ++i) {
      const auto cells = ParseCsvLine(workers[i]);
      EXPECT_GE(std::stod(cells.at(static_cast<std::size_t>(compute - header.begin()))), kMinimumS)
          << workers[i];
      EXPECT_EQ(cells.at(static_cast<std::size_t>(pushes - header.begin())), rounds) << workers[i];
    }
    for (pid_t pid : ChildPids(out)) EXPECT_FALSE(Alive(pid)) << pid;
  }
}

// Checkpoints of a run on a collective as processes: rank 0 writes the average at a round
// boundary, the coordinator the manifest with the boundary's counters. The coordinator
// killed after one; `launch --resume` starts every rank from it, and the run ends exactly
// where the uninterrupted `asgd run` does (allreduce_sgd, plain SGD): the same final line,
// the same convergence rows (test columns) and staleness rows.
TEST(Launch, KilledCoordinatorResumesACollectiveRunBitForBit) {
  testing::TempDir dir;
  const std::string config = TrainingConfig(dir, "allreduce_sgd", "heartbeat_timeout_s = 2\n");
  const std::vector<std::string> sets = {"--set", "experiment.epochs=60",
                                         "--set", "experiment.checkpoint_every_steps=300",
                                         "--set", "cluster.timeout_s=3"};
  std::vector<std::string> argv = {kAsgd, "launch", config};
  argv.insert(argv.end(), sets.begin(), sets.end());
  std::vector<pid_t> pids;
  {
    Subprocess launch(argv, dir.File("launch.log"));
    WaitForOutput(launch, "coordinator: checkpoint");
    pids = ChildPids(launch.Output());
    ASSERT_EQ(pids.size(), 4u) << launch.Output();
    ::kill(pids[0], SIGKILL);  // the coordinator
    const auto status = launch.Wait(60s);
    ASSERT_TRUE(status.has_value()) << launch.Output();
    EXPECT_NE(*status, 0) << launch.Output();  // killed before the run ended
  }
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << "pid " << pid << " survived";
  fs::path run;
  (void)Summary(dir, &run);
  // Named by communication rounds (as `asgd run` names them): round-<rounds>, the
  // manifest's rounds, its step the pushes of the 3 ranks.
  int complete = 0;
  for (const auto& e : fs::directory_iterator(run / "checkpoints")) {
    const std::string name = e.path().filename().string();
    ASSERT_EQ(name.rfind("round-", 0), 0u) << name;
    if (!fs::exists(e.path() / "manifest.json")) continue;  // asked for when it was killed
    ++complete;
    const auto m = nlohmann::json::parse(ReadFile((e.path() / "manifest.json").string()));
    EXPECT_EQ(m.at("rounds").get<int64_t>(), std::stoll(name.substr(6))) << name;
    EXPECT_EQ(m.at("step").get<int64_t>(), 3 * m.at("rounds").get<int64_t>()) << name;
    EXPECT_EQ(m.at("shards").at(0).at("version"), m.at("rounds")) << name;  // allreduce_sgd
  }
  EXPECT_GE(complete, 1);
  std::vector<std::string> again = {kAsgd, "launch", config, "--resume", run.string()};
  again.insert(again.end(), sets.begin(), sets.end());
  Subprocess resumed(again, dir.File("resumed.log"));
  ASSERT_EQ(resumed.Wait(90s).value_or(-1), 0) << resumed.Output();
  EXPECT_THAT(resumed.Output(), HasSubstr("coordinator: resuming"));
  EXPECT_THAT(resumed.Output(), HasSubstr("[worker 2] worker 2: resuming at step "));
  EXPECT_EQ(Summary(dir).at("status"), "completed");
  EXPECT_EQ(Provenance(dir)["resumed"].size(), 1u);

  Subprocess here({kAsgd, "run", config, "--set", "experiment.epochs=60", "--set",
                   "experiment.out_dir=" + dir.File("here")},
                  dir.File("run.log"));
  ASSERT_EQ(here.Wait(kTimeout), 0) << here.Output();
  const std::string launched = resumed.Output(), threads = here.Output();
  ASSERT_NO_FATAL_FAILURE(ExpectSameFinalLine(launched, threads));
  std::vector<fs::path> here_runs(fs::directory_iterator(dir.File("here")), {});
  ASSERT_EQ(here_runs.size(), 1u);
  auto columns = [](const fs::path& folder, const std::string& name,
                    const std::vector<std::size_t>& cols, bool sorted) {
    std::vector<std::string> out;
    const auto lines = CsvLines(folder, name);
    for (std::size_t i = 1; i < lines.size(); ++i) {
      const auto cells = ParseCsvLine(lines[i]);
      std::string key;
      for (const std::size_t c : cols) key += cells.at(c) + ",";
      out.push_back(key);
    }
    if (sorted) std::sort(out.begin(), out.end());
    return out;
  };
  // epoch, samples, updates, test_loss, test_accuracy, eval_examples
  EXPECT_EQ(columns(run, "convergence.csv", {1, 2, 3, 5, 6, 7}, false),
            columns(here_runs[0], "convergence.csv", {1, 2, 3, 5, 6, 7}, false));
  // worker, shard, step, versions, staleness (the rows' order is the reports')
  EXPECT_EQ(columns(run, "staleness.csv", {1, 2, 3, 4, 5, 6}, true),
            columns(here_runs[0], "staleness.csv", {1, 2, 3, 4, 5, 6}, true));
}

// A collective cannot lose a member: a worker killed mid-run (SIGKILL) ends the run with
// one line naming it and exit 2, within about collective.timeout_ms; every process is gone.
TEST(Launch, AKilledRankStopsACollectiveRun) {
  testing::TempDir dir;
  const std::string config = TrainingConfig(dir, "allreduce_sgd", "heartbeat_timeout_s = 5\n");
  Subprocess launch({kAsgd, "launch", config, "--set", "experiment.epochs=100000", "--set",
                     "collective.timeout_ms=3000"},
                    dir.File("launch.log"));
  WaitForOutput(launch, "all 3 roles registered");
  std::this_thread::sleep_for(300ms);  // training
  const std::vector<pid_t> pids = ChildPids(launch.Output());
  ASSERT_EQ(pids.size(), 4u) << launch.Output();
  ::kill(pids[2], SIGKILL);  // worker 1
  const auto status = launch.Wait(60s);
  ASSERT_TRUE(status.has_value()) << "launch did not stop:\n" << launch.Output();
  EXPECT_EQ(*status, 2) << launch.Output();
  const std::string out = launch.Output();
  EXPECT_THAT(out, HasSubstr("[coordinator] run stopped: worker 1 (pid " + std::to_string(pids[2]) +
                             " on "));
  EXPECT_THAT(out, HasSubstr("left the collective (it died or stopped answering)"));
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << "pid " << pid << " survived";
  EXPECT_EQ(Summary(dir)["status"], "failed");
  EXPECT_THAT(Provenance(dir)["status_reason"].get<std::string>(), HasSubstr("worker 1 (pid"));
}

// A silent rank (SIGSTOP: alive, answering nothing) is named too, once the others' next
// collective call timed out (collective.timeout_ms).
TEST(Launch, ASilentRankStopsACollectiveRun) {
  testing::TempDir dir;
  const std::string config = TrainingConfig(dir, "local_sgd", "heartbeat_timeout_s = 30\n");
  Subprocess launch({kAsgd, "launch", config, "--set", "experiment.epochs=100000", "--set",
                     "collective.timeout_ms=1500", "--set", "cluster.timeout_s=3"},
                    dir.File("launch.log"));
  WaitForOutput(launch, "all 3 roles registered");
  std::this_thread::sleep_for(300ms);
  const std::vector<pid_t> pids = ChildPids(launch.Output());
  ASSERT_EQ(pids.size(), 4u) << launch.Output();
  ::kill(pids[3], SIGSTOP);  // worker 2
  const auto status = launch.Wait(60s);
  const bool left_behind = Alive(pids[3]);
  if (left_behind) ::kill(pids[3], SIGKILL);
  EXPECT_FALSE(left_behind) << "the stopped worker survived";
  ASSERT_TRUE(status.has_value()) << "launch did not stop:\n" << launch.Output();
  EXPECT_EQ(*status, 2) << launch.Output();
  EXPECT_THAT(launch.Output(), HasSubstr("[coordinator] run stopped: worker 2 (pid "));
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << "pid " << pid << " survived";
}

// Open MPI places a run on a collective: rank 0 the coordinator, the others the workers (no
// shards), meeting in the run folder's file store; the same final line as `asgd run`.
TEST(Launch, MpirunRunsACollectiveStrategy) {
  if (::access("/usr/bin/mpirun", X_OK) != 0) {
    GTEST_SKIP() << "mpirun not installed (Debian's openmpi-bin; ./setup.sh installs it)";
  }
  testing::TempDir dir;
  const std::string config = TrainingConfig(dir, "allreduce_sgd");
  Subprocess mpirun(
      {"/usr/bin/mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "3", kAsgd, "task",
       "--config", config, "--set", "cluster.base_port=" + std::to_string(BasePort())},
      dir.File("mpirun.log"), {"OMPI_MCA_plm_rsh_agent="});
  const auto status = mpirun.Wait(kTimeout);
  ASSERT_TRUE(status.has_value()) << "mpirun hung:\n" << mpirun.Output();
  EXPECT_EQ(*status, 0) << mpirun.Output();
  EXPECT_THAT(mpirun.Output(), HasSubstr("rank 0 of 3 is coordinator 0"));
  EXPECT_THAT(mpirun.Output(), HasSubstr("rank 1 of 3 is worker 0"));
  auto s = Summary(dir);
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["workers"], "2");
  EXPECT_EQ(s["ps_shards"], "0");
  EXPECT_EQ(s["transport"], "gloo-halving_doubling");  // the default algorithm
  Subprocess here({kAsgd, "run", config, "--set", "algorithm.workers=2", "--set",
                   "experiment.out_dir=" + dir.File("here")},
                  dir.File("run.log"));
  ASSERT_EQ(here.Wait(kTimeout), 0) << here.Output();
  const std::string placed = mpirun.Output(), threads = here.Output();
  ASSERT_NO_FATAL_FAILURE(ExpectSameFinalLine(placed, threads));
}

}  // namespace
}  // namespace asgd::experiments
