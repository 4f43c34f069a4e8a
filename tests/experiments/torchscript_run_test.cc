// `asgd run` with model.name = torchscript: a small scripted MLP trained by a representative
// set of strategies (sequential, parameter server on threads, Hogwild, synchronous, elastic,
// the collective, the simulator), the final_model.pt a run writes evaluated by PyTorch in
// Python to the accuracy the run reported, and a bad model file refused before the run
// folder exists. The modules are scripted by /usr/bin/python3 once per build tree
// (tests/support/python_torch.h); every test skips, saying so, where that Python cannot
// import torch or the build has no TorchScript backend.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "algorithms/strategy.h"
#include "core/build_config.h"
#include "core/file_util.h"
#include "datasets/loader.h"
#include "experiments/cli/cli.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/setup.h"
#include "tests/experiments/launch_test_util.h"
#include "tests/support/python_torch.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

using ::asgd::testing::kPython;
using ::asgd::testing::PythonHasTorch;

#define REQUIRE_TORCH()                                                            \
  do {                                                                             \
    if (!ASGD_HAVE_TORCH) GTEST_SKIP() << "this build has no TorchScript backend"; \
    if (!PythonHasTorch()) {                                                       \
      GTEST_SKIP() << kPython                                                      \
                   << " cannot import torch (Debian: python3-torch): no module "   \
                      "to train";                                                  \
    }                                                                              \
  } while (0)

// The scripted MLP 16-16-3 every test trains, copied beside the configs (model.file
// is relative to the config file's folder).
class TorchScriptRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!ASGD_HAVE_TORCH || !PythonHasTorch()) return;
    dir_ = new testing::TempDir();
    ASSERT_TRUE(
        testing::WriteByPython("import sys, torch\ntorch.manual_seed(0)\n"
                               "m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), "
                               "torch.nn.Linear(16, 3))\n"
                               "torch.jit.save(torch.jit.script(m), sys.argv[1])\n",
                               dir_->File("mlp.pt")));
    // A tiny CNN with BatchNorm on the 16 features seen as 1x4x4 images.
    ASSERT_TRUE(
        testing::WriteByPython("import sys, torch\ntorch.manual_seed(0)\n"
                               "m = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), "
                               "torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(), "
                               "torch.nn.Linear(64, 3))\n"
                               "torch.jit.save(torch.jit.script(m), sys.argv[1])\n",
                               dir_->File("bn.pt")));
    // Dropout between the layers: its masks come from torch's generator.
    ASSERT_TRUE(
        testing::WriteByPython("import sys, torch\ntorch.manual_seed(0)\n"
                               "m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), "
                               "torch.nn.Dropout(0.5), torch.nn.Linear(16, 3))\n"
                               "torch.jit.save(torch.jit.script(m), sys.argv[1])\n",
                               dir_->File("dropout.pt")));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static testing::TempDir* dir_;
};
testing::TempDir* TorchScriptRun::dir_ = nullptr;

struct Outcome {
  int status;
  std::string out, err, run_dir;
  nlohmann::json provenance;
};

// Writes <folder>/run.ini (the model file relative to it) and runs it.
Outcome RunTs(const std::string& folder, const std::string& body,
              const std::string& model_file = "../mlp.pt") {
  fs::create_directories(folder);
  testing::WriteTestFile(
      folder + "/run.ini",
      "[experiment]\nname = ts\nprogress = off\nlog_level = error\nepochs = 3\nout_dir = " +
          folder +
          "/runs\n[data]\ndataset = synthetic\nsynthetic_train = 3000\n"
          "synthetic_test = 600\nsynthetic_classes = 3\nsynthetic_features = 16\n"
          "[model]\nname = torchscript\nfile = " +
          model_file + "\n" + body);
  std::ostringstream out, err;
  Outcome o;
  o.status = Main({"run", folder + "/run.ini"}, out, err);
  o.out = out.str();
  o.err = err.str();
  if (fs::exists(folder + "/runs")) {
    for (const auto& e : fs::directory_iterator(folder + "/runs")) {
      o.run_dir = e.path().string();
      o.provenance = nlohmann::json::parse(ReadFile((e.path() / "provenance.json").string()));
    }
  }
  return o;
}

