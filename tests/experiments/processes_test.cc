// `asgd ps` and `asgd worker` as real processes on loopback: 2 shard servers and 3
// workers over tcp (cluster from the config) and over ipc (cluster from TF_CONFIG) must
// end with the parameters equal to the initial values plus every push, exactly; a dead
// or mismatched peer is one line and exit status 2; the timed mode counts every push on
// both sides. Every process is ended by PID.
#include <algorithm>
#include <fstream>
#include <limits>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "core/check.h"
#include "tests/support/raw_peer.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;
using testing::Subprocess;
using namespace std::chrono_literals;

const std::string kAsgd = std::string(ASGD_BINARY_DIR) + "/asgd";
constexpr auto kProcessTimeout = 90s;

// Ports below Linux's ephemeral range, spread by PID so concurrent test runs differ.
int BasePort(int slot) {
  return 20000 + static_cast<int>(::getpid() % 2000) * 5 + slot * 10000 / 2;
}

std::string CheckConfig(const testing::TempDir& dir, const std::string& cluster) {
  const std::string path = dir.File("check.ini");
  testing::WriteTestFile(path,
                         "[experiment]\nseed = 3\nlog_level = warning\n"
                         "[data]\ndataset = synthetic\nsynthetic_features = 20\n"
                         "synthetic_classes = 3\n[model]\nname = mlp\nhidden = 40,24\n"
                         "[check]\npushes = 25\n"
                         "[cluster]\n" +
                             cluster);
  return path;
}

// The run's token, as a launcher would hand it to every role: worker 0's stop request
// must carry it for the shard servers to obey it.
const std::string kToken = "ASGD_RUN_TOKEN=processes-test-token";

// Starts 2 ps and 3 worker processes and checks every one ends well.
void RunCluster(const testing::TempDir& dir, const std::string& config,
                const std::vector<std::string>& ps_env,
                const std::vector<std::vector<std::string>>& worker_env, bool pass_task) {
  std::vector<std::unique_ptr<Subprocess>> ps, workers;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> argv = {kAsgd, "ps-check", "ps", "--config", config};
    if (pass_task) argv.insert(argv.end(), {"--task", std::to_string(i)});
    std::vector<std::string> env = {kToken};
    if (!ps_env.empty()) env.push_back(ps_env[static_cast<std::size_t>(i)]);
    ps.push_back(std::make_unique<Subprocess>(argv, dir.File("ps" + std::to_string(i)), env));
  }
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> argv = {kAsgd, "ps-check", "worker", "--config", config};
    if (pass_task) argv.insert(argv.end(), {"--task", std::to_string(i)});
    std::vector<std::string> env;
    if (!worker_env.empty()) env = worker_env[static_cast<std::size_t>(i)];
    env.push_back(kToken);
    workers.push_back(
        std::make_unique<Subprocess>(argv, dir.File("worker" + std::to_string(i)), env));
  }
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const auto status = workers[i]->Wait(kProcessTimeout);
    ASSERT_TRUE(status.has_value()) << "worker " << i << " hung:\n" << workers[i]->Output();
    EXPECT_EQ(*status, 0) << workers[i]->Output();
    EXPECT_THAT(workers[i]->Output(), HasSubstr("plus 3 x 25 pushes exactly"));
  }
  // Worker 0 stopped the servers.
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const auto status = ps[i]->Wait(kProcessTimeout);
    ASSERT_TRUE(status.has_value()) << "ps " << i << " did not stop:\n" << ps[i]->Output();
    EXPECT_EQ(*status, 0) << ps[i]->Output();
    EXPECT_THAT(ps[i]->Output(), HasSubstr("stopped at version 75"));  // 3 workers x 25
    EXPECT_THAT(ps[i]->Output(), HasSubstr("0 error replies"));
  }
}

TEST(Processes, TwoShardsThreeWorkersOverTcpAreExact) {
  testing::TempDir dir;
  const int port = BasePort(0);
  const std::string cluster = ::asgd::internal::StrCat(
      "placement = greedy\nps = 127.0.0.1:", port, ",127.0.0.1:", port + 1,
      "\nworker = 127.0.0.1:", port + 2, ",127.0.0.1:", port + 3, ",127.0.0.1:", port + 4, "\n");
  RunCluster(dir, CheckConfig(dir, cluster), {}, {}, /*pass_task=*/true);
}

