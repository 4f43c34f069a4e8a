// Training runs as processes on loopback: `asgd launch` over tcp and ipc, a run under
// `mpirun` (Open MPI) with `asgd task`, Ctrl-C leaving no process behind, a failed role
// failing the run, and a coordinator that refuses malformed control messages without
// falling over. Every process is ended by PID; each test times out on its own.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include "core/file_util.h"
#include "experiments/cluster/control_protocol.h"
#include "experiments/cluster/launch.h"
#include "experiments/record/csv.h"
#include "tests/experiments/launch_test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_util.h"
#include "transport/context.h"
#include "transport/control.h"

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;
using namespace launch_test;  // NOLINT: the helpers of launch_test_util.h

// The ports of a launch's roles are distinct even when the kernel hands one out again for
// a bind to port 0 (it did: the evaluator got ps 1's port, and the run failed). 500 ports
// picked one after the other by bind-to-0 held a repeat in 20 of 20 trials on Linux.
TEST(Launch, RolesGetDistinctPorts) {
  const std::vector<int> ports = DistinctFreePorts(500);
  ASSERT_EQ(ports.size(), 500u);
  EXPECT_EQ(std::set<int>(ports.begin(), ports.end()).size(), ports.size());
  for (int port : ports) EXPECT_GT(port, 0);
}

// sync_sgd launched over tcp ends with the parameters of the same config run in one
// process. Nothing in it depends on timing: the rounds combine in worker order, and every
// worker is granted exactly the rounds the in-process run takes, however late its reports
// (SyncWorkersAreGrantedExactlyTheInProcessRoundsWhateverTheyReport, below). Before that
// grant, a loaded machine made this run end a round off now and then (loss 0.2796 against
// 0.2819).
TEST(Launch, SyncSgdOverTcpMatchesTheInProcessRunExactly) {
  testing::TempDir dir;
  const std::string config = TrainingConfig(dir, "sync_sgd");
  Subprocess launch({kAsgd, "launch", config}, dir.File("launch.log"));
  const auto status = launch.Wait(kTimeout);
  ASSERT_TRUE(status.has_value()) << "launch hung:\n" << launch.Output();
  EXPECT_EQ(*status, 0) << launch.Output();
  const std::string out = launch.Output();
  EXPECT_THAT(out, HasSubstr("[coordinator] final test accuracy: "));
  for (const char* role : {"[ps 0]", "[ps 1]", "[worker 0]", "[worker 2]", "[evaluator]"}) {
    EXPECT_THAT(out, HasSubstr(role));
  }
  fs::path run;
  auto s = Summary(dir, &run);
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["transport"], "tcp");
  EXPECT_EQ(s["ps_shards"], "2");
  EXPECT_EQ(s["workers"], "3");
  for (const char* file : {"convergence.csv", "workers.csv", "staleness.csv",
                           "staleness_histogram.csv", "provenance.json", "config.ini"}) {
    EXPECT_TRUE(fs::exists(run / file)) << file;
  }
  // Synchronous rounds are deterministic: the same config in one process ends with the
  // same parameters, so the same final accuracy and loss.
  Subprocess run_here({kAsgd, "run", config, "--set", "experiment.out_dir=" + dir.File("here")},
                      dir.File("run.log"));
  ASSERT_EQ(run_here.Wait(kTimeout), 0) << run_here.Output();
  const std::string launched = launch.Output(), here = run_here.Output();
  ASSERT_NO_FATAL_FAILURE(ExpectSameFinalLine(launched, here));
  for (pid_t pid : ChildPids(out)) EXPECT_FALSE(Alive(pid)) << pid;
}