class TorchScriptStrategies : public TorchScriptRun,
                              public ::testing::WithParamInterface<std::string> {};

// The scripted module learns the separable problem under every strategy, and in the
// simulator (chance is 0.33; asgd's own MLP of this shape reaches about 0.93), with the
// settings of parallel_test's EveryStrategy; every run writes final_model.pt.
TEST_P(TorchScriptStrategies, Learns) {
  REQUIRE_TORCH();
  const std::string& param = GetParam();
  const bool sim = param == "downpour_sim";
  const std::string name = sim ? "downpour" : param;
  const int workers = name == "sgd" ? 1 : testing::RunTestWorkers(name);
  const Outcome o = RunTs(dir_->File(param), "[algorithm]\nname = " + name +
                                                 "\nworkers = " + std::to_string(workers) +
                                                 "\nwindow = 2\nlearning_rate = 0.1\n" +
                                                 (name == "sagn" ? "aggregation = sum\n" : "") +
                                                 (sim ? "[cluster]\ntransport = sim\n" : ""));
  ASSERT_EQ(o.status, 0) << o.err << o.out;
  EXPECT_GE(std::stod(o.provenance["final_test_accuracy"].get<std::string>()), 0.85) << o.out;
  EXPECT_TRUE(fs::exists(o.run_dir + "/final_model.pt")) << o.run_dir;
}

// Every strategy of the registry (a new one is covered), the sequential baseline, and a
// simulated run with the measured step time.
std::vector<std::string> Strategies() {
  std::vector<std::string> names;
  for (const std::string& name : algorithms::StrategyNames()) {
    if (algorithms::FindStrategy(name).name == name) names.push_back(name);
  }
  names.push_back("downpour_sim");
  return names;
}

INSTANTIATE_TEST_SUITE_P(Every, TorchScriptStrategies, ::testing::ValuesIn(Strategies()),
                         [](const auto& param_info) { return param_info.param; });

// The accuracy of `model` (a .pt a run wrote) on the test set of the run configured by
// `config`, evaluated by torch.jit.load in Python in eval() mode, the test examples shaped
// as `view`; scratch files go to `folder`.
double PythonAccuracy(const std::string& config_path, const std::string& folder,
                      const std::string& model, const std::string& view = "-1, 16") {
  const Config config = Config::FromFile(config_path, {}, ExperimentSchema());
  const datasets::TrainTest data = datasets::LoadDataset(BuildDataOptions(config, {}));
  const datasets::Dataset& test = data.test;
  {
    std::ofstream x(folder + "/x.f32", std::ios::binary), y(folder + "/y.i32", std::ios::binary);
    x.write(reinterpret_cast<const char*>(test.dense.data()),
            static_cast<std::streamsize>(test.dense.size() * sizeof(float)));
    y.write(reinterpret_cast<const char*>(test.labels.data()),
            static_cast<std::streamsize>(test.labels.size() * sizeof(int32_t)));
  }
  testing::WriteTestFile(
      folder + "/eval.py",
      "import sys, numpy, torch\nm = torch.jit.load(sys.argv[1]).eval()\n"
      "x = torch.from_numpy(numpy.fromfile(sys.argv[2], dtype=numpy.float32)).view(" +
          view +
          ")\n"
          "y = torch.from_numpy(numpy.fromfile(sys.argv[3], dtype=numpy.int32)).long()\n"
          "with torch.no_grad():\n    correct = int((m(x).argmax(1) == y).sum())\n"
          "print(correct, len(y))\n");
  const std::string command = std::string(kPython) + " " + folder + "/eval.py " + model + " " +
                              folder + "/x.f32 " + folder + "/y.i32 > " + folder + "/eval.txt";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(folder + "/eval.txt");
  int64_t correct = -1, count = -1;
  in >> correct >> count;
  EXPECT_EQ(count, test.num_examples);
  return static_cast<double>(correct) / static_cast<double>(count);
}

