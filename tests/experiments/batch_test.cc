// `asgd sweep` and `asgd suite`: runs as child processes of the real binary on a tiny
// synthetic config, the aggregate table against the runs' own summaries, validation
// before anything starts, and SIGINT ending every child. Every process is ended by PID.
#include "experiments/batch/batch.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "core/file_util.h"
#include "experiments/analysis/compare.h"
#include "experiments/analysis/seed_stats.h"
#include "experiments/cli/cli.h"
#include "experiments/record/csv.h"
#include "tests/experiments/batch_test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::Subprocess;
using namespace std::chrono_literals;
using batch_test::Cli;
using batch_test::CliResult;
using batch_test::Lines;
using batch_test::ReadCsv;
using batch_test::Subfolders;

const std::string kAsgd = std::string(ASGD_BINARY_DIR) + "/asgd";
constexpr auto kProcessTimeout = 120s;

// A run of well under a second on 2 cores.
std::string TinyConfig(const testing::TempDir& dir, const std::string& extra = "") {
  const std::string path = dir.File("tiny.ini");
  testing::WriteTestFile(path,
                         "[experiment]\nname = tiny\nepochs = 2\nlog_level = warning\n"
                         "[data]\ndataset = synthetic\nsynthetic_train = 2000\n"
                         "synthetic_test = 400\nsynthetic_features = 16\n"
                         "[model]\nname = mlp\nhidden = 16\n"
                         "[algorithm]\nname = agn\nworkers = 2\nwindow = 2\n" +
                             extra);
  return path;
}

// Processes whose parent is ppid, from /proc/<pid>/stat ("pid (comm) state ppid ...").
std::vector<pid_t> ChildrenOf(pid_t ppid) {
  std::vector<pid_t> children;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    const std::size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 1));
    char state = 0;
    long parent = 0;
    rest >> state >> parent;
    if (parent == ppid) children.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return children;
}

// True while pid exists and is not a zombie.
bool Alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const std::size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

TEST(Sweep, DescribeGivesMeanSampleStdMinMaxOverNonNanValues) {
  const SampleStats s = Describe({1.0, 2.0, std::nan(""), 4.0});
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.mean, 7.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(((1 - 7.0 / 3) * (1 - 7.0 / 3) + (2 - 7.0 / 3) * (2 - 7.0 / 3) +
                                     (4 - 7.0 / 3) * (4 - 7.0 / 3)) /
                                    2.0));
  EXPECT_EQ(s.min, 1.0);
  EXPECT_EQ(s.max, 4.0);
  const SampleStats one = Describe({0.5});
  EXPECT_EQ(one.mean, 0.5);
  EXPECT_TRUE(std::isnan(one.std));
  const SampleStats none = Describe({std::nan("")});
  EXPECT_EQ(none.n, 0);
  EXPECT_TRUE(std::isnan(none.mean) && std::isnan(none.min) && std::isnan(none.max));
}