// Where a synchronous run ends does not depend on when its workers report: every worker
// is granted exactly the rounds the in-process run takes. With a worker 6x slower the
// coordinator's shares of the samples left used to grant the fast ones a batch more than
// their part, and then every worker an extra round (2 of 6 launches ended one round late).
TEST(Launch, SyncSgdWithAStragglerEndsOnTheInProcessRound) {
  testing::TempDir dir;
  const std::string config =
      TrainingConfig(dir, "sync_sgd",
                     "[delay]\ncompute = constant\nmean_ms = 1\nstraggler_fraction = 0.34\n"
                     "straggler_factor = 6\n");
  Subprocess run_here({kAsgd, "run", config, "--set", "experiment.out_dir=" + dir.File("here")},
                      dir.File("run.log"));
  ASSERT_EQ(run_here.Wait(kTimeout), 0) << run_here.Output();
  for (int i = 0; i < 3; ++i) {
    const std::string runs = dir.File("launched-" + std::to_string(i));
    Subprocess launch({kAsgd, "launch", config, "--set", "experiment.out_dir=" + runs},
                      dir.File("launch.log"));
    const auto status = launch.Wait(kTimeout);
    ASSERT_TRUE(status.has_value()) << "launch hung:\n" << launch.Output();
    ASSERT_EQ(*status, 0) << launch.Output();
    ASSERT_NO_FATAL_FAILURE(ExpectSameFinalLine(launch.Output(), run_here.Output())) << i;
    for (pid_t pid : ChildPids(launch.Output())) EXPECT_FALSE(Alive(pid)) << pid;
  }
}

// The two tests above caught the extra round only when the machine's load made a worker's
// report late (1 in 3 launches under five busy loops). This one makes the reports that
// did it, and needs no timing: a coordinator and two real shards, the three workers
// played by the test over the control channel. Once training started, worker 0 reports
// 47 of the run's 48 rounds done while the others report none (the shares of the samples
// left would grant it more than its part, and so every worker a round more); every
// worker is granted exactly the 48 steps the in-process run takes, however they report.
TEST(Launch, SyncWorkersAreGrantedExactlyTheInProcessRoundsWhateverTheyReport) {
  testing::TempDir dir;
  const std::string config = TrainingConfig(dir, "sync_sgd");
  const int port = BasePort();
  auto at = [&](int offset) { return "127.0.0.1:" + std::to_string(port + offset); };
  const std::vector<std::string> sets = {
      "--set", "cluster.coordinator=" + at(0),
      "--set", "cluster.ps=" + at(1) + "," + at(2),
      "--set", "cluster.worker=" + at(3) + "," + at(4) + "," + at(5),
      "--set", "cluster.evaluator="};  // the coordinator evaluates
  auto role = [&](std::vector<std::string> argv, const std::string& log) {
    argv.insert(argv.begin(), kAsgd);
    argv.insert(argv.end(), sets.begin(), sets.end());
    return std::make_unique<Subprocess>(argv, dir.File(log));
  };
  const auto coordinator = role({"coordinator", "--config", config}, "coordinator.log");
  const auto ps0 = role({"ps", "--config", config, "--task", "0"}, "ps0.log");
  const auto ps1 = role({"ps", "--config", config, "--task", "1"}, "ps1.log");
  auto context = transport::NewContext();
  transport::ControlClient client(context, "tcp://" + at(0));
  const auto deadline = std::chrono::steady_clock::now() + 60s;  // against a hang only
  auto ask = [&](const std::string& request, auto* reply) {
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto bytes = client.Request(request, 500ms)) {
        const ControlError e = DecodeReply(*bytes, reply);
        EXPECT_TRUE(e.ok()) << e.message();
        return e.ok();
      }
    }
    return false;
  };
  auto report = [&](int w, int64_t steps, int64_t samples) {
    WorkerReport r;
    r.task = w;
    r.metrics.steps = steps;
    r.metrics.samples = samples;
    r.metrics.pushes = steps;
    WorkerReply reply;
    EXPECT_TRUE(ask(Encode(r), &reply)) << "worker " << w << ":\n" << coordinator->Output();
    return reply;
  };
  for (int w = 0; w < 3; ++w) {
    RegisterReply registered;
    ASSERT_TRUE(ask(Encode(RegisterRequest{"worker", w, ::getpid(), "test"}), &registered))
        << coordinator->Output();
  }
  // The go comes once every role registered and the initial parameters were evaluated.
  bool started = false;
  while (!started && std::chrono::steady_clock::now() < deadline) {
    for (int w = 0; w < 3; ++w) started = report(w, 0, 0).start || started;
    if (!started) std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(started) << coordinator->Output();
  // 1000 examples a worker, batches of 64: 16 steps an epoch, the last of 40 examples.
  const WorkerReply fast = report(0, 47, 2 * 1000 + 15 * 64);
  const WorkerReply slow = report(1, 0, 0);
  const WorkerReply slower = report(2, 0, 0);
  for (const WorkerReply* reply : {&fast, &slow, &slower}) {
    EXPECT_EQ(reply->step_budget, 48);
    EXPECT_EQ(reply->sample_budget, std::numeric_limits<int64_t>::max());
    EXPECT_FALSE(reply->stop);
  }
}

