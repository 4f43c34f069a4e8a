// `asgd tune` and a suite's [tune] (experiments/batch/batch.h): the pure rules of
// tune_score.h (grid specs, scores and ranks, the edge rule) as unit tests, then the
// command on a tiny simulated problem whose runs take a fraction of a second: the clearly
// best rate is chosen, the diverging one is reported and ranked last, a best value on the
// edge extends the grid, the seeds' interval is the hand computation, bad input is one line
// before any run, SIGINT leaves what finished and a rerun resumes, and the SLURM path
// writes one task per (value, seed) and collects the edge rounds. Every process is ended
// by PID.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "core/error.h"
#include "core/file_util.h"
#include "experiments/analysis/compare.h"
#include "experiments/analysis/seed_stats.h"
#include "experiments/batch/tune_score.h"
#include "experiments/config/exit_status.h"
#include "tests/experiments/batch_test_util.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

namespace fs = std::filesystem;
using batch::AxisValues;
using batch::Edge;
using batch::EdgeOf;
using batch::ExpandGridSpec;
using batch::FindTuneMetric;
using batch::Outcome;
using batch::RankScores;
using batch::RunRecord;
using batch::RunScore;
using batch::ScoreRun;
using batch::Spacing;
using batch::StepBeyond;
using batch_test::Cli;
using batch_test::CliResult;
using batch_test::Lines;
using batch_test::ReadCsvRecords;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Subprocess;
using namespace std::chrono_literals;

const std::string kAsgd = std::string(ASGD_BINARY_DIR) + "/asgd";
constexpr auto kProcessTimeout = 120s;
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// ---- Grid specs ----------------------------------------------------------------

TEST(TuneGrid, LogAndLinearRangesAndLists) {
  const AxisValues log = ExpandGridSpec("algorithm.learning_rate", "log:1e-3:1:7");
  EXPECT_EQ(log.values, (std::vector<std::string>{"0.001", "0.00316228", "0.01", "0.0316228", "0.1",
                                                  "0.316228", "1"}));
  EXPECT_EQ(log.spacing, Spacing::kLog);
  EXPECT_NEAR(log.step, std::sqrt(10.0), 1e-12);
  const AxisValues lin = ExpandGridSpec("algorithm.momentum", "lin:0:0.9:4");
  EXPECT_EQ(lin.values, (std::vector<std::string>{"0", "0.3", "0.6", "0.9"}));
  EXPECT_NEAR(lin.step, 0.3, 1e-12);
  EXPECT_EQ(ExpandGridSpec("algorithm.window", "1, 2,4").values,
            (std::vector<std::string>{"1", "2", "4"}));
  EXPECT_EQ(ExpandGridSpec("model.hidden", "64,64;256,256").values,
            (std::vector<std::string>{"64,64", "256,256"}));
}

TEST(TuneGrid, BadSpecsNameKeyAndSpec) {
  const std::map<std::string, std::string> bad = {
      {"log:0:1:3", "a log range needs both ends > 0 (LO is 0)"},
      {"log:-1e-3:1:3", "a log range needs both ends > 0 (LO is -0.001)"},
      {"log:1e-3:-1:3", "a log range needs both ends > 0 (HI is -1)"},
      {"log:1:0.1:3", "expected LO < HI"},
      {"lin:0:1:1", "N must be an integer from 2 to 1000"},
      {"log:1:10", "expected log:LO:HI:N"},
      {"lin:a:1:3", "LO and HI must be numbers"},
      {"", "an empty value"},
      {"0.1,,0.2", "an empty value"},
      {"0.1,0.1", "value '0.1' is given twice"},
  };
  for (const auto& [spec, why] : bad) {
    try {
      ExpandGridSpec("algorithm.learning_rate", spec);
      ADD_FAILURE() << spec << " was taken";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr("--grid algorithm.learning_rate=" + spec + ": " + why));
    }
  }
}

// ---- The edge rule -------------------------------------------------------------