TEST(Processes, TwoShardsThreeWorkersOverIpcFromTfConfigAreExact) {
  testing::TempDir dir;
  const std::string config = CheckConfig(dir, "placement = partition\n");
  const std::string cluster = "{\"ps\": [\"ipc://" + dir.File("ps0") + ".sock\", \"ipc://" +
                              dir.File("ps1") + ".sock\"], \"worker\": [\"ipc://" + dir.File("w0") +
                              ".sock\", \"ipc://" + dir.File("w1") + ".sock\", \"ipc://" +
                              dir.File("w2") + ".sock\"]}";
  auto tf = [&](const std::string& type, int index) {
    return "TF_CONFIG={\"cluster\": " + cluster + ", \"task\": {\"type\": \"" + type +
           "\", \"index\": " + std::to_string(index) + "}}";
  };
  RunCluster(dir, config, {tf("ps", 0), tf("ps", 1)},
             {{tf("worker", 0)}, {tf("worker", 1)}, {tf("worker", 2)}}, /*pass_task=*/false);
}

// The sum of the numbers `pattern`'s first group matches in text, and how many matched.
std::pair<int64_t, int> SumMatches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  int64_t sum = 0;
  int matches = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it) {
    sum += std::stoll((*it)[1].str());
    ++matches;
  }
  return {sum, matches};
}

// ps-check's timed mode (what benchmarks/soak.py runs for 10 minutes): 2 workers push to
// 2 shards over tcp for 2 s. The sum is exact, every shard counted every worker's pushes
// exactly (checked by the workers), each shard's pushes applied equal the workers' pushes
// summed, and both sides printed progress lines.
TEST(Processes, TimedCheckOverTcpCountsEveryPushOnBothSides) {
  testing::TempDir dir;
  const int port = BasePort(1) + 2;  // BasePort(1)'s test binds only its first port
  const std::string config = CheckConfig(
      dir,
      ::asgd::internal::StrCat("placement = even\nps = 127.0.0.1:", port, ",127.0.0.1:", port + 1,
                               "\nworker = 127.0.0.1:", port + 2, ",127.0.0.1:", port + 3, "\n"));
  const std::vector<std::string> timed = {"--set", "check.seconds=2", "--set",
                                          "check.report_every_s=0.5"};
  auto start = [&](const std::string& role, int i) {
    std::vector<std::string> argv = {kAsgd,    "ps-check",       role, "--config", config,
                                     "--task", std::to_string(i)};
    argv.insert(argv.end(), timed.begin(), timed.end());
    return std::make_unique<Subprocess>(argv, dir.File(role + std::to_string(i)),
                                        std::vector<std::string>{kToken});
  };
  std::vector<std::unique_ptr<Subprocess>> ps, workers;
  for (int i = 0; i < 2; ++i) ps.push_back(start("ps", i));
  for (int i = 0; i < 2; ++i) workers.push_back(start("worker", i));

  int64_t pushed = 0;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const auto status = workers[i]->Wait(kProcessTimeout);
    ASSERT_TRUE(status.has_value()) << "worker " << i << " hung:\n" << workers[i]->Output();
    const std::string out = workers[i]->Output();
    EXPECT_EQ(*status, 0) << out;
    EXPECT_THAT(out, HasSubstr("pushes exactly, and every shard applied each of this worker"));
    const auto [done, done_lines] = SumMatches(out, R"(done: pushes=(\d+))");
    EXPECT_EQ(done_lines, 1) << out;
    EXPECT_GT(done, 0) << out;
    pushed += done;
    // Lines at the start, at least 3 half-second ticks in 2 s, and at the end.
    EXPECT_GE(SumMatches(out, R"(progress: unix_s=[0-9.]+ pushes=(\d+))").second, 5) << out;
  }
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const auto status = ps[i]->Wait(kProcessTimeout);
    ASSERT_TRUE(status.has_value()) << "ps " << i << " did not stop:\n" << ps[i]->Output();
    const std::string out = ps[i]->Output();
    EXPECT_EQ(*status, 0) << out;
    EXPECT_EQ(SumMatches(out, R"(\((\d+) pushes applied)"), std::make_pair(pushed, 1)) << out;
    EXPECT_THAT(out, HasSubstr("0 error replies"));
    EXPECT_GE(SumMatches(out, R"(progress: unix_s=[0-9.]+ pushes_applied=(\d+))").second, 5) << out;
  }
}

