// time_s is training time for every in-process runner (TrainingClock's rule), checked here
// only where no machine speed enters:
//   - it is positive and never more than the wall time the whole run took (measured around
//     it here), for a run that evaluates rarely and one that evaluates ten times as often;
//     convergence.csv's time_s never goes back nor passes that wall time;
//   - a distributed run whose steps carry an injected sleep (delay.compute = constant)
//     counts that sleep: time_s >= (steps per worker - evaluations) x the sleep. (A hold
//     for an evaluation may start during a step, whose sleep then falls in held time; at
//     most one step per worker per evaluation.)
// That the evaluations are not counted is TrainingClock's rule, pinned on a ManualClock in
// run_core_test.cc; what it saves on a real run (about the same time_s for 2 and for 11
// evaluations, where counting them would triple it) depends on the machine and is
// measured by benchmarks/training_time_bench.cc.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "experiments/record/csv.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

namespace fs = std::filesystem;

struct Timed {
  double time_s = 0;              // summary.csv's wall_time_s: the training time at the end
  double wall_s = 0;              // measured around the whole run
  int64_t steps = 0;              // summary.csv's steps, summed over workers
  std::vector<double> row_times;  // convergence.csv's time_s, row by row
};

// The cells of a CSV's first data row, by column name.
std::map<std::string, std::string> FirstRow(const std::string& csv) {
  std::istringstream in(csv);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  const auto names = ParseCsvLine(header), cells = ParseCsvLine(row);
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i < names.size() && i < cells.size(); ++i) out[names[i]] = cells[i];
  return out;
}

Timed TimedRun(const std::string& algorithm, double eval_every_epochs,
               const std::string& extra = "") {
  testing::TempDir dir;
  testing::WriteTestFile(
      dir.File("run.ini"),
      "[experiment]\nname = t\nprogress = off\nlog_level = error\nepochs = 2\nout_dir = " +
          dir.File("runs") +
          "\n[data]\ndataset = synthetic\nsynthetic_train = 2000\nsynthetic_test = 2000\n"
          "synthetic_classes = 3\nsynthetic_features = 16\n[model]\nname = mlp\nhidden = 16\n"
          "[algorithm]\nname = " +
          algorithm + "\nbatch_size = 8\nlearning_rate = 0.05\n" +
          (algorithm == "sgd" ? "" : "workers = 2\n[cluster]\ntransport = memory\n") +
          "[metrics]\neval_examples = 0\neval_every_epochs = " + std::to_string(eval_every_epochs) +
          "\n" + extra);
  std::ostringstream out, err;
  const auto start = std::chrono::steady_clock::now();
  const int status = Main({"run", dir.File("run.ini")}, out, err);
  Timed t;
  t.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(status, 0) << err.str() << out.str();
  std::vector<fs::path> runs(fs::directory_iterator(dir.File("runs")), {});
  if (runs.size() != 1) {
    ADD_FAILURE() << runs.size() << " run folders";
    return t;
  }
  const auto summary = FirstRow(ReadFile((runs[0] / "summary.csv").string()));
  t.time_s = std::stod(summary.at("wall_time_s"));
  t.steps = std::stoll(summary.at("steps"));
  std::istringstream csv(ReadFile((runs[0] / "convergence.csv").string()));
  std::string line;
  std::getline(csv, line);
  const auto header = ParseCsvLine(line);
  const auto col =
      static_cast<std::size_t>(std::find(header.begin(), header.end(), "time_s") - header.begin());
  while (std::getline(csv, line)) t.row_times.push_back(std::stod(ParseCsvLine(line).at(col)));
  return t;
}

// The bounds that hold on any machine, for a run that evaluates every 2 epochs (the
// initial and the final evaluation) and one that evaluates every 0.2 (9 more).
void ExpectWithinTheRun(const Timed& t, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_GT(t.time_s, 0);
  EXPECT_LE(t.time_s, t.wall_s);
  ASSERT_FALSE(t.row_times.empty());
  EXPECT_TRUE(std::is_sorted(t.row_times.begin(), t.row_times.end()));
  EXPECT_LE(t.row_times.back(), t.wall_s);
}

TEST(TrainingTime, SequentialBaselineTimeIsWithinItsRun) {
  const Timed rare = TimedRun("sgd", 2.0);
  const Timed often = TimedRun("sgd", 0.2);
  ExpectWithinTheRun(rare, "every 2 epochs");
  ExpectWithinTheRun(often, "every 0.2 epochs");
  EXPECT_EQ(rare.row_times.size(), 2u);
  EXPECT_GE(often.row_times.size(), rare.row_times.size() + 6);
}

TEST(TrainingTime, DistributedRunCountsItsStepsAndIsWithinItsRun) {
  constexpr double kSleepS = 0.002;  // delay.mean_ms = 2
  const std::string delay = "[delay]\ncompute = constant\nmean_ms = 2\n";
  for (const double every : {2.0, 0.2}) {
    const Timed t = TimedRun("downpour", every, delay);
    const std::string what = "every " + std::to_string(every) + " epochs";
    ExpectWithinTheRun(t, what);
    // 2 epochs of 2000 examples in batches of 8: 500 steps over the 2 workers.
    EXPECT_GE(t.steps, 496) << what;
    const auto evaluations = static_cast<int64_t>(t.row_times.size());
    const double at_least = static_cast<double>(t.steps / 2 - evaluations) * kSleepS;
    EXPECT_GE(t.time_s, at_least) << what << ": " << t.steps << " steps, " << evaluations
                                  << " evaluations";
  }
}

}  // namespace
}  // namespace asgd::experiments