TEST(TuneEdge, TheStepBeyondFollowsTheAxisSpacing) {
  const AxisValues log = ExpandGridSpec("k", "log:0.01:1:3");
  const std::vector<std::string> tried = log.values;
  EXPECT_EQ(EdgeOf(tried, "1"), Edge::kHigh);
  EXPECT_EQ(EdgeOf(tried, "0.01"), Edge::kLow);
  EXPECT_EQ(EdgeOf(tried, "0.1"), Edge::kNone);
  EXPECT_EQ(StepBeyond(log, tried, Edge::kHigh, false), "10");
  EXPECT_EQ(StepBeyond(log, tried, Edge::kLow, false), "0.001");
  EXPECT_EQ(StepBeyond(log, tried, Edge::kNone, false), std::nullopt);
  // Extensions count as tried: the next step continues from the new edge.
  EXPECT_EQ(StepBeyond(log, {"0.01", "0.1", "1", "10"}, Edge::kHigh, false), "100");
  const AxisValues lin = ExpandGridSpec("k", "lin:0.5:0.9:3");
  EXPECT_EQ(StepBeyond(lin, lin.values, Edge::kHigh, false), "1.1");
  EXPECT_EQ(StepBeyond(lin, lin.values, Edge::kLow, false), "0.3");
  // A list: the ratio of its two values at the edge when both are positive, else their
  // difference; integer keys round away from the edge.
  const AxisValues windows = ExpandGridSpec("k", "1,2,4");
  EXPECT_EQ(StepBeyond(windows, windows.values, Edge::kHigh, true), "8");
  EXPECT_EQ(StepBeyond(windows, windows.values, Edge::kLow, false), "0.5");
  EXPECT_EQ(StepBeyond(windows, windows.values, Edge::kLow, true), "0");
  const AxisValues three = ExpandGridSpec("k", "1,2,3");
  EXPECT_EQ(StepBeyond(three, three.values, Edge::kHigh, true), "5");  // 4.5 rounded up
  const AxisValues momentum = ExpandGridSpec("k", "0,0.5,0.9");
  EXPECT_EQ(StepBeyond(momentum, momentum.values, Edge::kLow, false), "-0.5");
  // Choices and single values have no edge.
  EXPECT_EQ(EdgeOf({"sgd", "adam"}, "adam"), Edge::kNone);
  EXPECT_EQ(EdgeOf({"0.1"}, "0.1"), Edge::kNone);
}

// ---- Scores and ranks ----------------------------------------------------------

RunRecord Record(bool completed, double time_to_target, double best) {
  RunRecord r;
  r.has_summary = true;
  r.completed = completed;
  r.target = 0.9;
  r.time_to_target_s = time_to_target;
  r.best_accuracy = best;
  r.final_accuracy = best;
  return r;
}

TEST(TuneScore, ARunThatMissedTheTargetRanksAfterEveryRunThatReachedIt) {
  const auto& metric = FindTuneMetric("time_to_target");
  std::vector<RunScore> scores = {
      ScoreRun(metric, Record(true, kNan, 0.89)),  // 0: not reached, high accuracy
      ScoreRun(metric, Record(true, 5.0, 0.91)),   // 1: reached, slower
      ScoreRun(metric, Record(false, kNan, 0.5)),  // 2: failed (diverged)
      ScoreRun(metric, RunRecord{}),               // 3: no record
      ScoreRun(metric, Record(true, 2.0, 0.95)),   // 4: reached, fastest
      ScoreRun(metric, Record(true, kNan, 0.7)),   // 5: not reached, low accuracy
      ScoreRun(metric, Record(true, 5.0, 0.93)),   // 6: as fast as 1, more accurate
  };
  EXPECT_EQ(scores[0].outcome, Outcome::kNotReached);
  EXPECT_EQ(scores[2].outcome, Outcome::kFailed);
  EXPECT_EQ(scores[3].outcome, Outcome::kNoRecord);
  EXPECT_EQ(scores[4].outcome, Outcome::kScored);
  EXPECT_EQ(RankScores(scores, true), (std::vector<std::size_t>{4, 6, 1, 0, 5, 2, 3}));
  // An accuracy metric: higher first; the failed run still after every completed one.
  const auto& best = FindTuneMetric("best_accuracy");
  std::vector<RunScore> acc = {ScoreRun(best, Record(true, kNan, 0.8)),
                               ScoreRun(best, Record(false, kNan, 0.99)),
                               ScoreRun(best, Record(true, kNan, 0.9))};
  EXPECT_EQ(RankScores(acc, false), (std::vector<std::size_t>{2, 0, 1}));
}