// The same for the final_model.pt of a run of RunTs in folder.
double PythonAccuracy(const std::string& folder, const Outcome& o,
                      const std::string& view = "-1, 16") {
  return PythonAccuracy(folder + "/run.ini", folder, o.run_dir + "/final_model.pt", view);
}

// The highest test accuracy of a run's convergence.csv, and the first row that has it.
double BestAccuracy(const std::string& run_dir) {
  std::ifstream in(run_dir + "/convergence.csv");
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> names = ParseCsvLine(line);
  const auto column = std::find(names.begin(), names.end(), "test_accuracy") - names.begin();
  double best = -1;
  while (std::getline(in, line)) {
    best = std::max(best, std::stod(ParseCsvLine(line)[static_cast<std::size_t>(column)]));
  }
  return best;
}

// A config for `asgd launch` of `algorithm` on the scripted MLP (copied beside it).
std::string LaunchConfig(const testing::TempDir& dir, const std::string& algorithm,
                         const std::string& model_file) {
  using namespace launch_test;  // NOLINT: the helpers of launch_test_util.h
  fs::copy_file(model_file, dir.File("mlp.pt"));
  const std::string config =
      TrainingConfig(dir, algorithm, "[model]\nname = torchscript\nfile = mlp.pt\n");
  // TrainingConfig's [model] comes first; the second section's keys would be duplicates.
  std::string text = ReadFile(config);
  const std::string mlp = "[model]\nname = mlp\nhidden = 16\n";
  EXPECT_NE(text.find(mlp), std::string::npos) << text;
  if (text.find(mlp) != std::string::npos) text.replace(text.find(mlp), mlp.size(), "");
  testing::WriteTestFile(config, text);
  return config;
}

// Launches `algorithm` on the scripted MLP as processes and checks the run: completed, no
// process left, and final_model.pt and best_model.pt in the coordinator's run folder, which
// Python evaluates to the final and the best accuracy the run reported. Returns launch's
// output and the summary row.
std::pair<std::string, std::map<std::string, std::string>> LaunchAndCheckTheModels(
    const std::string& algorithm, const std::string& model_file) {
  using namespace launch_test;  // NOLINT: the helpers of launch_test_util.h
  testing::TempDir dir;
  const std::string config = LaunchConfig(dir, algorithm, model_file);
  Subprocess launch({kAsgd, "launch", config}, dir.File("launch.log"));
  const auto status = launch.Wait(kTimeout);
  EXPECT_TRUE(status.has_value()) << "launch hung:\n" << launch.Output();
  if (!status.has_value()) return {launch.Output(), {}};
  EXPECT_EQ(*status, 0) << launch.Output();
  fs::path run;
  auto s = Summary(dir, &run);
  EXPECT_EQ(s["status"], "completed");
  for (pid_t pid : ChildPids(launch.Output())) EXPECT_FALSE(Alive(pid)) << pid;
  for (const char* file : {"final_model.pt", "best_model.pt"}) {
    EXPECT_TRUE(fs::exists(run / file)) << run << "/" << file;
    if (!fs::exists(run / file)) return {launch.Output(), s};
  }
  EXPECT_NEAR(PythonAccuracy(config, dir.path(), (run / "final_model.pt").string()),
              std::stod(s["final_test_accuracy"]), 0.5 / 600.0);
  EXPECT_NEAR(PythonAccuracy(config, dir.path(), (run / "best_model.pt").string()),
              BestAccuracy(run.string()), 0.5 / 600.0);
  return {launch.Output(), s};
}

// `asgd launch`: the parameter server, the workers and the evaluator as processes, each
// loading the module from the file the config names (relative to the config's folder). The
// evaluator process writes final_model.pt and best_model.pt into the coordinator's run
// folder.
TEST_F(TorchScriptRun, DownpourAsProcessesLearnsAndTheEvaluatorWritesTheModels) {
  REQUIRE_TORCH();
  auto [output, s] = LaunchAndCheckTheModels("downpour", dir_->File("mlp.pt"));
  EXPECT_THAT(output, HasSubstr("evaluator"));  // a process of its own
  EXPECT_EQ(s["model"], "torchscript");
  EXPECT_GE(std::stod(s["final_test_accuracy"]), 0.85);
}

