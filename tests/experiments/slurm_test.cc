// `asgd sweep --backend slurm`, `collect` and `asgd task` under srun against a real,
// private single-node SLURM (tests/slurm/slurm_fixture.sh: munged, slurmctld and slurmd
// on 127.0.0.1 with their own ports and files under the test's temporary folder). Every
// test starts its own cluster and stops every daemon by PID; where SLURM cannot start
// here (not root, packages absent) the test is skipped with the reason. The node needs no
// cgroups, so it also starts in a container or chroot without /sys/fs/cgroup.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "core/file_util.h"
#include "core/strings.h"
#include "experiments/record/csv.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::Subprocess;
using namespace std::chrono_literals;

const std::string kAsgd = std::string(ASGD_BINARY_DIR) + "/asgd";
const std::string kFixture = ASGD_SLURM_FIXTURE;
constexpr auto kToolTimeout = 30s;

// The path of program on PATH, or "".
std::string Which(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (const auto& d : Split(path, ':')) {
    const std::string p = d + "/" + program;
    if (!d.empty() && ::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

struct Result {
  int status = -1;
  std::string output;
};

// Runs argv (argv[0] looked up on PATH unless it is a path) to its end, its output in a
// fresh file named after log.
Result Exec(std::vector<std::string> argv, const std::string& log,
            std::chrono::milliseconds timeout = kToolTimeout) {
  if (argv[0].find('/') == std::string::npos) argv[0] = Which(argv[0]);
  static int calls = 0;  // a fresh output file per call
  Subprocess p(argv, log + "." + std::to_string(++calls));
  const auto status = p.Wait(timeout);
  return {status ? *status : -1, p.Output() + (status ? "" : "\n(timed out)")};
}

// A private cluster for one test: started in SetUp (or the test skipped), stopped by PID
// in TearDown. Clients (and the asgd processes the test starts) find it through
// SLURM_CONF, set in this process's environment.
class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    // This process as the owner: if ctest kills it on a timeout, the fixture's watchdog
    // stops the daemons by PID (TearDown never runs then).
    const Result r =
        Exec({"/bin/bash", kFixture, "start", cluster_.path(), std::to_string(::getpid())},
             dir_.File("fixture.log"), 90s);
    if (r.status == 77) GTEST_SKIP() << r.output;
    started_ = true;
    ASSERT_EQ(r.status, 0) << "the SLURM fixture did not start:\n" << r.output;
    ::setenv("SLURM_CONF", (cluster_.path() + "/slurm.conf").c_str(), 1);
  }
  void TearDown() override {
    if (started_) Exec({"/bin/bash", kFixture, "stop", cluster_.path()}, dir_.File("stop.log"));
    ::unsetenv("SLURM_CONF");
  }

  // A run of about a second.
  std::string TinyConfig() {
    const std::string path = dir_.File("tiny.ini");
    testing::WriteTestFile(path,
                           "[experiment]\nname = tiny\nepochs = 2\nlog_level = warning\n"
                           "[data]\ndataset = synthetic\nsynthetic_train = 2000\n"
                           "synthetic_test = 400\nsynthetic_features = 16\n"
                           "[model]\nname = mlp\nhidden = 16\n"
                           "[algorithm]\nname = agn\nworkers = 2\nwindow = 2\n");
    return path;
  }

  // The job id `asgd sweep --backend slurm` wrote (a tune's edge rounds: into sub).
  std::string JobId(const std::string& sweep, const std::string& sub = "slurm") {
    std::ifstream in(sweep + "/" + sub + "/job_id");
    std::string id;
    in >> id;
    return id;
  }

  // Waits until SLURM no longer lists any task of job (bounded); false on timeout.
  bool WaitForJob(const std::string& job, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      const Result q = Exec({"squeue", "-h", "-r", "-j", job, "-o", "%i"}, dir_.File("squeue.log"));
      if (q.status == 0 && Trim(q.output).empty()) return true;
      std::this_thread::sleep_for(500ms);
    }
    return false;
  }

  testing::TempDir dir_;
  testing::TempDir cluster_;
  bool started_ = false;
};