// Issue 22 item 6: a shard server on every interface (bind_host = *) without CURVE
// refuses to start, in one line naming the key that would allow it, exit 2 — both the
// standalone `asgd ps-check ps` server and a training run's shard.
TEST(Processes, PlainTcpOnEveryInterfaceIsRefusedUnlessAllowed) {
  testing::TempDir dir;
  const int port = BasePort(1) + 7;
  const std::string config =
      CheckConfig(dir, ::asgd::internal::StrCat("bind_host = *\nps = 127.0.0.1:", port,
                                                "\nworker = 127.0.0.1:", port + 1,
                                                "\ncoordinator = 127.0.0.1:", port + 2, "\n"));
  for (const bool check : {true, false}) {
    SCOPED_TRACE(check ? "ps-check ps" : "ps");
    std::vector<std::string> argv = {kAsgd, "ps", "--config", config, "--task", "0"};
    if (check) argv.insert(argv.begin() + 1, "ps-check");
    if (!check) argv.insert(argv.end(), {"--set", "algorithm.name=async_sgd"});
    Subprocess ps(argv, dir.File(check ? "ps-check" : "ps"));
    const auto status = ps.Wait(kProcessTimeout);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(*status, 2);
    const std::string out = ps.Output();
    EXPECT_THAT(out, HasSubstr("cluster.allow_plain_remote"));
    EXPECT_THAT(out, HasSubstr("CURVE"));
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
}

TEST(Processes, WorkerWithoutServersIsOneLineAndExitTwo) {
  testing::TempDir dir;
  const int port = BasePort(1);
  const std::string config = CheckConfig(
      dir,
      ::asgd::internal::StrCat("ps = 127.0.0.1:", port, "\nworker = 127.0.0.1:", port + 1, "\n"));
  Subprocess worker({kAsgd, "ps-check", "worker", "--config", config, "--set",
                     "cluster.timeout_s=0.5", "--task", "0"},
                    dir.File("worker"));
  const auto status = worker.Wait(kProcessTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 2);
  const std::string out = worker.Output();
  EXPECT_THAT(out, HasSubstr("waiting for the shard servers"));
  EXPECT_THAT(out, HasSubstr(std::to_string(port)));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
}

TEST(Processes, PsStopsCleanlyOnSigterm) {
  testing::TempDir dir;
  const std::string config = CheckConfig(
      dir, "ps = ipc://" + dir.File("ps.sock") + "\nworker = ipc://" + dir.File("w.sock") + "\n");
  Subprocess ps({kAsgd, "ps-check", "ps", "--config", config, "--task", "0"}, dir.File("ps"));
  for (int i = 0; i < 500 && ps.Output().find("serving") == std::string::npos; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_THAT(ps.Output(), HasSubstr("serving"));
  ps.Signal(SIGTERM);
  const auto status = ps.Wait(kProcessTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0) << ps.Output();
  EXPECT_THAT(ps.Output(), HasSubstr("stopped at version 0"));
}

// The resident set of process pid, in bytes (Linux), or -1.
int64_t ResidentBytesOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// The value of `key=` in text's last "ps 0 bounds:" line, or -1.
int64_t BoundsCounter(const std::string& text, const std::string& key) {
  const std::size_t line = text.rfind("ps 0 bounds:");
  if (line == std::string::npos) return -1;
  const std::size_t at = text.find(" " + key + "=", line);
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + key.size() + 2));
}

// Issue 22 item 6: ps-check's worker 0 stops its servers with the run's token; a worker
// with another token cannot stop them (its stop is refused and it says so, exit 2), and
// the server serves on until SIGTERM.
TEST(Processes, StopWithoutTheRunsTokenIsRefused) {
  testing::TempDir dir;
  const std::string config = CheckConfig(
      dir, "ps = ipc://" + dir.File("ps.sock") + "\nworker = ipc://" + dir.File("w.sock") + "\n");
  Subprocess ps({kAsgd, "ps-check", "ps", "--config", config, "--task", "0"}, dir.File("ps"),
                {"ASGD_RUN_TOKEN=the-servers-token"});
  Subprocess worker({kAsgd, "ps-check", "worker", "--config", config, "--task", "0"},
                    dir.File("worker"), {"ASGD_RUN_TOKEN=another-token"});
  const auto worker_status = worker.Wait(kProcessTimeout);
  ASSERT_TRUE(worker_status.has_value()) << worker.Output();
  EXPECT_EQ(*worker_status, 2) << worker.Output();
  EXPECT_THAT(worker.Output(), HasSubstr("plus 1 x 25 pushes exactly"));
  EXPECT_THAT(worker.Output(), HasSubstr("stopping the servers"));
  std::this_thread::sleep_for(200ms);
  EXPECT_THAT(ps.Output(), ::testing::Not(HasSubstr("stopped at")));
  ps.Signal(SIGTERM);
  const auto status = ps.Wait(kProcessTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0) << ps.Output();
  EXPECT_THAT(ps.Output(), HasSubstr("stopped at version 25"));
  EXPECT_THAT(ps.Output(), HasSubstr("1 error replies"));                    // the refused stop
  EXPECT_EQ(BoundsCounter(ps.Output(), "stops_refused"), 1) << ps.Output();  // its last line
}