// A strategy on a collective as processes: rank 0 evaluates the workers' average and
// writes the models into the coordinator's run folder.
TEST_F(TorchScriptRun, AllreduceAsProcessesWritesTheModelsFromRankZero) {
  REQUIRE_TORCH();
  (void)LaunchAndCheckTheModels("allreduce_sgd", dir_->File("mlp.pt"));
}

// A module with BatchNorm trains with 2 worker threads (each keeps its own statistics),
// and its final_model.pt holds the statistics the run's last evaluation recomputed: Python
// evaluates it to the accuracy the run reported.
TEST_F(TorchScriptRun, BatchNormModuleTrainsAndEvaluatesInPythonAsReported) {
  REQUIRE_TORCH();
  const std::string folder = dir_->File("bn");
  const Outcome o = RunTs(folder,
                          "input_shape = 1,4,4\nbn_batches = 5\n[algorithm]\nname = downpour\n"
                          "workers = 2\nlearning_rate = 0.05\n",
                          "../bn.pt");
  ASSERT_EQ(o.status, 0) << o.err << o.out;
  const double reported = std::stod(o.provenance["final_test_accuracy"].get<std::string>());
  EXPECT_GT(reported, 0.6);  // chance is 0.33
  EXPECT_NEAR(PythonAccuracy(folder, o, "-1, 1, 4, 4"), reported, 0.5 / 600.0);
}

// final_model.pt, loaded by torch.jit.load in Python, evaluates on the run's test set to
// the final accuracy the run reported.
TEST_F(TorchScriptRun, FinalModelEvaluatesInPythonToTheReportedAccuracy) {
  REQUIRE_TORCH();
  const std::string folder = dir_->File("final");
  const Outcome o =
      RunTs(folder, "[algorithm]\nname = downpour\nworkers = 2\nlearning_rate = 0.05\n");
  ASSERT_EQ(o.status, 0) << o.err << o.out;
  const double reported = std::stod(o.provenance["final_test_accuracy"].get<std::string>());
  EXPECT_NEAR(PythonAccuracy(folder, o), reported, 0.5 / 600.0);
  // Training moved the parameters: the file is not the one the run started from.
  EXPECT_NE(ReadFile(o.run_dir + "/final_model.pt"), ReadFile(dir_->File("mlp.pt")));
}

// best_model.pt holds the parameters of the run's best evaluation: Python evaluates it to
// the highest test accuracy of convergence.csv, for the sequential, threaded, collective
// and simulated drivers.
TEST_F(TorchScriptRun, BestModelEvaluatesInPythonToTheBestAccuracy) {
  REQUIRE_TORCH();
  for (const std::string run : {"sgd", "downpour", "allreduce_sgd", "sim"}) {
    SCOPED_TRACE(run);
    const std::string folder = dir_->File("best_" + run);
    const std::string name = run == "sim" ? "async_sgd" : run;
    // A high rate and short evaluations apart, so that the accuracy moves between them.
    const Outcome o =
        RunTs(folder, "[algorithm]\nname = " + name + "\nworkers = " + (run == "sgd" ? "1" : "2") +
                          "\nlearning_rate = 0.5\n[metrics]\n"
                          "eval_every_epochs = 0.25\n" +
                          (run == "sim" ? "[cluster]\ntransport = sim\n" : ""));
    ASSERT_EQ(o.status, 0) << o.err << o.out;
    ASSERT_TRUE(fs::exists(o.run_dir + "/best_model.pt")) << o.run_dir;
    EXPECT_NEAR(PythonAccuracy(folder + "/run.ini", folder, o.run_dir + "/best_model.pt"),
                BestAccuracy(o.run_dir), 0.5 / 600.0);
  }
}