TEST(TuneScore, EpochsAndBytesToTargetReadTheFirstEvaluationAtTheTarget) {
  RunRecord r = Record(true, 3.0, 0.95);
  r.bytes_pushed = 4000;
  r.updates = 100;  // 40 bytes per update
  r.rows = {{0, 0, 0.1}, {0.5, 20, 0.85}, {1.0, 50, 0.9}, {1.5, 80, 0.95}};
  EXPECT_DOUBLE_EQ(ScoreRun(FindTuneMetric("epochs_to_target"), r).value, 1.0);
  EXPECT_DOUBLE_EQ(ScoreRun(FindTuneMetric("bytes_to_target"), r).value, 50 * 40.0);
  EXPECT_DOUBLE_EQ(ScoreRun(FindTuneMetric("final_accuracy"), r).value, 0.95);
  r.target = 0.99;
  EXPECT_EQ(ScoreRun(FindTuneMetric("epochs_to_target"), r).outcome, Outcome::kNotReached);
  try {
    FindTuneMetric("time_to_targte");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("did you mean time_to_target?"));
  }
}

TEST(TuneScore, SeedsOfOneValueScoreAsTheirMeanWhenEveryOneIsScored) {
  const auto& metric = FindTuneMetric("time_to_target");
  const RunScore both = batch::MeanScore(
      {ScoreRun(metric, Record(true, 2.0, 0.9)), ScoreRun(metric, Record(true, 4.0, 0.94))});
  EXPECT_EQ(both.outcome, Outcome::kScored);
  EXPECT_DOUBLE_EQ(both.value, 3.0);
  EXPECT_DOUBLE_EQ(both.best_accuracy, 0.92);
  const RunScore one_missed = batch::MeanScore(
      {ScoreRun(metric, Record(true, 2.0, 0.9)), ScoreRun(metric, Record(true, kNan, 0.8))});
  EXPECT_EQ(one_missed.outcome, Outcome::kNotReached);
  // A seed without a record is a missing seed, not a worse value.
  EXPECT_EQ(batch::MeanScore({ScoreRun(metric, Record(true, 2.0, 0.9)), RunScore{}}).outcome,
            Outcome::kScored);
  EXPECT_EQ(batch::MeanScore({RunScore{}}).outcome, Outcome::kNoRecord);
}

// ---- The command ---------------------------------------------------------------

// A simulated run of a few hundredths of a virtual second, about 0.2 s of wall time: on
// this problem the rate 1 reaches 0.9 first, 0.01 and 10 never do and 100 diverges. With
// transport inproc, the same problem on threads.
std::string SimConfig(const testing::TempDir& dir, const std::string& transport = "sim") {
  const std::string path = dir.File(transport + ".ini");
  testing::WriteTestFile(
      path, "[experiment]\nname = " + transport +
                "\nepochs = 2\nlog_level = warning\ntarget_accuracy = 0.9\n"
                "[data]\ndataset = synthetic\nsynthetic_train = 2000\n"
                "synthetic_test = 400\nsynthetic_features = 16\nsynthetic_classes = 3\n"
                "[model]\nname = mlp\nhidden = 16\n"
                "[algorithm]\nname = async_sgd\nworkers = 2\nlearning_rate = 0.05\n"
                "[metrics]\neval_every_epochs = 0.02\n[cluster]\ntransport = " +
                transport + "\n" +
                (transport == "sim" ? "[delay]\ncompute = constant\nmean_ms = 1\n" : ""));
  return path;
}

struct Tuned {
  int status = -1;
  std::string out;
};

Tuned RunAsgd(const testing::TempDir& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kAsgd};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p(argv, dir.File("asgd.out"));
  const auto status = p.Wait(kProcessTimeout);
  return {status ? *status : -1, p.Output()};
}

std::map<std::string, std::string> Row(const std::vector<std::map<std::string, std::string>>& rows,
                                       const std::string& column, const std::string& value,
                                       const std::string& stage) {
  for (const auto& r : rows) {
    if (r.at(column) == value && r.at("stage") == stage) return r;
  }
  ADD_FAILURE() << "no row with " << column << " = " << value << " in stage " << stage;
  return {};
}

double Cell(const std::map<std::string, std::string>& row, const std::string& column) {
  return std::stod(row.at(column));
}