// Issue 22, against both `ps` roles (tests/transport/bounds_test.cc covers the
// ShardServer itself): the shard of an async_sgd run (with its coordinator) and ps-check's
// standalone shard, each with a raw ZeroMQ peer as the hostile client. The shard binds
// every interface (bind_host = *) with cluster.allow_plain_remote = true: the key lets a
// plain server start off loopback (PlainTcpOnEveryInterfaceIsRefusedUnlessAllowed shows
// the refusal without it). The peer connects over 127.0.0.1; the server lives about a
// second on a port spread by PID, serving a synthetic model, and no test peer but this
// one knows it. Checked: a push of zero elements and an overflowing push are refused
// (shard unchanged), a stop without the run's token is refused, and pull replies the
// peer never reads stay within cluster.max_queued_reply_bytes (counted, RSS bounded); the
// ps role's last line reports those counters.
// training: an async_sgd run's ps (`asgd ps`); else `asgd ps-check ps`.
void CheckPsRefusesAndBoundsWhatAPeerSends(bool training, int port) {
  SCOPED_TRACE(training ? "asgd ps" : "asgd ps-check ps");
  testing::TempDir dir;
  constexpr int64_t kBudget = 64 << 10;
  const std::string config = dir.File("train.ini");
  testing::WriteTestFile(
      config, ::asgd::internal::StrCat(
                  "[experiment]\nname = bounds\nlog_level = warning\nout_dir = ", dir.File("runs"),
                  "\n[data]\ndataset = synthetic\nsynthetic_train = 500\nsynthetic_test = 100\n"
                  "synthetic_classes = 3\nsynthetic_features = 16\n[model]\nname = mlp\n"
                  "hidden = 256\n[algorithm]\nname = async_sgd\nworkers = 1\n"
                  "[cluster]\ncoordinator = 127.0.0.1:",
                  port, "\nps = 127.0.0.1:", port + 1, "\nworker = 127.0.0.1:", port + 2,
                  "\ntimeout_s = 30\nbind_host = *\nallow_plain_remote = true\n"
                  "max_queued_reply_bytes = ",
                  kBudget, "\n"));
  const std::vector<std::string> env = {"ASGD_RUN_TOKEN=the-runs-token"};
  // The training ps registers with the coordinator before it serves; ps-check's has none.
  std::optional<Subprocess> coordinator;
  if (training)
    coordinator.emplace(std::vector<std::string>{kAsgd, "coordinator", "--config", config},
                        dir.File("coordinator"), env);
  std::vector<std::string> ps_argv = {kAsgd, "ps", "--config", config, "--task", "0"};
  if (!training) ps_argv.insert(ps_argv.begin() + 1, "ps-check");
  Subprocess ps(ps_argv, dir.File("ps"), env);
  for (int i = 0; i < 500 && ps.Output().find("serving") == std::string::npos; ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_THAT(ps.Output(), HasSubstr("serving"))
      << ps.Output() << (coordinator ? coordinator->Output() : "");
  constexpr int64_t kShardSize = 16 * 256 + 256 + 256 * 3 + 3;

  zmq::context_t zmq_context;
  const std::string endpoint = ::asgd::internal::StrCat("tcp://127.0.0.1:", port + 1);
  zmq::socket_t peer = testing::Dealer(zmq_context, endpoint, 1000);
  uint64_t id = 0;
  // A push of zero elements would advance the version for nothing.
  ps::Header empty = testing::Request(ps::Op::kPush, 0, ++id);
  empty.frames = 0;
  empty.payload_bytes = 0;
  testing::Send(peer, empty);
  std::optional<ps::Header> h = testing::Receive(peer);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->op, ps::Op::kError);
  EXPECT_EQ(h->code, ps::ErrorCode::kMalformedHeader) << h->message;
  // FLT_MAX twice overflows the add: refused as non_finite, the shard unchanged.
  const std::vector<float> big(kShardSize, std::numeric_limits<float>::max());
  for (int i = 0; i < 2; ++i) {
    testing::Send(peer, testing::Request(ps::Op::kPush, kShardSize, ++id), &big);
    h = testing::Receive(peer);
    ASSERT_TRUE(h.has_value());
    if (i == 0) {
      EXPECT_EQ(h->op, ps::Op::kPush) << h->message;
    } else {
      EXPECT_EQ(h->op, ps::Op::kError);
      EXPECT_EQ(h->code, ps::ErrorCode::kNonFinite) << h->message;
    }
  }
  // A stop without the run's token is refused; the server serves on.
  ps::Header stop = testing::Request(ps::Op::kStop, 0, ++id);
  stop.message = "not-the-token";
  testing::Send(peer, stop);
  h = testing::Receive(peer);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->op, ps::Op::kError);
  testing::Send(peer, testing::Request(ps::Op::kPull, kShardSize, ++id));
  std::vector<float> values;
  h = testing::Receive(peer, &values);
  ASSERT_TRUE(h.has_value());
  ASSERT_EQ(h->op, ps::Op::kPull) << h->message;
  EXPECT_EQ(h->version, 1u);  // the first push only
  ASSERT_EQ(values.size(), static_cast<std::size_t>(kShardSize));
  for (const float v : values) ASSERT_TRUE(std::isfinite(v));

  // A peer that pulls 3,000 times and never reads: 3,000 x 20 KiB = 60 MiB unbounded.
  const int64_t rss_before = ResidentBytesOf(ps.pid());
  zmq::socket_t stuck = testing::Dealer(zmq_context, endpoint, /*receive_hwm=*/1);
  for (int i = 0; i < 3000; ++i) {
    testing::Send(stuck, testing::Request(ps::Op::kPull, kShardSize, ++id));
    if (::testing::Test::HasFatalFailure()) return;
  }
  // The server has read them all once a reading peer's request after them is answered.
  testing::Send(peer, testing::Request(ps::Op::kPull, kShardSize, ++id));
  h = testing::Receive(peer, &values);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->op, ps::Op::kPull) << h->message;
  const int64_t rss_after = ResidentBytesOf(ps.pid());
  EXPECT_LT(rss_after - rss_before, 24 << 20) << rss_before << " -> " << rss_after;

  ps.Signal(SIGTERM);
  const auto status = ps.Wait(kProcessTimeout);
  ASSERT_TRUE(status.has_value()) << ps.Output();
  const std::string out = ps.Output();
  EXPECT_GT(BoundsCounter(out, "replies_over_budget"), 0) << out;
  EXPECT_GE(BoundsCounter(out, "replies_dropped"), BoundsCounter(out, "replies_over_budget"));
  // queued_reply_bytes sums every peer's, and libzmq may still hold the reading peer's last
  // reply: at most a budget each. The stuck peer's own bytes are in the log line.
  EXPECT_LE(BoundsCounter(out, "queued_reply_bytes"), 2 * kBudget) << out;
  const std::size_t held = out.find("a peer holds ");
  ASSERT_NE(held, std::string::npos) << out;
  EXPECT_LE(std::stoll(out.substr(held + 13)), kBudget) << out;
  EXPECT_EQ(BoundsCounter(out, "stops_refused"), 1) << out;
  EXPECT_EQ(BoundsCounter(out, "non_finite_refused"), 1) << out;
  EXPECT_THAT(out, HasSubstr("cluster.max_queued_reply_bytes"));  // the log line's key
  if (coordinator) {
    coordinator->Signal(SIGTERM);
    EXPECT_TRUE(coordinator->Wait(kProcessTimeout).has_value()) << coordinator->Output();
  }
}