// Scripts to dir_/<file> a Linear(16, 3) whose forward returns NaN logits when `when`
// (TorchScript, over `steps`: the training forwards so far, this one included) holds.
void ScriptNanModule(const std::string& when, const std::string& file) {
  const std::string program = R"(import sys, torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 3)
        self.register_buffer('steps', torch.zeros(1))
    def forward(self, x):
        if self.training:
            self.steps.add_(1)
        if bool()" + when + R"():
            return self.fc(x) * float('nan')
        return self.fc(x)
torch.jit.save(torch.jit.script(M()), sys.argv[1])
)";
  ASSERT_TRUE(testing::WriteByPython(program, file));
}

// A module whose forward gives NaN in training whatever its parameters: the run stops at
// the first step and says the model produced it before any update, naming model.file, not
// that the learning rate is too high: in the sequential run, on threads and in the
// simulator.
TEST_F(TorchScriptRun, NanFromTheModuleAtTheFirstStepBlamesTheModelNotTheRate) {
  REQUIRE_TORCH();
  ScriptNanModule("self.training", dir_->File("nan.pt"));
  for (const std::string run : {"sgd", "downpour", "sim"}) {
    SCOPED_TRACE(run);
    const Outcome o =
        RunTs(dir_->File("nan_" + run),
              std::string("[algorithm]\nname = ") + (run == "sim" ? "async_sgd" : run) +
                  "\nworkers = " + (run == "sgd" ? "1" : "2") + "\nlearning_rate = 0.01\n" +
                  (run == "sim" ? "[cluster]\ntransport = sim\n" : ""),
              "../nan.pt");
    EXPECT_EQ(o.status, 2) << o.err << o.out;
    EXPECT_THAT(o.out, HasSubstr("training loss is NaN"));
    EXPECT_THAT(o.out, HasSubstr("at the first step, before any update: the model (model.file = " +
                                 dir_->File("nan.pt") + ")"));
    EXPECT_THAT(o.out, ::testing::Not(HasSubstr("lower algorithm.learning_rate"))) << o.out;
  }
}

// A NaN after updates keeps the advice to lower the rate: a module whose forward gives
// NaN from its 4th training step on.
TEST_F(TorchScriptRun, NanAfterUpdatesStillAdvisesALowerRate) {
  REQUIRE_TORCH();
  ScriptNanModule("self.steps > 3", dir_->File("late_nan.pt"));
  const Outcome o = RunTs(dir_->File("late_nan"), "[algorithm]\nname = sgd\nlearning_rate = 0.05\n",
                          "../late_nan.pt");
  EXPECT_EQ(o.status, 2) << o.err << o.out;
  EXPECT_THAT(o.out, HasSubstr("training loss is NaN at update 4; lower algorithm.learning_rate "
                               "(now 0.05)"));
}

// The rows of a run's convergence.csv without the wall-clock column: what a run computed.
std::vector<std::string> ComputedRows(const std::string& run_dir) {
  std::ifstream in(run_dir + "/convergence.csv");
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> names = ParseCsvLine(line);
  std::vector<std::string> rows;
  while (std::getline(in, line)) {
    const std::vector<std::string> cells = ParseCsvLine(line);
    std::string row;
    for (std::size_t i = 0; i < cells.size() && i < names.size(); ++i) {
      if (names[i] != "time_s") row += names[i] + "=" + cells[i] + " ";
    }
    rows.push_back(row);
  }
  return rows;
}