TEST(Launch, SspOverIpcTrainsAndRecordsClockStaleness) {
  testing::TempDir dir;
  const std::string config = TrainingConfig(dir, "ssp", "launch_transport = ipc\n");
  Subprocess launch({kAsgd, "launch", config}, dir.File("launch.log"));
  const auto status = launch.Wait(kTimeout);
  ASSERT_TRUE(status.has_value()) << "launch hung:\n" << launch.Output();
  EXPECT_EQ(*status, 0) << launch.Output();
  fs::path run;
  auto s = Summary(dir, &run);
  EXPECT_EQ(s["transport"], "ipc");
  EXPECT_GE(std::stod(s["final_test_accuracy"]), 0.85);
  EXPECT_LE(std::stod(s["staleness_max"]), 3);  // ssp_bound's default, in clocks
  EXPECT_GT(std::stoll(s["bytes_pushed"]), 0);
  // The coordinator writes summary.csv through the run core, as the in-process runners
  // do: its steps are the sum of workers.csv's (worker,steps,...).
  std::ifstream workers(run / "workers.csv");
  std::string line;
  std::getline(workers, line);
  int64_t worker_steps = 0;
  while (std::getline(workers, line)) worker_steps += std::stoll(ParseCsvLine(line).at(1));
  EXPECT_GT(worker_steps, 0);
  EXPECT_EQ(std::stoll(s["steps"]), worker_steps);
}

// Compressed pushes between processes (issue 17): sign with error feedback over tcp, two
// shards, each worker's push encoded per shard; the record reports the wire and dense
// bytes, and the run learns as the uncompressed one does.
TEST(Launch, CompressedPushesTrainOverTcp) {
  testing::TempDir dir;
  const std::string config =
      TrainingConfig(dir, "agn", "[compression]\nname = sign\nerror_feedback = true\n");
  Subprocess launch({kAsgd, "launch", config}, dir.File("launch.log"));
  const auto status = launch.Wait(kTimeout);
  ASSERT_TRUE(status.has_value()) << "launch hung:\n" << launch.Output();
  EXPECT_EQ(*status, 0) << launch.Output();
  fs::path run;
  auto s = Summary(dir, &run);
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["transport"], "tcp");
  EXPECT_EQ(s["compression"], "sign+ef");
  // 1 bit per element and a scale per shard's part: over 20 times fewer bytes.
  EXPECT_GT(std::stod(s["compression_ratio"]), 20.0) << s["bytes_pushed"];
  EXPECT_GT(std::stoll(s["dense_bytes_pushed"]), 20 * std::stoll(s["bytes_pushed"]));
  EXPECT_GE(std::stod(s["final_test_accuracy"]), 0.85);
  for (pid_t pid : ChildPids(launch.Output())) EXPECT_FALSE(Alive(pid)) << pid;
}

// CURVE on: keys from `asgd keys generate`, every connection (control channel and shards)
// encrypted and authenticated, and the run trains as without.
TEST(Launch, CurveClusterTrainsOverTcp) {
  testing::TempDir dir;
  Subprocess keys({kAsgd, "keys", "generate", dir.File("keys")}, dir.File("keys.log"));
  ASSERT_EQ(keys.Wait(30s), 0) << keys.Output();
  const std::string config = TrainingConfig(dir, "agn");
  Subprocess launch({kAsgd, "launch", config, "--set", "cluster.curve=true", "--set",
                     "cluster.keys_dir=" + dir.File("keys")},
                    dir.File("launch.log"));
  const auto status = launch.Wait(60s);
  ASSERT_TRUE(status.has_value()) << "launch hung:\n" << launch.Output();
  EXPECT_EQ(*status, 0) << launch.Output();
  const std::string out = launch.Output();
  EXPECT_THAT(out, HasSubstr("[coordinator] final test accuracy: "));
  // No connection refused by CURVE: the shards' bounds lines count them (auth_refused),
  // and no other line speaks of a refusal.
  std::string rest;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(" bounds: ") != std::string::npos) {
      EXPECT_THAT(line, HasSubstr(" auth_refused=0")) << line;
    } else {
      rest += line + "\n";
    }
  }
  EXPECT_THAT(rest, ::testing::Not(HasSubstr("refused")));
  auto s = Summary(dir);
  EXPECT_EQ(s["status"], "completed");
  EXPECT_EQ(s["transport"], "tcp");
  EXPECT_GE(std::stod(s["final_test_accuracy"]), 0.85);
  EXPECT_GT(std::stoll(s["bytes_pushed"]), 0);
  for (pid_t pid : ChildPids(out)) EXPECT_FALSE(Alive(pid)) << pid;
}