// 2 x 2 grid points x 2 seeds = an array of 8 tasks; collect finds all 8 runs and writes
// the sweep tables.
TEST_F(Slurm, SweepAsJobArrayCompletesAndCollectReportsEveryRun) {
  const std::string sweep = dir_.File("sweep");
  const Result submit =
      Exec({kAsgd, "sweep", TinyConfig(), "--grid", "algorithm.learning_rate=0.05,0.1", "--grid",
            "algorithm.window=1,2", "--seeds", "2", "--parallel", "4", "--backend", "slurm",
            "--out", sweep},
           dir_.File("submit.log"));
  ASSERT_EQ(submit.status, 0) << submit.output;
  EXPECT_THAT(submit.output, HasSubstr("submitted job "));
  const std::string job = JobId(sweep);
  ASSERT_FALSE(job.empty());
  std::ifstream script(sweep + "/slurm/array.sbatch");
  std::stringstream text;
  text << script.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("#SBATCH --array=0-7%4\n"));
  ASSERT_TRUE(WaitForJob(job, 50s)) << "job " << job << " did not end";

  const Result collect =
      Exec({kAsgd, "sweep", "collect", sweep, "--no-plots"}, dir_.File("collect.log"));
  EXPECT_EQ(collect.status, 0) << collect.output;
  EXPECT_THAT(collect.output,
              HasSubstr("sweep collect: 8 of 8 runs completed, 0 failed, 0 missing"));
  std::ifstream csv(sweep + "/sweep.csv");
  std::string line;
  std::getline(csv, line);
  const auto header = ParseCsvLine(line);
  const auto runs_col = std::find(header.begin(), header.end(), "runs") - header.begin();
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    EXPECT_EQ(ParseCsvLine(line).at(static_cast<std::size_t>(runs_col)), "2") << line;
  }
  EXPECT_EQ(rows, 4);
  EXPECT_EQ(std::distance(fs::directory_iterator(sweep + "/runs"), {}), 8);
}

// --srun: each run of the sweep is a distributed run, `srun asgd task` with one SLURM task
// per role (coordinator, 1 shard, 2 workers), its ports apart from the other runs'; the
// array completes and collect finds both runs, each with 2 workers and 1 shard.
TEST_F(Slurm, SweepOfDistributedRunsUsesSrunTasks) {
  const std::string config = dir_.File("dist.ini");
  testing::WriteTestFile(config,
                         ReadFile(TinyConfig()) + "[cluster]\nshards = 1\ntimeout_s = 20\n");
  const std::string sweep = dir_.File("sweep");
  const int base_port = 27600 + static_cast<int>(::getpid() % 1000) * 8;
  // --overcommit: 4 tasks on a node with 2 cores; --parallel 1: one run at a time.
  const Result submit =
      Exec({kAsgd, "sweep", config, "--grid", "algorithm.learning_rate=0.05,0.1", "--set",
            "cluster.base_port=" + std::to_string(base_port), "--parallel", "1", "--backend",
            "slurm", "--srun", "--sbatch=--overcommit", "--out", sweep},
           dir_.File("submit.log"));
  ASSERT_EQ(submit.status, 0) << submit.output;
  const std::string tasks = ReadFile(sweep + "/slurm/tasks.txt");
  EXPECT_THAT(tasks, HasSubstr("srun --ntasks=4 "));
  EXPECT_THAT(tasks, HasSubstr(" task --config "));
  EXPECT_THAT(tasks, HasSubstr("cluster.base_port=" + std::to_string(base_port) + " "));
  EXPECT_THAT(tasks, HasSubstr("cluster.base_port=" + std::to_string(base_port + 4) + " "));
  EXPECT_THAT(ReadFile(sweep + "/slurm/array.sbatch"), HasSubstr("#SBATCH --ntasks=4\n"));
  const std::string job = JobId(sweep);
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitForJob(job, 80s)) << "job " << job << " did not end";

  const Result collect =
      Exec({kAsgd, "sweep", "collect", sweep, "--no-plots"}, dir_.File("collect.log"));
  EXPECT_EQ(collect.status, 0) << collect.output
                               << ReadFile(sweep + "/logs/learning_rate_0.05-s1.log");
  EXPECT_THAT(collect.output,
              HasSubstr("sweep collect: 2 of 2 runs completed, 0 failed, 0 missing"));
  for (const auto& run : fs::directory_iterator(sweep + "/runs")) {
    const std::string summary = ReadFile((run.path() / "summary.csv").string());
    std::istringstream in(summary);
    std::string header, row;
    std::getline(in, header);
    std::getline(in, row);
    const auto names = ParseCsvLine(header), cells = ParseCsvLine(row);
    std::map<std::string, std::string> s;
    for (std::size_t i = 0; i < names.size() && i < cells.size(); ++i) s[names[i]] = cells[i];
    EXPECT_EQ(s["workers"], "2") << run.path();
    EXPECT_EQ(s["ps_shards"], "1") << run.path();
    EXPECT_EQ(s["transport"], "tcp") << run.path();
  }
}