TEST(Tune, PicksTheClearlyBestRateRanksTheDivergedOneAndGivesTheSeedsInterval) {
  testing::TempDir dir;
  const std::string out = dir.File("tune");
  const Tuned t =
      RunAsgd(dir, {"tune", SimConfig(dir), "--grid", "algorithm.learning_rate=log:0.01:100:5",
                    "--metric", "time_to_target", "--seeds", "3", "--parallel", "2", "--out", out});
  ASSERT_EQ(t.status, 0) << t.out;
  const auto runs = ReadCsvRecords(out + "/tune.csv");
  ASSERT_EQ(runs.size(), 8u) << t.out;  // 5 values, no edge round, 3 seeds
  const std::string rate = "algorithm.learning_rate";
  EXPECT_EQ(Row(runs, rate, "1", "grid").at("rank"), "1");
  EXPECT_EQ(Row(runs, rate, "0.1", "grid").at("rank"), "2");
  // The diverged run is kept: failed, with its reason, ranked after every completed one.
  const auto diverged = Row(runs, rate, "100", "grid");
  EXPECT_EQ(diverged.at("outcome"), "failed");
  EXPECT_THAT(diverged.at("status"), HasSubstr("diverged"));
  EXPECT_EQ(diverged.at("rank"), "5");
  EXPECT_EQ(Row(runs, rate, "10", "grid").at("outcome"), "not reached");
  EXPECT_THAT(t.out, HasSubstr("learning_rate=100 s1: FAILED"));
  // The interval of best.csv is the hand computation from the three seeds' own summaries.
  const auto best = ReadCsvRecords(out + "/best.csv");
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].at(rate), "1");
  EXPECT_EQ(best[0].at("seed_list"), "2;3;4");  // experiment.seed + 1..3
  EXPECT_EQ(best[0].at("unit"), "virtual s");
  std::vector<double> times, finals;
  for (const auto& r : runs) {
    if (r.at("stage") != "seeds") continue;
    const RunSummary s = ReadRunSummary(r.at("run_dir"));
    times.push_back(s.Number("time_to_target_s"));
    finals.push_back(s.Number("final_test_accuracy"));
  }
  ASSERT_EQ(times.size(), 3u);
  const double mean = (times[0] + times[1] + times[2]) / 3;
  double ss = 0;
  for (double v : times) ss += (v - mean) * (v - mean);
  const double half = 4.302653 * std::sqrt(ss / 2) / std::sqrt(3.0);
  EXPECT_NEAR(Cell(best[0], "mean"), mean, 1e-9);
  EXPECT_NEAR(Cell(best[0], "ci95"), half, 1e-6);
  EXPECT_NEAR(Cell(best[0], "low"), mean - half, 1e-6);
  EXPECT_NEAR(Cell(best[0], "final_accuracy_ci95"), Interval95(finals).half_width, 1e-9);
  EXPECT_THAT(t.out, HasSubstr("tune: best learning_rate=1: time_to_target "));
  EXPECT_THAT(t.out, HasSubstr("(95 % CI, 3 of 3 seeds)"));
  const std::string md = ReadFile(out + "/tune.md");
  EXPECT_THAT(md, HasSubstr("| sim | learning_rate=1 | "));
  EXPECT_THAT(md, HasSubstr(" | 3 of 3 | "));
  EXPECT_THAT(md, HasSubstr(" | 5 + 0 + 3 | "));  // grid + edge + seed runs
  if (FileExists(out + "/accuracy.png")) {        // matplotlib present
    EXPECT_TRUE(FileExists(out + "/tune_time_to_target_vs_algorithm_learning_rate.png")) << t.out;
  }
}

TEST(Tune, ABestRateOnTheEdgeExtendsTheGridAtMostTwiceAndRecordsIt) {
  testing::TempDir dir;
  const std::string config = SimConfig(dir);
  const std::string out = dir.File("tune");
  const Tuned t = RunAsgd(
      dir, {"tune", config, "--grid", "algorithm.learning_rate=log:0.01:0.1:2", "--metric",
            "time_to_target", "--seeds", "1", "--parallel", "2", "--no-plots", "--out", out});
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_THAT(t.out, HasSubstr("the best algorithm.learning_rate = 0.1 is the largest value "
                               "tried; edge round 1 of 2 adds algorithm.learning_rate = 1"));
  EXPECT_THAT(t.out, HasSubstr("edge round 2 of 2 adds algorithm.learning_rate = 10"));
  const auto runs = ReadCsvRecords(out + "/tune.csv");
  EXPECT_EQ(Row(runs, "algorithm.learning_rate", "1", "edge 1").at("rank"), "1");
  EXPECT_EQ(Row(runs, "algorithm.learning_rate", "10", "edge 2").at("outcome"), "not reached");
  const auto best = ReadCsvRecords(out + "/best.csv");
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].at("algorithm.learning_rate"), "1");
  EXPECT_EQ(best[0].at("edge_runs"), "2");
  EXPECT_EQ(best[0].at("on_edge"), "");
  EXPECT_THAT(ReadFile(out + "/tune.md"), HasSubstr("- edge: the best algorithm.learning_rate"));

  // One round only: the best is still the largest value tried, and the tune says so.
  const std::string once = dir.File("once");
  const Tuned t1 = RunAsgd(dir, {"tune", config, "--grid", "algorithm.learning_rate=0.01,0.1",
                                 "--metric", "time_to_target", "--seeds", "1", "--extend", "1",
                                 "--parallel", "2", "--no-plots", "--out", once});
  ASSERT_EQ(t1.status, 0) << t1.out;
  EXPECT_THAT(t1.out, HasSubstr("still on the edge: learning_rate (largest tried)"));
  EXPECT_EQ(ReadCsvRecords(once + "/best.csv")[0].at("on_edge"), "learning_rate (largest tried)");
}