// Ctrl-C to launch ends the run: the coordinator writes what it has and every process
// started is gone.
TEST(Launch, CtrlCStopsTheRunAndLeavesNoProcess) {
  testing::TempDir dir;
  const std::string config = TrainingConfig(dir, "agn", "");
  Subprocess launch({kAsgd, "launch", config, "--set", "experiment.epochs=100000"},
                    dir.File("launch.log"));
  // Wait until the workers train.
  WaitForOutput(launch, "all 6 roles registered");
  ASSERT_THAT(launch.Output(), HasSubstr("all 6 roles registered"));
  std::this_thread::sleep_for(500ms);
  const std::vector<pid_t> pids = ChildPids(launch.Output());
  ASSERT_EQ(pids.size(), 7u) << launch.Output();
  launch.Signal(SIGINT);
  const auto status = launch.Wait(60s);
  ASSERT_TRUE(status.has_value()) << "launch did not stop:\n" << launch.Output();
  EXPECT_EQ(*status, 128 + SIGINT) << launch.Output();
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << "pid " << pid << " survived";
  fs::path run;
  auto s = Summary(dir, &run);
  EXPECT_EQ(s["status"], "failed");
  auto provenance = nlohmann::json::parse(ReadFile((run / "provenance.json").string()));
  EXPECT_THAT(provenance["status_reason"].get<std::string>(), HasSubstr("SIGTERM"));
  // Every CSV row written before the stop is there.
  EXPECT_GE(ReadFile((run / "convergence.csv").string()).size(), 50u);
}

// A worker that dies (SIGKILL) fails the run quickly and cleanly: exit 2, one line.
TEST(Launch, AKilledWorkerFailsTheRunWhenAskedTo) {
  testing::TempDir dir;
  const std::string config =
      TrainingConfig(dir, "async_sgd", "heartbeat_timeout_s = 2\non_worker_loss = fail\n");
  Subprocess launch({kAsgd, "launch", config, "--set", "experiment.epochs=100000"},
                    dir.File("launch.log"));
  WaitForOutput(launch, "all 6 roles registered");
  const std::vector<pid_t> pids = ChildPids(launch.Output());
  ASSERT_EQ(pids.size(), 7u) << launch.Output();
  ::kill(pids.back(), SIGKILL);  // the last worker
  const auto status = launch.Wait(60s);
  ASSERT_TRUE(status.has_value()) << "launch did not stop:\n" << launch.Output();
  EXPECT_EQ(*status, 2) << launch.Output();
  EXPECT_THAT(launch.Output(), HasSubstr("[launch] worker 2 exited with status 137"));
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << "pid " << pid << " survived";
  EXPECT_EQ(Summary(dir)["status"], "failed");
}

// A run of `seconds` with 3 workers, in which `act` does something to worker 2 (its PID)
// once every role registered. Returns launch's exit status; *output its output.
int RunWithWorkerTrouble(const testing::TempDir& dir, const std::string& algorithm,
                         const std::string& extra, int seconds,
                         const std::function<void(pid_t, Subprocess&)>& act, std::string* output) {
  // A lower rate than the 3-epoch runs: these train for seconds (hundreds of epochs).
  const std::string config =
      TrainingConfig(dir, algorithm, "heartbeat_timeout_s = 2\nreport_interval_s = 0.1\n" + extra);
  Subprocess launch(
      {kAsgd, "launch", config, "--set", "experiment.epochs=100000", "--set",
       "experiment.max_time_s=" + std::to_string(seconds), "--set", "algorithm.learning_rate=0.02"},
      dir.File("launch.log"));
  WaitForOutput(launch, "all 6 roles registered");
  const std::vector<pid_t> pids = ChildPids(launch.Output());
  EXPECT_EQ(pids.size(), 7u) << launch.Output();
  if (pids.size() == 7u) act(pids.back(), launch);
  const auto status = launch.Wait(90s);
  *output = launch.Output();
  for (pid_t pid : pids) {
    if (Alive(pid)) {
      ADD_FAILURE() << "pid " << pid << " survived";
      ::kill(pid, SIGKILL);
    }
  }
  return status.value_or(-1);
}

