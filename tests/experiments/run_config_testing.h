// What the end-to-end run tests of one process share (parallel_test.cc, collective_run_test.cc):
// `asgd run` of a config written into a test folder, its exit status, output and
// provenance, and a small synthetic problem.
#pragma once

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "tests/support/test_util.h"

namespace asgd::experiments::run_testing {

namespace fs = std::filesystem;

struct Outcome {
  int status;
  std::string out, err;
  nlohmann::json provenance;
};

inline Outcome RunConfig(const testing::TempDir& dir, const std::string& body,
                         const std::vector<std::string>& sets = {}) {
  testing::WriteTestFile(dir.File("run.ini"),
                         "[experiment]\nname = par\nprogress = off\nlog_level = error\n"
                         "out_dir = " +
                             dir.File("runs") + "\n" + body);
  std::vector<std::string> args = {"run", dir.File("run.ini")};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  std::ostringstream out, err;
  Outcome o;
  o.status = Main(args, out, err);
  o.out = out.str();
  o.err = err.str();
  if (fs::exists(dir.File("runs"))) {
    for (const auto& e : fs::directory_iterator(dir.File("runs"))) {
      o.provenance = nlohmann::json::parse(ReadFile((e.path() / "provenance.json").string()));
    }
  }
  return o;
}

inline const char* const kSynthetic =
    "epochs = 3\n[data]\ndataset = synthetic\nsynthetic_train = 3000\nsynthetic_test = 600\n"
    "synthetic_classes = 3\nsynthetic_features = 16\n[model]\nname = mlp\nhidden = 16\n";

}  // namespace asgd::experiments::run_testing
