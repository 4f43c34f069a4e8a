// What TrainingClock's rule saves on a real run (issue 30: the part of the training-time
// test that depends on the machine). The same training, evaluated every 2 epochs (the
// initial and the final evaluation) and every 0.2 (9 more), through `asgd run`; the test
// set is 3 times the training set and evaluated whole, so the extra evaluations cost
// several times the training. Counters, per run:
//   time_s   the run's training time (summary.csv's wall_time_s): about the same for
//            rare and often (the evaluations are held time), where counting the
//            evaluations would make `often` several times `rare`
//   wall_s   the whole run, measured around it: grows with the evaluations
//   rows     convergence.csv rows (evaluations)
//
//   training_time_bench --benchmark_repetitions=3
//
// BM_TrainingTime/sgd_* is the sequential runner (it evaluates between steps);
// BM_TrainingTime/downpour_* the thread runner with 2 workers on the in-memory store,
// whose workers wait while the main thread evaluates.
#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>

#include <benchmark/benchmark.h>
#include <unistd.h>

#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "experiments/record/csv.h"

namespace asgd::experiments {
namespace {

namespace fs = std::filesystem;

void BM_TrainingTime(benchmark::State& state, const std::string& algorithm,
                     double eval_every_epochs) {
  const fs::path dir =
      fs::temp_directory_path() / ("asgd-training-time-bench-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string config = (dir / "run.ini").string();
  {
    std::ostringstream text;
    text << "[experiment]\nname = t\nprogress = off\nlog_level = error\nepochs = 2\n"
         << "out_dir = " << (dir / "runs").string() << "\n"
         << "[data]\ndataset = synthetic\nsynthetic_train = 50000\nsynthetic_test = 150000\n"
         << "synthetic_classes = 3\nsynthetic_features = 32\n[model]\nname = mlp\nhidden = 256\n"
         << "[algorithm]\nname = " << algorithm << "\nbatch_size = 8\nlearning_rate = 0.05\n"
         << (algorithm == "sgd" ? "" : "workers = 2\n[cluster]\ntransport = memory\n")
         << "[metrics]\neval_examples = 0\neval_every_epochs = " << eval_every_epochs << "\n";
    WriteFileAtomic(config, text.str());
  }
  double time_s = 0, wall_s = 0, rows = 0;
  for (auto _ : state) {
    fs::remove_all(dir / "runs");
    std::ostringstream out, err;
    const auto start = std::chrono::steady_clock::now();
    if (Main({"run", config}, out, err) != 0) {
      state.SkipWithError(("asgd run failed: " + err.str()).c_str());
      break;
    }
    wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& run : fs::directory_iterator(dir / "runs")) {
      std::istringstream summary(ReadFile((run.path() / "summary.csv").string()));
      std::string header, row;
      std::getline(summary, header);
      std::getline(summary, row);
      const auto names = ParseCsvLine(header), cells = ParseCsvLine(row);
      for (std::size_t i = 0; i < names.size() && i < cells.size(); ++i) {
        if (names[i] == "wall_time_s") time_s += std::stod(cells[i]);
      }
      const std::string csv = ReadFile((run.path() / "convergence.csv").string());
      for (char c : csv) rows += c == '\n' ? 1 : 0;
      rows -= 1;  // the header
    }
  }
  state.counters["time_s"] = benchmark::Counter(time_s, benchmark::Counter::kAvgIterations);
  state.counters["wall_s"] = benchmark::Counter(wall_s, benchmark::Counter::kAvgIterations);
  state.counters["rows"] = benchmark::Counter(rows, benchmark::Counter::kAvgIterations);
  fs::remove_all(dir);
}
BENCHMARK_CAPTURE(BM_TrainingTime, sgd_rare, "sgd", 2.0)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainingTime, sgd_often, "sgd", 0.2)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainingTime, downpour_rare, "downpour", 2.0)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainingTime, downpour_often, "downpour", 0.2)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

}  // namespace
}  // namespace asgd::experiments

BENCHMARK_MAIN();