// Asynchronous training goes on without a killed worker: the run completes, says that it
// lost one, its model is sound, and every push a surviving or lost worker reported has
// its staleness row (the lost worker's last unreported pushes may add a few rows).
TEST(Launch, AsyncRunSurvivesAKilledWorker) {
  testing::TempDir dir;
  std::string output;
  const int status = RunWithWorkerTrouble(
      dir, "async_sgd", "", 6,
      [](pid_t worker, Subprocess&) {
        std::this_thread::sleep_for(1s);
        ::kill(worker, SIGKILL);
      },
      &output);
  ASSERT_EQ(status, 0) << output;
  EXPECT_THAT(output, HasSubstr("training goes on without it"));
  const auto summary = Summary(dir);
  EXPECT_EQ(summary.at("status"), "completed");
  EXPECT_GE(std::stod(summary.at("final_test_accuracy")), 0.8) << output;
  EXPECT_EQ(Provenance(dir)["lost_workers"], "1");
  const int64_t updates = std::stoll(summary.at("updates"));
  EXPECT_GE(CsvRows(dir, "staleness.csv"), 2 * updates);  // 2 shards
}

// A restarted worker (same task) takes the lost one's place.
TEST(Launch, RestartedWorkerRejoins) {
  testing::TempDir dir;
  std::string output;
  std::unique_ptr<Subprocess> restarted;
  const int status = RunWithWorkerTrouble(
      dir, "async_sgd", "", 10,
      [&](pid_t worker, Subprocess& launch) {
        std::this_thread::sleep_for(1s);
        ::kill(worker, SIGKILL);
        WaitForOutput(launch, "training goes on without it");
        // The cluster launch generated, from its "[launch] cluster: --set ..." line.
        std::vector<std::string> argv = {kAsgd,    "worker", "--config", dir.File("train.ini"),
                                         "--task", "2",      "--set",    "experiment.progress=off"};
        const std::string out = launch.Output();
        const auto at = out.find("[launch] cluster:");
        ASSERT_NE(at, std::string::npos) << out;
        std::istringstream words(out.substr(at, out.find('\n', at) - at));
        std::string word;
        while (words >> word) {
          if (word.rfind("cluster.", 0) == 0) argv.insert(argv.end(), {"--set", word});
        }
        restarted = std::make_unique<Subprocess>(argv, dir.File("restarted.log"));
      },
      &output);
  ASSERT_EQ(status, 0) << output;
  ASSERT_NE(restarted, nullptr);
  const auto worker_status = restarted->Wait(30s);
  EXPECT_EQ(worker_status.value_or(-1), 0) << restarted->Output();
  EXPECT_THAT(output, HasSubstr("worker 2 rejoined"));
  const auto provenance = Provenance(dir);
  EXPECT_EQ(provenance["lost_workers"], "1");
  EXPECT_EQ(provenance["rejoined_workers"], "1");
  EXPECT_GE(std::stod(Summary(dir).at("final_test_accuracy")), 0.8);
}

// A worker frozen (SIGSTOP) for longer than the heartbeat timeout is left behind; woken
// (SIGCONT), it is taken back as a straggler and its stale pushes are applied as
// asynchronous SGD says (with their staleness recorded).
TEST(Launch, FrozenWorkerIsTakenBackAsAStraggler) {
  testing::TempDir dir;
  std::string output;
  const int status = RunWithWorkerTrouble(
      dir, "async_sgd", "", 8,
      [](pid_t worker, Subprocess&) {
        std::this_thread::sleep_for(1s);
        ::kill(worker, SIGSTOP);
        std::this_thread::sleep_for(3500ms);
        ::kill(worker, SIGCONT);
      },
      &output);
  ASSERT_EQ(status, 0) << output;
  EXPECT_THAT(output, HasSubstr("(a straggler)"));
  EXPECT_EQ(Provenance(dir)["returned_stragglers"], "1");
  EXPECT_GE(std::stod(Summary(dir).at("final_test_accuracy")), 0.8);
}