TEST(Tune, BadInputIsOneLineBeforeAnyRun) {
  testing::TempDir dir;
  const std::string config = SimConfig(dir);
  const std::string out = dir.File("tune");
  const std::string rate = "algorithm.learning_rate=0.1,1";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"tune", config, "--metric", "time_to_target"}, "asgd tune: no --grid"},
      {{"tune", config, "--grid", "algorithm.learning_rate=", "--metric", "time_to_target"},
       "--grid algorithm.learning_rate=: an empty value"},
      {{"tune", config, "--grid", "algorithm.learning_rate=log:0:1:4", "--metric", "best_accuracy"},
       "a log range needs both ends > 0 (LO is 0)"},
      {{"tune", config, "--grid", rate, "--metric", "loss"},
       "--metric 'loss': not a metric tune scores by"},
      {{"tune", config, "--grid", rate}, "missing --metric"},
      {{"tune", config, "--grid", rate, "--metric", "epochs_to_target", "--set",
        "experiment.target_accuracy=0"},
       "--metric epochs_to_target needs a target accuracy, and no config sets one"},
      {{"tune", config, "--grid", rate, "--metric", "bytes_to_target", "--set",
        "algorithm.name=sgd", "--set", "algorithm.workers=1"},
       "algorithm.name = sgd pushes no parameters"},
      {{"tune", config, "--grid", "algorithm.learning_rte=0.1", "--metric", "best_accuracy"},
       "did you mean algorithm.learning_rate?"},
      {{"tune", config, "--grid", "algorithm.learning_rate=0.1,-1", "--metric", "best_accuracy"},
       "algorithm.learning_rate = '-1'"},
      {{"tune", config, "--grid", rate, "--metric", "best_accuracy", "--launch", "--set",
        "algorithm.name=sgd", "--set", "algorithm.workers=1"},
       "leave --launch out"},
  };
  for (const auto& [args, line] : cases) {
    std::vector<std::string> with_out = args;
    with_out.insert(with_out.end(), {"--out", out});
    const CliResult r = Cli(with_out);
    EXPECT_EQ(r.status, kExitBadInput) << line;
    EXPECT_EQ(Lines(r.err), 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(line));
    EXPECT_FALSE(fs::exists(out)) << line;
  }
  // A folder that holds another tune's plan is refused, not mixed into.
  MakeDirs(out);
  testing::WriteTestFile(out + "/plan.txt", "# another plan\n");
  const CliResult other =
      Cli({"tune", config, "--grid", rate, "--metric", "best_accuracy", "--out", out});
  EXPECT_EQ(other.status, kExitBadInput);
  EXPECT_EQ(Lines(other.err), 1) << other.err;
  EXPECT_THAT(other.err, HasSubstr("holds another tune (plan.txt: "));
  EXPECT_FALSE(fs::exists(out + "/runs"));
}