TEST(Sweep, TwoPointsTwoSeedsInParallelAggregateTheirRunsSummaries) {
  testing::TempDir dir;
  const std::string config = TinyConfig(dir);
  const std::string sweep = dir.File("sweep");
  Subprocess p({kAsgd, "sweep", config, "--grid", "algorithm.learning_rate=0.05,0.1", "--seeds",
                "2", "--parallel", "2", "--out", sweep},
               dir.File("sweep.out"));
  const auto status = p.Wait(kProcessTimeout);
  ASSERT_TRUE(status.has_value()) << p.Output();
  ASSERT_EQ(*status, 0) << p.Output();
  const std::string out = p.Output();
  EXPECT_THAT(out, HasSubstr("[4/4]"));
  EXPECT_THAT(out, HasSubstr("wrote " + sweep + "/sweep.csv"));

  const std::vector<std::string> runs = Subfolders(sweep + "/runs");
  ASSERT_EQ(runs.size(), 4u) << out;
  // Each point's runs, by the label the sweep gave them (experiment.name).
  std::map<std::string, std::vector<RunSummary>> by_label;
  std::set<std::string> seeds;
  for (const auto& r : runs) {
    const auto config_ini = ReadRunConfig(r);
    const RunSummary s = ReadRunSummary(r);
    by_label[config_ini.at("experiment.name")].push_back(s);
    seeds.insert(config_ini.at("experiment.name") + "/" + s.Get("seed"));
  }
  EXPECT_EQ(seeds, (std::set<std::string>{"learning_rate=0.05/1", "learning_rate=0.05/2",
                                          "learning_rate=0.1/1", "learning_rate=0.1/2"}));
  EXPECT_TRUE(FileExists(sweep + "/logs/learning_rate_0.05-s1.log"));
  EXPECT_TRUE(FileExists(sweep + "/logs/learning_rate_0.1-s2.log"));

  const auto rows = ReadCsv(sweep + "/sweep.csv");
  ASSERT_EQ(rows.size(), 3u);
  const std::vector<std::string>& header = rows[0];
  auto col = [&](const std::string& name) {
    auto it = std::find(header.begin(), header.end(), name);
    EXPECT_NE(it, header.end()) << name;
    return static_cast<std::size_t>(it - header.begin());
  };
  EXPECT_EQ(header[0], "label");
  EXPECT_EQ(header[1], "algorithm.learning_rate");
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const auto& row = rows[i];
    ASSERT_EQ(row.size(), header.size());
    const std::string label = row[0];
    ASSERT_EQ(by_label.count(label), 1u) << label;
    EXPECT_EQ(label, "learning_rate=" + row[1]);
    EXPECT_EQ(row[col("runs")], "2");
    EXPECT_EQ(row[col("failed")], "0");
    for (const auto& metric : SweepMetrics()) {
      std::vector<double> values;
      for (const auto& s : by_label[label]) values.push_back(s.Number(metric));
      const SampleStats want = Describe(values);
      const auto near = [](double got, double expected) {
        if (std::isnan(expected)) return std::isnan(got);
        return std::abs(got - expected) <= 1e-6 * std::max(1.0, std::abs(expected));
      };
      const auto cell = [&](const std::string& suffix) {
        auto v = ParseCsvLine(row[col(metric + suffix)]);
        return v[0] == "nan" ? std::nan("") : std::stod(v[0]);
      };
      EXPECT_TRUE(near(cell("_mean"), want.mean)) << label << " " << metric;
      EXPECT_TRUE(near(cell("_std"), want.std)) << label << " " << metric;
      EXPECT_TRUE(near(cell("_min"), want.min)) << label << " " << metric;
      EXPECT_TRUE(near(cell("_max"), want.max)) << label << " " << metric;
      EXPECT_TRUE(near(cell("_ci95"), Interval95(values).half_width)) << label << " " << metric;
    }
  }
  EXPECT_THAT(ReadFile(sweep + "/sweep.md"), HasSubstr("| learning_rate=0.05 | 2 | 0 |"));
  // The best point on final accuracy: the one with the higher mean.
  double best_mean = -1;
  std::string best_label;
  for (const auto& [label, summaries] : by_label) {
    std::vector<double> values;
    for (const auto& s : summaries) values.push_back(s.Number("final_test_accuracy"));
    if (const double m = Describe(values).mean; m > best_mean) {
      best_mean = m;
      best_label = label;
    }
  }
  EXPECT_THAT(ReadFile(sweep + "/sweep.md"),
              HasSubstr("- final test acc. (highest): " + best_label + ", "));
  const auto comparison = ReadCsv(sweep + "/comparison.csv");
  EXPECT_EQ(comparison.size(), 5u);
  // Plots drawn (matplotlib present): the sweep's too.
  if (FileExists(sweep + "/accuracy.png")) {
    EXPECT_TRUE(FileExists(sweep + "/sweep_final_test_accuracy_vs_algorithm_learning_rate.png"))
        << out;
  }
}