// A task cancelled before it ran is reported as missing and counted, and collect exits 2;
// the other runs are still aggregated. (Without accounting storage, as here, SLURM drops a
// pending task it cancelled from the array's record, so the line says SLURM no longer
// knows it; with sacct it gives the state.)
TEST_F(Slurm, CancelledTaskIsReportedMissing) {
  const std::string sweep = dir_.File("sweep");
  const Result submit =
      Exec({kAsgd, "sweep", TinyConfig(), "--grid", "algorithm.learning_rate=0.05,0.1", "--seeds",
            "2", "--backend", "slurm", "--sbatch=--hold", "--out", sweep},
           dir_.File("submit.log"));
  ASSERT_EQ(submit.status, 0) << submit.output;
  const std::string job = JobId(sweep);
  ASSERT_FALSE(job.empty());
  const Result cancel = Exec({"scancel", job + "_1"}, dir_.File("scancel.log"));
  ASSERT_EQ(cancel.status, 0) << cancel.output;
  const Result release = Exec({"scontrol", "release", job}, dir_.File("release.log"));
  ASSERT_EQ(release.status, 0) << release.output;
  ASSERT_TRUE(WaitForJob(job, 50s)) << "job " << job << " did not end";

  const Result collect =
      Exec({kAsgd, "sweep", "collect", sweep, "--no-plots"}, dir_.File("collect.log"));
  EXPECT_EQ(collect.status, 2) << collect.output;
  EXPECT_THAT(collect.output,
              HasSubstr("sweep collect: 3 of 4 runs completed, 0 failed, 1 missing"));
  EXPECT_THAT(collect.output, HasSubstr("MISSING (array task " + job + "_1"));
  EXPECT_THAT(collect.output, HasSubstr("1 of 4 runs failed"));
  EXPECT_TRUE(fs::exists(sweep + "/sweep.csv"));
}

// `srun -n 4 asgd task`: rank 0 the coordinator, rank 1 the one shard, ranks 2 and 3 the
// workers, on 127.0.0.1; the run trains to a usable accuracy.
TEST_F(Slurm, SrunTaskTrainsDistributedRun) {
  const std::string config = dir_.File("train.ini");
  testing::WriteTestFile(
      config, "[experiment]\nname = launched\nepochs = 3\nlog_level = warning\nout_dir = " +
                  dir_.File("runs") +
                  "\n[data]\ndataset = synthetic\nsynthetic_train = 3000\nsynthetic_test = 600\n"
                  "synthetic_classes = 3\nsynthetic_features = 16\n[model]\nname = mlp\n"
                  "hidden = 16\n[algorithm]\nname = agn\nwindow = 2\nlearning_rate = 0.1\n"
                  "[cluster]\nshards = 1\ntimeout_s = 20\n");
  const int base_port = 26000 + static_cast<int>(::getpid() % 1500) * 6;
  // -O: more tasks than the node's cores (a 2-core machine).
  const Result srun = Exec({"srun", "-n", "4", "-O", "--time=2", kAsgd, "task", "--config", config,
                            "--set", "cluster.base_port=" + std::to_string(base_port), "--set",
                            "cluster.hosts=127.0.0.1,127.0.0.1,127.0.0.1,127.0.0.1"},
                           dir_.File("srun.log"), 60s);
  ASSERT_EQ(srun.status, 0) << srun.output;
  EXPECT_THAT(srun.output, HasSubstr("slurm rank 0 of 4 is coordinator 0"));
  EXPECT_THAT(srun.output, HasSubstr("slurm rank 1 of 4 is ps 0"));
  EXPECT_THAT(srun.output, HasSubstr("slurm rank 3 of 4 is worker 1"));
  std::vector<fs::path> runs(fs::directory_iterator(dir_.File("runs")), {});
  ASSERT_EQ(runs.size(), 1u);
  std::ifstream in(runs[0] / "summary.csv");
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  const auto names = ParseCsvLine(header), cells = ParseCsvLine(row);
  std::map<std::string, std::string> s;
  for (std::size_t i = 0; i < names.size() && i < cells.size(); ++i) s[names[i]] = cells[i];
  EXPECT_EQ(s["workers"], "2");
  EXPECT_EQ(s["ps_shards"], "1");
  EXPECT_EQ(s["status"], "completed");
  EXPECT_GE(std::stod(s["final_test_accuracy"]), 0.8);
}