// SIGINT during the grid: the run that finished is kept with tune.csv listing it; the same
// command again reuses it and runs only the rest.
TEST(Tune, SigintKeepsTheFinishedRunsAndARerunResumes) {
  testing::TempDir dir;
  // Threads, not the simulator: max_time_s bounds each run's wall time.
  const std::string config = SimConfig(dir, "inproc");
  const std::string out = dir.File("tune");
  const std::vector<std::string> args = {kAsgd,
                                         "tune",
                                         config,
                                         "--grid",
                                         "experiment.max_time_s=0.2,2.5",
                                         "--metric",
                                         "final_accuracy",
                                         "--seeds",
                                         "1",
                                         "--extend",
                                         "0",
                                         "--parallel",
                                         "2",
                                         "--no-plots",
                                         "--set",
                                         "experiment.epochs=100000",
                                         "--out",
                                         out};
  {
    Subprocess p(args, dir.File("first.out"));
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (p.Output().find("[1/2]") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
    }
    ASSERT_THAT(p.Output(), HasSubstr("[1/2] max_time_s=0.2 s1: completed")) << p.Output();
    p.Signal(SIGINT);
    const auto status = p.Wait(15s);
    ASSERT_TRUE(status.has_value()) << p.Output();
    EXPECT_EQ(*status, 128 + SIGINT) << p.Output();
    EXPECT_THAT(p.Output(), HasSubstr("lists the 1 finished runs"));
  }
  const auto first = ReadCsvRecords(out + "/tune.csv");
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].at("experiment.max_time_s"), "0.2");
  Subprocess again(args, dir.File("again.out"));
  const auto status = again.Wait(kProcessTimeout);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0) << again.Output();
  EXPECT_THAT(again.Output(), HasSubstr("(resuming)"));
  EXPECT_THAT(again.Output(), HasSubstr("[resumed] max_time_s=0.2 s1: finished before, completed"));
  EXPECT_THAT(again.Output(), HasSubstr("[1/1] max_time_s=2.5 s1: completed"));
  const auto runs = ReadCsvRecords(out + "/tune.csv");
  ASSERT_EQ(runs.size(), 3u);  // two grid runs and one seed
  EXPECT_EQ(runs[0].at("run_dir"), first[0].at("run_dir"));
}

// Runs array task i of the script in folder sub as SLURM would, with its index.
void RunArrayTask(const testing::TempDir& dir, const std::string& script, int i) {
  Subprocess p({"/bin/bash", script}, dir.File("task.out"),
               {"SLURM_ARRAY_TASK_ID=" + std::to_string(i)});
  ASSERT_TRUE(p.Wait(30s).has_value()) << p.Output();
}

int TaskCount(const std::string& tasks) { return Lines(ReadFile(tasks)); }

// Submission and collect run as the asgd binary: the task lines name the binary that wrote
// them.
TEST(Tune, SlurmWritesATaskPerValueAndSeedAndCollectRunsTheEdgeRounds) {
  testing::TempDir dir;
  const std::string config = SimConfig(dir);
  const std::string out = dir.File("tune");
  const Tuned submit =
      RunAsgd(dir, {"tune", config, "--grid", "algorithm.learning_rate=log:0.01:0.1:2", "--metric",
                    "time_to_target", "--seeds", "2", "--backend", "slurm", "--emit-only",
                    "--parallel", "3", "--out", out});
  ASSERT_EQ(submit.status, kExitOk) << submit.out;
  EXPECT_THAT(submit.out, HasSubstr("4 runs (1 point x 2 values x 2 seeds) as a SLURM job array"));
  const std::string tasks = ReadFile(out + "/slurm/tasks.txt");
  ASSERT_EQ(Lines(tasks), 4);
  EXPECT_THAT(tasks, HasSubstr(kAsgd + " run "));
  EXPECT_THAT(tasks, HasSubstr("--set algorithm.learning_rate=0.01 --set experiment.seed=1 "));
  EXPECT_THAT(tasks, HasSubstr("--set algorithm.learning_rate=0.1 --set experiment.seed=2 "));
  EXPECT_THAT(ReadFile(out + "/slurm/array.sbatch"), HasSubstr("#SBATCH --array=0-3%3\n"));
  EXPECT_THAT(ReadFile(out + "/slurm/array.sbatch"), HasSubstr("asgd tune collect"));
  const std::vector<std::string> collect = {"tune", "collect", out, "--no-plots"};
  // Nothing ran yet: every task is missing, and no value can be chosen.
  EXPECT_EQ(RunAsgd(dir, collect).status, kExitBadInput);
  for (int i = 0; i < 4; ++i) RunArrayTask(dir, out + "/slurm/array.sbatch", i);
  // 0.1 beats 0.01 and lies on the edge: collect writes the next rate's array.
  Tuned c = RunAsgd(dir, collect);
  EXPECT_EQ(c.status, kExitBadInput);
  EXPECT_THAT(c.out, HasSubstr("the edge rule added 2 runs"));
  ASSERT_EQ(ReadFile(out + "/slurm-edge1/values"), "0\t1\n");
  ASSERT_EQ(TaskCount(out + "/slurm-edge1/tasks.txt"), 2);
  for (int i = 0; i < 2; ++i) RunArrayTask(dir, out + "/slurm-edge1/array.sbatch", i);
  c = RunAsgd(dir, collect);
  EXPECT_THAT(c.out, HasSubstr("the edge rule added 2 runs"));
  ASSERT_EQ(TaskCount(out + "/slurm-edge2/tasks.txt"), 2);
  for (int i = 0; i < 2; ++i) RunArrayTask(dir, out + "/slurm-edge2/array.sbatch", i);
  c = RunAsgd(dir, collect);
  ASSERT_EQ(c.status, kExitOk) << c.out;
  EXPECT_THAT(c.out, HasSubstr("tune: best learning_rate=1: time_to_target "));
  const auto best = ReadCsvRecords(out + "/best.csv");
  ASSERT_EQ(best.size(), 1u);
  EXPECT_EQ(best[0].at("seed_list"), "1;2");  // the value's own seeds, which chose it
  EXPECT_EQ(ReadCsvRecords(out + "/tune.csv").size(), 8u);
}