TEST(Sweep, AnUnknownGridKeyIsOneLineAndStartsNothing) {
  testing::TempDir dir;
  const std::string config = TinyConfig(dir);
  const CliResult r = Cli(
      {"sweep", config, "--grid", "algorithm.learning_rte=0.1,0.2", "--out", dir.File("sweep")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("algorithm.learning_rte: unknown key (did you mean "
                               "algorithm.learning_rate?)"));
  EXPECT_EQ(r.out, "");
  EXPECT_FALSE(fs::exists(dir.File("sweep")));
}

TEST(Sweep, ABadGridValueIsOneLineAndStartsNothing) {
  testing::TempDir dir;
  const std::string config = TinyConfig(dir);
  const CliResult r =
      Cli({"sweep", config, "--grid", "algorithm.batch_size=16,0", "--out", dir.File("sweep")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("algorithm.batch_size = '0': expected an integer"));
  EXPECT_FALSE(fs::exists(dir.File("sweep")));
  // The seed is the sweep's to set.
  const CliResult seed = Cli({"sweep", config, "--grid", "experiment.seed=1,2"});
  EXPECT_EQ(seed.status, kExitBadInput);
  EXPECT_THAT(seed.err, HasSubstr("--seeds"));
}

// --backend slurm --emit-only: the job-array script and the task list, one line per grid
// point x seed, with the sbatch options passed through; nothing submitted.
TEST(Sweep, SlurmEmitOnlyWritesTheArrayScriptAndOneTaskPerRun) {
  testing::TempDir dir;
  const std::string config = TinyConfig(dir);
  const std::string sweep = dir.File("sweep");
  const CliResult r = Cli({"sweep",       config,
                           "--grid",      "algorithm.learning_rate=0.05,0.1",
                           "--grid",      "algorithm.window=1,2",
                           "--seeds",     "2",
                           "--parallel",  "3",
                           "--backend",   "slurm",
                           "--emit-only", "--partition",
                           "gpu",         "--time",
                           "00:10:00",    "--gpus-per-task",
                           "1",           "--sbatch=--account=abc",
                           "--out",       sweep});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("8 runs (4 grid points x 2 seeds) as a SLURM job array"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("submitted")));
  EXPECT_FALSE(fs::exists(sweep + "/slurm/job_id"));
  std::ifstream script_in(sweep + "/slurm/array.sbatch");
  std::stringstream script;
  script << script_in.rdbuf();
  for (const char* line :
       {"#SBATCH --array=0-7%3\n", "#SBATCH --partition=gpu\n", "#SBATCH --time=00:10:00\n",
        "#SBATCH --gpus-per-task=1\n", "#SBATCH --account=abc\n", "#SBATCH --ntasks=1\n"}) {
    EXPECT_THAT(script.str(), HasSubstr(line));
  }
  EXPECT_THAT(script.str(), HasSubstr("SLURM_ARRAY_TASK_ID"));
  std::ifstream tasks(sweep + "/slurm/tasks.txt");
  std::vector<std::string> lines;
  for (std::string line; std::getline(tasks, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 8u);
  // Task order: grid points in order, seeds within each; every path absolute.
  EXPECT_THAT(lines[0], HasSubstr("--set algorithm.learning_rate=0.05 --set algorithm.window=1 "
                                  "--set experiment.seed=1"));
  EXPECT_THAT(lines[1], HasSubstr("--set experiment.seed=2"));
  EXPECT_THAT(lines[7], HasSubstr("--set algorithm.learning_rate=0.1 --set algorithm.window=2 "
                                  "--set experiment.seed=2"));
  EXPECT_THAT(lines[7], HasSubstr(" run " + fs::absolute(config).string() + " "));
  EXPECT_THAT(lines[7], HasSubstr(">> " + fs::absolute(sweep).string() +
                                  "/logs/learning_rate_0.1_window_2-s2.log 2>&1"));
  // Nothing has run: collect says every run is missing (never submitted), exit 2.
  const CliResult collect = Cli({"sweep", "collect", sweep, "--no-plots"});
  EXPECT_EQ(collect.status, kExitBadInput);
  EXPECT_THAT(collect.out, HasSubstr("0 of 8 runs completed, 0 failed, 8 missing"));
  EXPECT_THAT(collect.out, HasSubstr("was never submitted"));
}

// A sweep submitted with --no-plots can be collected with --no-plots too.
TEST(Sweep, CollectTakesNoPlotsTwice) {
  testing::TempDir dir;
  const std::string sweep = dir.File("sweep");
  ASSERT_EQ(Cli({"sweep", TinyConfig(dir), "--grid", "algorithm.window=1", "--backend", "slurm",
                 "--emit-only", "--no-plots", "--out", sweep})
                .status,
            kExitOk);
  const CliResult collect = Cli({"sweep", "collect", sweep, "--no-plots"});
  EXPECT_THAT(collect.out, HasSubstr("0 of 1 runs completed, 0 failed, 1 missing")) << collect.err;
  EXPECT_THAT(collect.err, ::testing::Not(HasSubstr("cannot be specified more than once")));
}

TEST(Sweep, BadBackendInputsAreOneLineExit2) {
  testing::TempDir dir;
  const std::string config = TinyConfig(dir);
  const CliResult unknown = Cli({"sweep", config, "--backend", "pbs", "--out", dir.File("a")});
  EXPECT_EQ(unknown.status, kExitBadInput);
  EXPECT_EQ(Lines(unknown.err), 1) << unknown.err;
  EXPECT_THAT(unknown.err, HasSubstr("--backend 'pbs': unknown backend (expected local or slurm)"));
  EXPECT_FALSE(fs::exists(dir.File("a")));
  const CliResult local = Cli({"sweep", config, "--partition", "gpu", "--out", dir.File("b")});
  EXPECT_EQ(local.status, kExitBadInput);
  EXPECT_THAT(local.err, HasSubstr("--partition needs --backend slurm"));
  const CliResult not_a_sweep = Cli({"sweep", "collect", dir.path()});
  EXPECT_EQ(not_a_sweep.status, kExitBadInput);
  EXPECT_EQ(Lines(not_a_sweep.err), 1) << not_a_sweep.err;
  EXPECT_THAT(not_a_sweep.err, HasSubstr("holds no slurm/args"));
  // No sbatch on PATH: one line before anything is written.
  const std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  ::setenv("PATH", dir.File("empty-bin").c_str(), 1);
  const CliResult no_sbatch = Cli({"sweep", config, "--backend", "slurm", "--out", dir.File("c")});
  ::setenv("PATH", path.c_str(), 1);
  EXPECT_EQ(no_sbatch.status, kExitBadInput);
  EXPECT_EQ(Lines(no_sbatch.err), 1) << no_sbatch.err;
  EXPECT_THAT(no_sbatch.err, HasSubstr("sbatch not found on PATH"));
  EXPECT_FALSE(fs::exists(dir.File("c")));
}

// --gpus 0,1: two runs at a time, each started with model.device = cuda:N of a free
// device. No GPU here: ASGD_FAKE_CUDA_DEVICES passes the up-front check, the runs then
// fail at start, and their logs' command lines show where each was placed.
TEST(Sweep, GpusPlaceEachRunOnOneListedDevice) {
  testing::TempDir dir;
  const std::string config = TinyConfig(dir);
  const std::string sweep = dir.File("sweep");
  Subprocess p({kAsgd, "sweep", config, "--grid", "algorithm.window=1,2,3", "--seeds", "2",
                "--parallel", "4", "--gpus", "0,1", "--no-plots", "--out", sweep},
               dir.File("sweep.out"), {"ASGD_FAKE_CUDA_DEVICES=2"});
  const auto status = p.Wait(kProcessTimeout);
  ASSERT_TRUE(status.has_value()) << p.Output();
  EXPECT_THAT(p.Output(), HasSubstr("2 at a time (one per GPU of --gpus)"));
  std::map<std::string, int> placed;
  int logs = 0;
  for (const auto& e : fs::directory_iterator(sweep + "/logs")) {
    ++logs;
    std::ifstream in(e.path());
    std::string first;
    std::getline(in, first);
    int devices = 0;
    for (const char* d : {"--set model.device=cuda:0", "--set model.device=cuda:1"}) {
      if (first.find(d) != std::string::npos) {
        ++devices;
        ++placed[d];
      }
    }
    EXPECT_EQ(devices, 1) << first;
  }
  EXPECT_EQ(logs, 6);
  EXPECT_EQ(placed.size(), 2u);  // both devices used
}

TEST(Sweep, GpusThatDoNotExistAreOneLineExit2) {
  testing::TempDir dir;
  const std::string config = TinyConfig(dir);
  Subprocess p({kAsgd, "sweep", config, "--gpus", "0,3", "--out", dir.File("sweep")},
               dir.File("sweep.out"), {"ASGD_FAKE_CUDA_DEVICES=2"});
  const auto status = p.Wait(kProcessTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, kExitBadInput);
  EXPECT_EQ(Lines(p.Output()), 1) << p.Output();
  EXPECT_THAT(p.Output(), HasSubstr("--gpus '0,3': no CUDA device 3 (this machine has 2"));
  EXPECT_FALSE(fs::exists(dir.File("sweep")));
  const CliResult bad = Cli({"sweep", config, "--gpus", "0,x", "--out", dir.File("sweep")});
  EXPECT_EQ(bad.status, kExitBadInput);
  EXPECT_THAT(bad.err, HasSubstr("expected CUDA device numbers"));
  const CliResult both = Cli(
      {"sweep", config, "--gpus", "0", "--set", "model.device=cpu", "--out", dir.File("sweep")});
  EXPECT_EQ(both.status, kExitBadInput);
  EXPECT_THAT(both.err, HasSubstr("sets model.device for every run"));
}

TEST(Sweep, SigintEndsEveryRunByPidAndExits) {
  testing::TempDir dir;
  // Runs of many seconds (bounded by max_time_s should anything go wrong).
  const std::string config = TinyConfig(dir, "");
  Subprocess p({kAsgd, "sweep", config, "--grid", "algorithm.learning_rate=0.05,0.1", "--parallel",
                "2", "--set", "experiment.epochs=100000", "--set", "experiment.max_time_s=60",
                "--out", dir.File("sweep")},
               dir.File("sweep.out"));
  std::vector<pid_t> children;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (children.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    children = ChildrenOf(p.pid());
  }
  ASSERT_EQ(children.size(), 2u) << p.Output();
  std::this_thread::sleep_for(500ms);  // well into training
  for (pid_t c : children) ASSERT_TRUE(Alive(c)) << c;
  const auto start = std::chrono::steady_clock::now();
  p.Signal(SIGINT);
  const auto status = p.Wait(15s);
  ASSERT_TRUE(status.has_value()) << "the sweep did not exit\n" << p.Output();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(*status, 128 + SIGINT) << p.Output();
  EXPECT_THAT(p.Output(), HasSubstr("SIGINT: ended 2 running run(s) by PID"));
  for (pid_t c : children) EXPECT_FALSE(Alive(c)) << "run " << c << " outlived the sweep";
}

std::string SuiteFile(const testing::TempDir& dir, const std::string& body) {
  const std::string path = dir.File("suite.ini");
  testing::WriteTestFile(path, "# a test suite\n[suite]\nname = t\n\n" + body);
  return path;
}

TEST(Suite, RunsEveryEntryAndComparesThemUnderTheirLabels) {
  testing::TempDir dir;
  TinyConfig(dir);
  const std::string suite =
      SuiteFile(dir,
                "[run agn-fast]\nconfig = tiny.ini\nset = algorithm.learning_rate=0.1; "
                "algorithm.window=3\n\n[run sgd]\nconfig = tiny.ini  # the same, sequential\n"
                "set = algorithm.name=sgd; algorithm.workers=1\n");
  Subprocess p({kAsgd, "suite", suite, "--parallel", "2", "--no-plots", "--set",
                "experiment.epochs=1", "--out", dir.File("out")},
               dir.File("suite.out"));
  const auto status = p.Wait(kProcessTimeout);
  ASSERT_TRUE(status.has_value()) << p.Output();
  ASSERT_EQ(*status, 0) << p.Output();
  EXPECT_TRUE(FileExists(dir.File("out/suite.ini")));
  const auto rows = ReadCsv(dir.File("out/comparison.csv"));
  ASSERT_EQ(rows.size(), 3u) << p.Output();
  std::set<std::string> labels = {rows[1][0], rows[2][0]};
  EXPECT_EQ(labels, (std::set<std::string>{"agn-fast", "sgd"}));
  for (const auto& run : Subfolders(dir.File("out/runs"))) {
    const auto c = ReadRunConfig(run);
    if (c.at("experiment.name") == "sgd") {
      EXPECT_EQ(c.at("algorithm.name"), "sgd");
    } else {
      EXPECT_EQ(c.at("algorithm.window"), "3");
      EXPECT_EQ(c.at("algorithm.learning_rate"), "0.1");
    }
    EXPECT_EQ(c.at("experiment.epochs"), "1");
  }
}

// `asgd suite --backend slurm --emit-only` (issue 15): one array task per [run], its
// label's overrides in the task line, sbatch options passed through, nothing submitted;
// `suite collect` then reports every run missing (never submitted), exit 2.
TEST(Suite, SlurmEmitOnlyWritesTheArrayScriptAndOneTaskPerRun) {
  testing::TempDir dir;
  TinyConfig(dir);
  const std::string suite =
      SuiteFile(dir,
                "[run agn-fast]\nconfig = tiny.ini\nset = algorithm.learning_rate=0.1\n\n"
                "[run sgd]\nconfig = tiny.ini\nset = algorithm.name=sgd; algorithm.workers=1\n\n"
                "[run downpour]\nconfig = tiny.ini\nset = algorithm.name=downpour\n");
  const std::string out = dir.File("out");
  const CliResult r = Cli({"suite", suite, "--backend", "slurm", "--emit-only", "--parallel", "2",
                           "--time", "00:05:00", "--sbatch=--account=abc", "--out", out});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("3 runs as a SLURM job array"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("submitted")));
  EXPECT_FALSE(fs::exists(out + "/slurm/job_id"));
  const std::string script = ReadFile(out + "/slurm/array.sbatch");
  for (const char* line : {"#SBATCH --array=0-2%2\n", "#SBATCH --time=00:05:00\n",
                           "#SBATCH --account=abc\n", "#SBATCH --ntasks=1\n"}) {
    EXPECT_THAT(script, HasSubstr(line));
  }
  std::ifstream tasks(out + "/slurm/tasks.txt");
  std::vector<std::string> lines;
  for (std::string line; std::getline(tasks, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], HasSubstr("--set algorithm.learning_rate=0.1"));
  EXPECT_THAT(lines[1], HasSubstr("--set algorithm.name=sgd --set algorithm.workers=1"));
  EXPECT_THAT(lines[2], HasSubstr("--set algorithm.name=downpour"));
  for (const std::string& line : lines) {
    EXPECT_THAT(line, HasSubstr(" run " + fs::absolute(dir.File("tiny.ini")).string() + " "));
  }
  const CliResult collect = Cli({"suite", "collect", out, "--no-plots"});
  EXPECT_EQ(collect.status, kExitBadInput) << collect.err;
  EXPECT_THAT(collect.out, HasSubstr("0 of 3 runs completed, 0 failed, 3 missing"));
  EXPECT_THAT(collect.out, HasSubstr("was never submitted"));
}

TEST(Suite, AMissingConfigIsOneLineNamingFileSectionAndKey) {
  testing::TempDir dir;
  TinyConfig(dir);
  const std::string suite =
      SuiteFile(dir, "[run a]\nconfig = tiny.ini\n[run b]\nconfig = missing.ini\n");
  const CliResult r = Cli({"suite", suite, "--out", dir.File("out")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(suite + ": [run b] config: no such file"));
  EXPECT_THAT(r.err, HasSubstr(dir.File("missing.ini")));
  EXPECT_FALSE(fs::exists(dir.File("out")));
}

TEST(Suite, BadKeysAreOneLineNamingFileSectionAndKey) {
  testing::TempDir dir;
  TinyConfig(dir);
  CliResult r = Cli({"suite", SuiteFile(dir, "[run a]\nconfg = tiny.ini\n")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("suite.ini:6: [run a] confg: unknown key (did you mean config?)"));

  r = Cli(
      {"suite", SuiteFile(dir, "[run a]\nconfig = tiny.ini\nset = algorithm.learning_rte=1\n")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("suite.ini: [run a] config: algorithm.learning_rte: unknown key"));

  r = Cli({"suite", SuiteFile(dir, "[run a]\nconfig = tiny.ini\n"), "--set", "model.nam=mlp"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("model.nam: unknown key (did you mean model.name?)"));

  r = Cli({"suite", SuiteFile(dir, "[runs a]\nconfig = tiny.ini\n")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err,
              HasSubstr("[runs a]: unknown section (expected [suite], [tune] or [run LABEL])"));
}

// --seeds N: every [run] with experiment.seed + 0..N-1, as a sweep's points; the
// comparison then shows each entry as one row of N seeds.
TEST(Suite, SeedsRunEveryEntryWithEachSeed) {
  testing::TempDir dir;
  TinyConfig(dir);
  const std::string suite = SuiteFile(dir,
                                      "[run a]\nconfig = tiny.ini\n[run b]\nconfig = tiny.ini\n"
                                      "set = experiment.seed=7\n");
  const CliResult r = Cli({"suite", suite, "--seeds", "2", "--dry-run"});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("would run 4 runs"));
  for (const char* seed :
       {"experiment.seed=1 ", "experiment.seed=2 ", "experiment.seed=7 ", "experiment.seed=8 "}) {
    EXPECT_THAT(r.out, HasSubstr(seed));
  }
}

// A log range in a sweep: N values with equal ratios, the ends as given.
TEST(Sweep, ALogRangeGivesItsValues) {
  testing::TempDir dir;
  const CliResult r = Cli(
      {"sweep", TinyConfig(dir), "--grid", "algorithm.learning_rate=log:0.01:1:3", "--dry-run"});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_EQ(Lines(r.out), 4) << r.out;
  for (const char* v : {"=0.01 ", "=0.1 ", "=1 "}) {
    EXPECT_THAT(r.out, HasSubstr(std::string("--set algorithm.learning_rate") + v));
  }
}

TEST(Suite, TheShippedSuitesAreValid) {
  // --dry-run validates every entry as a real run would, then lists the runs.
  const std::map<std::string, int> suites = {
      {"mnist.ini", 19}, {"fashion_cnn.ini", 6}, {"a9a_hogwild.ini", 3}};
  for (const auto& [name, runs] : suites) {
    const std::string path = std::string(ASGD_SOURCE_DIR) + "/experiments/suites/" + name;
    const CliResult r = Cli({"suite", path, "--dry-run"});
    EXPECT_EQ(r.status, kExitOk) << name << ": " << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), runs + 1) << r.out;
  }
}

}  // namespace
}  // namespace asgd::experiments