// Synchronous SGD with a backup worker (2 of 3 per round) keeps stepping without a killed
// worker; without one, and for the other round-based strategies, the rounds are re-formed
// with the survivors; SSP, whose clock table would wait forever, stops and says why.
TEST(Launch, SynchronousRunsReformRoundsWithTheSurvivors) {
  struct Case {
    const char* algorithm;
    const char* extra;
    int status;
    const char* says;
  };
  for (const Case& c : {
           Case{"sync_sgd", "[algorithm]\nreplicas_to_aggregate = 2\n", 0, "training goes on"},
           Case{"sync_sgd", "", 0, "synchronous rounds re-formed with 2 workers"},
           Case{"easgd", "", 0, "synchronous rounds re-formed with 2 workers"},
           Case{"ssp", "", 2, "ssp waits for every worker's clock"},
       }) {
    testing::TempDir dir;
    std::string output;
    const int status = RunWithWorkerTrouble(
        dir, c.algorithm, c.extra, 6,
        [](pid_t worker, Subprocess&) {
          std::this_thread::sleep_for(1s);
          ::kill(worker, SIGKILL);
        },
        &output);
    EXPECT_EQ(status, c.status) << c.algorithm << " " << c.extra << output;
    EXPECT_THAT(output, HasSubstr(c.says)) << c.algorithm;
    if (c.status == 0) {
      EXPECT_EQ(Provenance(dir)["lost_workers"], "1") << c.algorithm;
      EXPECT_GE(std::stod(Summary(dir).at("final_test_accuracy")), 0.8) << c.algorithm << output;
    }
  }
}

// The "--set cluster...=..." arguments of launch's "[launch] cluster:" line.
std::vector<std::string> LaunchClusterSets(const std::string& output) {
  std::vector<std::string> sets;
  const auto at = output.find("[launch] cluster:");
  if (at == std::string::npos) return sets;
  std::istringstream words(output.substr(at, output.find('\n', at) - at));
  std::string word;
  while (words >> word) {
    if (word.rfind("cluster.", 0) == 0) sets.insert(sets.end(), {"--set", word});
  }
  return sets;
}

// The count before `what` (" in chunks": the pushes received in chunks; " replies in
// chunks": the replies sent in chunks) in the line "ps I: stopped at ..." of shard I; -1
// without it.
int64_t StoppedCount(const std::string& text, int shard, const std::string& what) {
  const std::size_t line = text.rfind("ps " + std::to_string(shard) + ": stopped at version");
  if (line == std::string::npos) return -1;
  const std::size_t end = text.find(what, line);
  const std::size_t at = text.rfind(", ", end);
  if (end == std::string::npos || at == std::string::npos || at < line) return -1;
  return std::stoll(text.substr(at + 2, end - at - 2));
}

// A shard killed mid-run: the coordinator pauses the workers, the restarted shard (same
// task, same address) restores its range from the newest checkpoint, and training goes on;
// provenance.json records the restart, the pause and the updates lost since the checkpoint.
// The pushes go in chunks (82 KB per shard, cluster.chunk_bytes = 64 KiB), so the kill
// may fall between the chunks of a push, whose rest then reaches the restarted shard;
// the pull replies go in chunks too.
TEST(Launch, KilledShardIsRestoredFromTheLastCheckpoint) {
  testing::TempDir dir;
  const std::string config =
      TrainingConfig(dir, "async_sgd", "heartbeat_timeout_s = 2\nreport_interval_s = 0.1\n");
  const std::vector<std::string> sets = {
      "--set", "experiment.epochs=100000",     "--set", "experiment.max_time_s=25",
      "--set", "algorithm.learning_rate=0.02", "--set", "experiment.checkpoint_every_steps=2000",
      "--set", "cluster.timeout_s=15",         "--set", "model.hidden=2048",
      "--set", "cluster.chunk_bytes=65536"};
  std::vector<std::string> argv = {kAsgd, "launch", config};
  argv.insert(argv.end(), sets.begin(), sets.end());
  Subprocess launch(argv, dir.File("launch.log"));
  WaitForOutput(launch, "all 6 roles registered");
  const std::vector<pid_t> pids = ChildPids(launch.Output());
  ASSERT_EQ(pids.size(), 7u) << launch.Output();
  WaitForOutput(launch, "coordinator: checkpoint");  // at least one complete checkpoint
  ::kill(pids[2], SIGKILL);                          // ps 1
  WaitForOutput(launch, "workers pause until it is restarted");
  std::vector<std::string> ps = {kAsgd, "ps", "--config", config, "--task", "1"};
  ps.insert(ps.end(), sets.begin(), sets.end());
  const auto cluster = LaunchClusterSets(launch.Output());
  ps.insert(ps.end(), cluster.begin(), cluster.end());
  ps.insert(ps.end(), {"--set", "experiment.progress=off"});
  Subprocess restarted(ps, dir.File("ps1.log"));
  const auto status = launch.Wait(90s);
  const auto ps_status = restarted.Wait(30s);
  const std::string output = launch.Output();
  for (pid_t pid : pids) {
    if (Alive(pid)) {
      ADD_FAILURE() << "pid " << pid << " survived";
      ::kill(pid, SIGKILL);
    }
  }
  ASSERT_EQ(status.value_or(-1), 0) << output << restarted.Output();
  EXPECT_EQ(ps_status.value_or(-1), 0) << restarted.Output();
  EXPECT_THAT(restarted.Output(), HasSubstr("restored version"));
  EXPECT_THAT(output, HasSubstr("every shard is back; workers resume"));
  const auto provenance = Provenance(dir);
  EXPECT_EQ(provenance["ps_restarts"], "1");
  EXPECT_GT(std::stod(provenance["paused_s"].get<std::string>()), 0.0);
  EXPECT_GE(std::stod(Summary(dir).at("final_test_accuracy")), 0.8);
  EXPECT_GT(StoppedCount(output, 0, " in chunks"), 0) << output;
  EXPECT_GT(StoppedCount(restarted.Output(), 1, " in chunks"), 0) << restarted.Output();
  EXPECT_GT(StoppedCount(output, 0, " replies in chunks"), 0) << output;
  EXPECT_GT(StoppedCount(restarted.Output(), 1, " replies in chunks"), 0) << restarted.Output();
}