TEST(Processes, TrainingPsRefusesAndBoundsWhatAPeerSends) {
  CheckPsRefusesAndBoundsWhatAPeerSends(/*training=*/true, BasePort(1) + 20);
}

TEST(Processes, PsCheckPsRefusesAndBoundsWhatAPeerSends) {
  CheckPsRefusesAndBoundsWhatAPeerSends(/*training=*/false, BasePort(1) + 25);
}

// A worker whose model differs from the servers' learns it when it registers.
TEST(Processes, MismatchedModelIsDetectedAtRegistration) {
  testing::TempDir dir;
  const std::string config = CheckConfig(
      dir, "ps = ipc://" + dir.File("ps.sock") + "\nworker = ipc://" + dir.File("w.sock") + "\n");
  Subprocess ps({kAsgd, "ps-check", "ps", "--config", config, "--task", "0"}, dir.File("ps"));
  Subprocess worker({kAsgd, "ps-check", "worker", "--config", config, "--task", "0", "--set",
                     "model.hidden=40,25"},
                    dir.File("worker"));
  const auto status = worker.Wait(kProcessTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 2) << worker.Output();
  EXPECT_THAT(worker.Output(), HasSubstr("placement"));
  ps.Signal(SIGTERM);
  EXPECT_EQ(ps.Wait(kProcessTimeout), std::optional<int>(0)) << ps.Output();
}

}  // namespace
}  // namespace asgd::experiments