// `asgd suite --backend slurm` submitted for real: two [run]s become an array of two
// tasks; `suite collect` finds both runs and writes the comparison under their labels.
TEST_F(Slurm, SuiteAsJobArrayCompletesAndCollectComparesIt) {
  TinyConfig();
  const std::string suite = dir_.File("suite.ini");
  testing::WriteTestFile(suite,
                         "[suite]\nname = s\n\n[run agn]\nconfig = tiny.ini\n\n"
                         "[run sgd]\nconfig = tiny.ini\nset = algorithm.name=sgd; "
                         "algorithm.workers=1\n");
  const std::string out = dir_.File("suite");
  const Result submit =
      Exec({kAsgd, "suite", suite, "--backend", "slurm", "--out", out}, dir_.File("submit.log"));
  ASSERT_EQ(submit.status, 0) << submit.output;
  EXPECT_THAT(submit.output, HasSubstr("submitted job "));
  const std::string job = JobId(out);
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitForJob(job, 50s)) << "job " << job << " did not end";
  const Result collect =
      Exec({kAsgd, "suite", "collect", out, "--no-plots"}, dir_.File("collect.log"));
  EXPECT_EQ(collect.status, 0) << collect.output;
  EXPECT_THAT(collect.output, HasSubstr("2 of 2 runs completed, 0 failed, 0 missing"));
  const std::string comparison = ReadFile(out + "/comparison.csv");
  EXPECT_THAT(comparison, HasSubstr("\nagn,"));
  EXPECT_THAT(comparison, HasSubstr("\nsgd,"));
}