// The coordinator killed mid-run: the other roles give up on it, and `asgd launch
// --resume RUN_DIR` continues the run from its newest checkpoint in the same folder,
// appending to its CSVs (rows after the checkpoint dropped, none duplicated).
TEST(Launch, KilledCoordinatorResumesFromTheLastCheckpoint) {
  testing::TempDir dir;
  const std::string config =
      TrainingConfig(dir, "async_sgd", "heartbeat_timeout_s = 2\nreport_interval_s = 0.1\n");
  const std::vector<std::string> sets = {"--set", "algorithm.learning_rate=0.02",
                                         "--set", "experiment.checkpoint_every_steps=2000",
                                         "--set", "cluster.timeout_s=5"};
  std::vector<std::string> argv = {kAsgd, "launch", config, "--set", "experiment.epochs=100000"};
  argv.insert(argv.end(), sets.begin(), sets.end());
  std::vector<pid_t> pids;
  {
    Subprocess launch(argv, dir.File("launch.log"));
    WaitForOutput(launch, "coordinator: checkpoint");
    pids = ChildPids(launch.Output());
    ASSERT_EQ(pids.size(), 7u) << launch.Output();
    ::kill(pids[0], SIGKILL);  // the coordinator
    const auto status = launch.Wait(60s);
    ASSERT_TRUE(status.has_value()) << launch.Output();
    EXPECT_NE(*status, 0);
  }
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << "pid " << pid << " survived";
  fs::path run;
  (void)Summary(dir, &run);
  std::vector<std::string> again = {
      kAsgd, "launch", config, "--set", "experiment.epochs=30", "--resume", run.string()};
  again.insert(again.end(), sets.begin(), sets.end());
  Subprocess resumed(again, dir.File("resumed.log"));
  const auto status = resumed.Wait(90s);
  ASSERT_EQ(status.value_or(-1), 0) << resumed.Output();
  EXPECT_THAT(resumed.Output(), HasSubstr("coordinator: resuming"));
  EXPECT_THAT(resumed.Output(), HasSubstr("restored version"));
  const auto summary = Summary(dir);
  EXPECT_EQ(summary.at("status"), "completed");
  EXPECT_GE(std::stod(summary.at("epochs")), 30.0);
  EXPECT_GE(std::stod(summary.at("final_test_accuracy")), 0.8);
  const auto provenance = Provenance(dir);
  EXPECT_EQ(provenance["resumed"].size(), 1u);
  // Every push a shard holds has its row from that shard; those after the checkpoint were
  // dropped on resuming, with their updates. The shards saved themselves one after the
  // other, so a push in flight then (at most one per worker) may be in one shard's saved
  // range and not in the other's: its one row is counted, its update is not.
  const int64_t updates = std::stoll(summary.at("updates"));
  EXPECT_GE(CsvRows(dir, "staleness.csv"), 2 * updates);
  EXPECT_LE(CsvRows(dir, "staleness.csv"), 2 * updates + 3);
}