// A suite's [tune]: every [run] is a point tuned on its own, in one table.
TEST(Tune, ASuiteTunesEveryRunAndComparesThePoints) {
  testing::TempDir dir;
  SimConfig(dir);
  const std::string suite = dir.File("suite.ini");
  testing::WriteTestFile(
      suite,
      "[suite]\nname = t\n[tune]\ngrid = algorithm.learning_rate=log:0.1:10:3\n"
      "metric = time_to_target\nseeds = 2\nextend = 0\n"
      "[run async]\nconfig = sim.ini\n"
      "[run agn]\nconfig = sim.ini\nset = algorithm.name=agn; algorithm.window=2\n");
  const CliResult dry = Cli({"suite", suite, "--dry-run"});
  ASSERT_EQ(dry.status, kExitOk) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("would run 6 runs"));
  EXPECT_THAT(dry.out, HasSubstr("then at most 0 edge rounds"));
  const std::string out = dir.File("out");
  const Tuned t = RunAsgd(dir, {"suite", suite, "--parallel", "2", "--no-plots", "--out", out});
  ASSERT_EQ(t.status, 0) << t.out;
  const auto best = ReadCsvRecords(out + "/best.csv");
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].at("point"), "async");
  EXPECT_EQ(best[1].at("point"), "agn");
  std::set<std::string> separation = {best[0].at("separation"), best[1].at("separation")};
  EXPECT_EQ(separation.count("best"), 1u);
  EXPECT_THAT(t.out, HasSubstr("suite: async: best learning_rate="));
  EXPECT_THAT(t.out, HasSubstr("suite: agn: best learning_rate="));
  const auto runs = ReadCsvRecords(out + "/tune.csv");
  EXPECT_EQ(runs.size(), 10u);  // 2 points x 3 values + 2 x 2 seeds
  EXPECT_EQ(runs.back().at("label").substr(0, 4), "agn ");
  // A key both set for a run and tuned is refused.
  testing::WriteTestFile(suite, ReadFile(suite) +
                                    "[run fixed]\nconfig = sim.ini\n"
                                    "set = algorithm.learning_rate=0.5\n");
  const CliResult both = Cli({"suite", suite, "--dry-run"});
  EXPECT_EQ(both.status, kExitBadInput);
  EXPECT_THAT(both.err, HasSubstr("[run fixed] algorithm.learning_rate is set for the run and "
                                  "tuned by [tune] grid"));
}