// `asgd tune --backend slurm`: every value x seed as one array; with two values the best is
// always on an edge, so the first collect submits the edge round's array itself, and the
// second collect, once that has ended, chooses the value.
TEST_F(Slurm, TuneSubmitsItsEdgeRoundAndCollectChoosesTheValue) {
  const std::string out = dir_.File("tune");
  const Result submit =
      Exec({kAsgd, "tune", TinyConfig(), "--grid", "algorithm.learning_rate=0.02,0.05", "--metric",
            "final_accuracy", "--seeds", "2", "--extend", "1", "--parallel", "4", "--backend",
            "slurm", "--out", out},
           dir_.File("submit.log"));
  ASSERT_EQ(submit.status, 0) << submit.output;
  EXPECT_THAT(submit.output, HasSubstr("4 runs (1 point x 2 values x 2 seeds)"));
  const std::string job = JobId(out);
  ASSERT_FALSE(job.empty());
  ASSERT_TRUE(WaitForJob(job, 60s)) << "job " << job << " did not end";
  const Result first = Exec({kAsgd, "tune", "collect", out, "--no-plots"}, dir_.File("c1.log"));
  EXPECT_EQ(first.status, 2) << first.output;
  EXPECT_THAT(first.output, HasSubstr("4 of 4 runs completed"));
  EXPECT_THAT(first.output, HasSubstr("edge round 1: 2 runs as a SLURM job array"));
  EXPECT_THAT(first.output, HasSubstr("collect again once they end"));
  const std::string edge = JobId(out, "slurm-edge1");
  ASSERT_FALSE(edge.empty()) << first.output;
  ASSERT_TRUE(WaitForJob(edge, 60s)) << "job " << edge << " did not end";
  const Result second = Exec({kAsgd, "tune", "collect", out, "--no-plots"}, dir_.File("c2.log"));
  EXPECT_EQ(second.status, 0) << second.output;
  EXPECT_THAT(second.output, HasSubstr("tune: best learning_rate="));
  const std::string csv = ReadFile(out + "/tune.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7);  // a header and 6 runs
}

// The fixture's watchdog: when the owner process is gone (here a sleep the test kills; in
// real use the test process killed by a ctest timeout), every daemon is stopped by PID.
TEST(SlurmFixture, DaemonsStopWhenTheOwnerIsKilled) {
  testing::TempDir dir, cluster;
  Subprocess owner({"/bin/sleep", "600"}, dir.File("owner.log"));
  const Result r =
      Exec({"/bin/bash", kFixture, "start", cluster.path(), std::to_string(owner.pid())},
           dir.File("fixture.log"), 90s);
  if (r.status == 77) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<pid_t> daemons;
  for (const char* name : {"slurmd", "slurmctld", "munged"}) {
    const std::string text(Trim(ReadFile(cluster.path() + "/run/" + name + ".pid")));
    ASSERT_FALSE(text.empty()) << name;
    daemons.push_back(static_cast<pid_t>(std::stol(text)));
    EXPECT_EQ(::kill(daemons.back(), 0), 0) << name << " is not running";
  }
  owner.Signal(SIGKILL);
  ASSERT_TRUE(owner.Wait(10s).has_value());
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  auto alive = [&] {
    return std::count_if(daemons.begin(), daemons.end(), [](pid_t p) { return ::kill(p, 0) == 0; });
  };
  while (alive() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(200ms);
  EXPECT_EQ(alive(), 0) << ReadFile(cluster.path() + "/log/watchdog.log");
  // Stopped either way, in case the watchdog failed.
  Exec({"/bin/bash", kFixture, "stop", cluster.path()}, dir.File("stop.log"));
}

// In a root without the cgroup file system (a container or a chroot; here a private mount
// namespace whose /sys/fs/cgroup is unmounted, the machine's own mounts untouched) the
// fixture's node still starts and runs a job step: it uses no cgroups.
TEST(SlurmFixture, StartsAndRunsAStepWithoutCgroups) {
  testing::TempDir dir, cluster;
  const Result check = Exec({"/bin/bash", kFixture, "check"}, dir.File("check.log"));
  if (check.status == 77) GTEST_SKIP() << "SLURM cannot start here: " << check.output;
  const std::string unshare = Which("unshare");
  if (unshare.empty()) GTEST_SKIP() << "unshare (util-linux) absent";
  const Result probe =
      Exec({unshare, "--mount", "--propagation", "private", "/bin/true"}, dir.File("probe.log"));
  if (probe.status != 0) GTEST_SKIP() << "no private mount namespace here: " << probe.output;
  const std::string script =
      "umount -R /sys/fs/cgroup 2>/dev/null\n"
      "if awk '$5 ~ \"^/sys/fs/cgroup\" { found = 1 } END { exit !found }' "
      "/proc/self/mountinfo; then echo 'cannot unmount /sys/fs/cgroup here'; exit 77; fi\n"
      "bash \"$1\" start \"$2\" \"$3\" || exit $?\n"
      "export SLURM_CONF=\"$2/slurm.conf\"\n"
      "timeout 30 srun -n 1 --time=1 /bin/echo step ran; s=$?\n"
      "bash \"$1\" stop \"$2\"\n"
      "exit $s\n";
  const Result r = Exec({unshare, "--mount", "--propagation", "private", "/bin/bash", "-c", script,
                         "bash", kFixture, cluster.path(), std::to_string(::getpid())},
                        dir.File("run.log"), 120s);
  // Stopped either way, in case the script did not get to its stop.
  Exec({"/bin/bash", kFixture, "stop", cluster.path()}, dir.File("stop.log"));
  if (r.status == 77) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.status, 0) << r.output;  // the fixture prints slurmd's log when it fails
  EXPECT_THAT(r.output, HasSubstr("step ran"));
}

// sbatch refusing an option: one line naming sbatch's reason, exit 2.
TEST_F(Slurm, BadSbatchOptionIsOneLineExit2) {
  const Result submit = Exec({kAsgd, "sweep", TinyConfig(), "--seeds", "2", "--backend", "slurm",
                              "--sbatch=--no-such-sbatch-option", "--out", dir_.File("sweep")},
                             dir_.File("submit.log"));
  EXPECT_EQ(submit.status, 2) << submit.output;
  const std::string last = submit.output.substr(submit.output.rfind("asgd: error:"));
  EXPECT_THAT(last, HasSubstr("sbatch refused"));
  EXPECT_THAT(last, HasSubstr("no-such-sbatch-option"));
  EXPECT_EQ(std::count(last.begin(), last.end(), '\n'), 1) << last;
  const Result partition = Exec({kAsgd, "sweep", TinyConfig(), "--backend", "slurm", "--partition",
                                 "nosuch", "--out", dir_.File("sweep2")},
                                dir_.File("submit2.log"));
  EXPECT_EQ(partition.status, 2) << partition.output;
  EXPECT_THAT(partition.output, HasSubstr("asgd: error: asgd sweep: sbatch refused"));
}

}  // namespace
}  // namespace asgd::experiments