// The lines of a CSV of the run folder `run` (with its header).
// Open MPI places the ranks: 1 coordinator, 1 shard, 2 workers, all `asgd task`.
TEST(Launch, MpirunRunsOneShardAndTwoWorkers) {
  if (::access("/usr/bin/mpirun", X_OK) != 0) {
    GTEST_SKIP() << "mpirun not installed (Debian's openmpi-bin; ./setup.sh installs it)";
  }
  testing::TempDir dir;
  const std::string config = TrainingConfig(dir, "agn");
  Subprocess mpirun({"/usr/bin/mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "4", kAsgd,
                     "task", "--config", config, "--set", "cluster.shards=1", "--set",
                     "cluster.base_port=" + std::to_string(BasePort())},
                    dir.File("mpirun.log"), {"OMPI_MCA_plm_rsh_agent="});
  const auto status = mpirun.Wait(kTimeout);
  ASSERT_TRUE(status.has_value()) << "mpirun hung:\n" << mpirun.Output();
  EXPECT_EQ(*status, 0) << mpirun.Output();
  EXPECT_THAT(mpirun.Output(), HasSubstr("rank 0 of 4 is coordinator 0"));
  EXPECT_THAT(mpirun.Output(), HasSubstr("rank 3 of 4 is worker 1"));
  auto s = Summary(dir);
  EXPECT_EQ(s["workers"], "2");
  EXPECT_EQ(s["ps_shards"], "1");
  EXPECT_GE(std::stod(s["final_test_accuracy"]), 0.85);
}

// A coordinator answers malformed and unexpected control messages with an error and
// carries on; roles that never register fail the run after cluster.timeout_s (exit 2,
// one line, the run folder kept).
TEST(Launch, CoordinatorRefusesMalformedMessagesAndTimesOutMissingRoles) {
  testing::TempDir dir;
  const int port = BasePort() + 3;
  const std::string config = TrainingConfig(dir, "agn");
  const std::string cluster = "127.0.0.1:" + std::to_string(port);
  Subprocess coordinator({kAsgd, "coordinator", "--config", config, "--set", "cluster.timeout_s=3",
                          "--set", "cluster.coordinator=" + cluster, "--set",
                          "cluster.ps=127.0.0.1:" + std::to_string(port + 1), "--set",
                          "cluster.worker=127.0.0.1:" + std::to_string(port + 2)},
                         dir.File("coordinator.log"));
  auto context = transport::NewContext();
  transport::ControlClient client(context, "tcp://" + cluster);
  auto ask = [&](const std::string& text) {
    for (int i = 0; i < 50; ++i) {  // the coordinator may not be up yet
      if (auto reply = client.Request(text, 200ms)) return *reply;
    }
    return std::string("no reply");
  };
  RegisterRequest stranger{"worker", 7, 1, "x"};  // no worker 7 in a one-worker cluster
  WorkerReport early;                             // worker 0 reports before it registered
  const std::string wrong_version = [] {
    std::string m = Encode(RegisterRequest{"ps", 0, 1, "x"});
    m[m.find("version") + 7] = 2;  // the value after the key: positive fixint 1 -> 2
    return m;
  }();
  for (const std::string& bad :
       {std::string("not msgpack"), std::string("{\"type\": \"register\"}"), Encode(stranger),
        Encode(early), wrong_version, Encode(WorkerReply{}), std::string(100000, '\x80'),
        std::string(100000, '{')}) {
    const std::string reply = ask(bad);
    WorkerReply decoded;
    const ControlError e = DecodeReply(reply, &decoded);
    EXPECT_TRUE(e.refused()) << bad.substr(0, 60) << " -> " << e.message();
  }
  const auto status = coordinator.Wait(kTimeout);
  ASSERT_TRUE(status.has_value()) << coordinator.Output();
  EXPECT_EQ(*status, 2) << coordinator.Output();
  EXPECT_THAT(coordinator.Output(),
              HasSubstr("never registered within cluster.timeout_s: ps 0, worker 0"));
  EXPECT_EQ(Summary(dir)["status"], "failed");
}

}  // namespace
}  // namespace asgd::experiments