// A [run]'s own grid = gives that point other values of a [tune] axis (strategies whose
// sensible rates differ, each grid holding its own scaled-rate policy as one value); the
// other runs keep [tune]'s. The edge rule steps along the run's own values.
TEST(Tune, ASuiteRunMayGiveItsOwnValuesOfATunedAxis) {
  testing::TempDir dir;
  SimConfig(dir);
  const std::string suite = dir.File("suite.ini");
  const std::string head =
      "[suite]\nname = t\n[tune]\ngrid = algorithm.learning_rate=0.1,1\n"
      "metric = time_to_target\nseeds = 1\nextend = 1\n"
      "[run async]\nconfig = sim.ini\n";
  testing::WriteTestFile(suite, head +
                                    "[run agn]\nconfig = sim.ini\nset = algorithm.name=agn; "
                                    "algorithm.window=2\ngrid = algorithm.learning_rate=0.25,0.5,4\n");
  const CliResult dry = Cli({"suite", suite, "--dry-run"});
  ASSERT_EQ(dry.status, kExitOk) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("would run 5 runs"));
  EXPECT_THAT(dry.out, HasSubstr("--set algorithm.name=agn --set algorithm.window=2 --set "
                                 "algorithm.learning_rate=0.25 "));
  EXPECT_THAT(dry.out, Not(HasSubstr("algorithm.window=2 --set algorithm.learning_rate=0.1 ")));
  const std::string out = dir.File("out");
  const Tuned t = RunAsgd(dir, {"suite", suite, "--no-plots", "--out", out});
  ASSERT_EQ(t.status, 0) << t.out;
  const auto runs = ReadCsvRecords(out + "/tune.csv");
  std::set<std::string> agn_grid;
  for (const auto& r : runs) {
    if (r.at("point") == "agn" && r.at("stage") == "grid") agn_grid.insert(r.at("algorithm.learning_rate"));
  }
  EXPECT_EQ(agn_grid, (std::set<std::string>{"0.25", "0.5", "4"}));
  EXPECT_THAT(ReadFile(out + "/plan.txt"), HasSubstr("  grid algorithm.learning_rate=0.25,0.5,4"));
  EXPECT_THAT(ReadFile(out + "/tune.md"), HasSubstr("Grid of agn: algorithm.learning_rate in {0.25, 0.5, 4}"));
  // A key that [tune] does not tune, and a grid without [tune], are one line each.
  testing::WriteTestFile(suite, head + "[run agn]\nconfig = sim.ini\ngrid = algorithm.window=1,2\n");
  const CliResult other = Cli({"suite", suite, "--dry-run"});
  EXPECT_EQ(other.status, kExitBadInput);
  EXPECT_THAT(other.err, HasSubstr("[run agn] grid: algorithm.window is not an axis of [tune] grid"));
  testing::WriteTestFile(suite, "[suite]\nname = t\n[run a]\nconfig = sim.ini\n"
                                "grid = algorithm.learning_rate=0.1,1\n");
  const CliResult untuned = Cli({"suite", suite, "--dry-run"});
  EXPECT_EQ(untuned.status, kExitBadInput);
  EXPECT_THAT(untuned.err, HasSubstr("[run a] grid: a run's own grid values need a [tune] section"));
}

// --points: a whole comparison as one command, each point of their product tuned alone.
TEST(Tune, PointsAreTunedEachOnItsOwn) {
  testing::TempDir dir;
  const std::string config = SimConfig(dir);
  const CliResult r =
      Cli({"tune", config, "--points", "algorithm.name=agn,downpour", "--grid",
           "algorithm.learning_rate=0.1,1", "--metric", "time_to_target", "--dry-run"});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("would run 4 runs"));
  EXPECT_THAT(r.out, HasSubstr("--set algorithm.name=downpour --set algorithm.learning_rate=1 "));
  EXPECT_THAT(r.out, HasSubstr("'experiment.name=name=agn learning_rate=0.1'"));
  const CliResult both =
      Cli({"tune", config, "--points", "algorithm.learning_rate=0.1", "--grid",
           "algorithm.learning_rate=0.1,1", "--metric", "time_to_target", "--dry-run"});
  EXPECT_EQ(both.status, kExitBadInput);
  EXPECT_THAT(both.err, HasSubstr("algorithm.learning_rate is given by both --points and --grid"));
}

// --launch: each run as local processes (`asgd launch`), scored as any other.
TEST(Tune, LaunchRunsEachRunAsProcesses) {
  testing::TempDir dir;
  const std::string config = SimConfig(dir, "inproc");
  const std::string out = dir.File("tune");
  const Tuned t = RunAsgd(
      dir, {"tune", config, "--grid", "algorithm.learning_rate=0.1,1", "--metric", "final_accuracy",
            "--seeds", "1", "--extend", "0", "--set", "experiment.epochs=0.5", "--launch",
            "--parallel", "2", "--no-plots", "--out", out});
  ASSERT_EQ(t.status, 0) << t.out;
  const auto runs = ReadCsvRecords(out + "/tune.csv");
  ASSERT_EQ(runs.size(), 3u);
  for (const auto& r : runs) {
    EXPECT_EQ(r.at("outcome"), "scored") << r.at("label");
    EXPECT_EQ(ReadRunSummary(r.at("run_dir")).Get("transport"), "tcp");
  }
  EXPECT_THAT(ReadFile(out + "/logs/learning_rate_1-s1.log"), HasSubstr(" launch "));
}

}  // namespace
}  // namespace asgd::experiments