// model.init = seed reaches the runs: θ₀ (which the first row of convergence.csv
// evaluates) is not the file's, and is the same again with the same seed, in the
// sequential run and on worker threads. (The synthetic data follow experiment.seed too,
// so that θ₀ follows the seed is tested on the model: SeedInitIsPyTorchsResetParameters.)
TEST_F(TorchScriptRun, SeedInitReachesTheRuns) {
  REQUIRE_TORCH();
  auto first_row = [&](const std::string& name, const std::string& init, int seed,
                       const std::string& algorithm) {
    const Outcome o =
        RunTs(dir_->File("init_" + name),
              "init = " + init + "\n[algorithm]\nname = " + algorithm +
                  "\nworkers = " + (algorithm == "sgd" ? "1" : "2") +
                  "\n[experiment]\nmax_steps = 2\nseed = " + std::to_string(seed) + "\n");
    EXPECT_EQ(o.status, 0) << o.err << o.out;
    const std::vector<std::string> rows = ComputedRows(o.run_dir);
    EXPECT_FALSE(rows.empty()) << o.run_dir;
    return rows.empty() ? std::string() : rows.front();
  };
  const std::string seed1 = first_row("seed1", "seed", 1, "sgd");
  EXPECT_THAT(seed1, HasSubstr("samples=0 "));
  EXPECT_EQ(seed1, first_row("seed1_again", "seed", 1, "sgd"));
  EXPECT_EQ(seed1, first_row("seed1_threads", "seed", 1, "downpour"));
  EXPECT_NE(seed1, first_row("file1", "file", 1, "sgd"));
  EXPECT_NE(first_row("seed2", "seed", 2, "sgd"), first_row("file2", "file", 2, "sgd"));
}

// With dropout, a sequential run and a simulated one (a step-time model that does not
// measure) are reproducible with the same seed, also after other runs in the process have
// drawn from torch's generator (which the tests' runs share: unseeded, the second run
// would draw other masks).
TEST_F(TorchScriptRun, DropoutRunsAreReproducibleWithTheSameSeed) {
  REQUIRE_TORCH();
  for (const std::string run : {"sgd", "sim"}) {
    SCOPED_TRACE(run);
    auto rows = [&](const std::string& name, int seed) {
      const Outcome o =
          RunTs(dir_->File("dropout_" + run + name),
                std::string("[algorithm]\nname = ") + (run == "sim" ? "async_sgd" : "sgd") +
                    "\nworkers = " + (run == "sim" ? "3" : "1") +
                    "\nlearning_rate = 0.1\n[metrics]\neval_every_epochs = 0.5\n"
                    "[experiment]\nseed = " +
                    std::to_string(seed) + "\n" +
                    (run == "sim" ? "[cluster]\ntransport = sim\n[delay]\ncompute = constant\n"
                                    "mean_ms = 1\n"
                                  : ""),
                "../dropout.pt");
      EXPECT_EQ(o.status, 0) << o.err << o.out;
      return ComputedRows(o.run_dir);
    };
    const std::vector<std::string> a = rows("a", 5);
    EXPECT_GT(a.size(), 3u);
    EXPECT_NE(a, rows("other", 6));
    EXPECT_EQ(a, rows("b", 5));
  }
}

// model.init other than file or seed: one line naming the key, exit status 2.
TEST_F(TorchScriptRun, BadInitIsOneLine) {
  testing::TempDir tmp;
  const Outcome o = RunTs(tmp.File("cfg"), "init = random\n[algorithm]\nname = sgd\n");
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_THAT(o.err, HasSubstr("model.init"));
  EXPECT_THAT(o.err, HasSubstr("file, seed"));
  EXPECT_FALSE(fs::exists(tmp.File("cfg") + "/runs"));
}

// A model file that is not there: one line naming it, exit status 2, no run folder. In a
// build without the backend, one line saying so.
TEST_F(TorchScriptRun, MissingFileIsOneLineAndNoRunFolder) {
  testing::TempDir tmp;
  const Outcome o = RunTs(tmp.File("cfg"), "[algorithm]\nname = sgd\n", "../absent.pt");
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  if (ASGD_HAVE_TORCH) {
    EXPECT_THAT(o.err, HasSubstr("absent.pt"));
    EXPECT_THAT(o.err, HasSubstr("model.file"));
  } else {
    EXPECT_THAT(o.err, HasSubstr("no TorchScript backend"));
  }
  EXPECT_FALSE(fs::exists(tmp.File("cfg") + "/runs"));
}

}  // namespace
}  // namespace asgd::experiments
