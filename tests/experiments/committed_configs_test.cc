// Every configuration committed under experiments/ and results/ loads with the current
// schema, so that a renamed or retired key cannot leave a shipped or a recorded config
// behind (the soak's configs once named algorithm.check_seconds long after [check]
// replaced it). Each file is read as the command that runs it reads it:
//   - an experiment config (experiments/configs, a results folder's own config): as
//     `asgd run --strict` does before it trains (an unknown, retired or invalid key, an
//     [algorithm] key the strategy does not read, the strategy's and the schedule's checks);
//   - a run folder's config.ini (every key resolved, written by the run): as `asgd run
//     --resume` reads it (a retired key at its old default loads, any other refuses);
//   - a suite file (experiments/suites, and the suite.ini a suite copies into its folder):
//     as `asgd suite --dry-run` reads it (each run's config with its sets);
//   - a config with [check] (results/soak): as `asgd ps-check` reads it.
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/strategy.h"
#include "core/error.h"
#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "experiments/config/config.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/setup.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = ASGD_SOURCE_DIR;

// The committed .ini files under a folder of the source tree (build folders and hidden
// ones left out), relative to the source tree.
std::vector<fs::path> IniFiles(const std::string& folder) {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(kSource / folder);
       it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name.rfind("build", 0) == 0 || name[0] == '.')) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == ".ini") {
      out.push_back(fs::relative(it->path(), kSource));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool HasSection(const std::string& text, const std::string& section) {
  return std::regex_search(text, std::regex("(^|\n)\\s*\\[" + section + "\\]"));
}

// "" when the experiment config loads as `asgd run --strict` reads it, else why not.
std::string CheckExperimentConfig(const fs::path& path, bool strict) {
  try {
    const Config config = Config::FromFile(path.string(), {}, ExperimentSchema());
    (void)BuildScheduleOptions(config);
    if (algorithms::FindStrategy(config.String("algorithm.name")).family !=
        algorithms::Family::kSequential) {
      (void)BuildStrategyOptions(config, 0);
    }
    if (strict) {
      const std::vector<std::string> ignored = IgnoredAlgorithmKeys(config);
      if (!ignored.empty()) {
        return config.String("algorithm.name") + " does not read " + ignored.front() +
               " (asgd run --strict)";
      }
    }
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// A suite file as `asgd suite --dry-run` reads it, from a copy in tmp whose config paths
// are absolute: each as the suite names it, relative to its folder. The copy a suite writes
// into its folder names them relative to the folder of the file that ran: the folder
// above (a suite file beside its results) or experiments/suites (a shipped suite).
std::string CheckSuite(const fs::path& path, const testing::TempDir& tmp) {
  const fs::path dir = path.parent_path();
  std::istringstream in(ReadFile(path.string()));
  std::string text, line;
  static const std::regex config_line(R"(^(\s*config\s*=\s*)(\S.*?)\s*$)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, config_line) && !fs::path(m[2].str()).is_absolute()) {
      fs::path config = dir / m[2].str();
      for (const fs::path& from : {dir, dir.parent_path(), kSource / "experiments/suites"}) {
        if (fs::exists(from / m[2].str())) {
          config = from / m[2].str();
          break;
        }
      }
      line = m[1].str() + config.lexically_normal().string();
    }
    text += line + "\n";
  }
  const std::string copy = tmp.File("suite.ini");
  testing::WriteTestFile(copy, text);
  std::ostringstream out, err;
  const int status = Main({"suite", copy, "--dry-run", "--out", tmp.File("out")}, out, err);
  return status == 0 ? "" : err.str();
}

enum class Kind { kExperiment, kRunFolder, kSuite, kCheck };

Kind Classify(const fs::path& path, const std::string& text) {
  if (HasSection(text, "suite")) return Kind::kSuite;
  if (HasSection(text, "check")) return Kind::kCheck;
  if (path.filename() == "config.ini" && fs::exists(path.parent_path() / "provenance.json")) {
    return Kind::kRunFolder;
  }
  return Kind::kExperiment;
}

TEST(CommittedConfigs, EveryIniUnderExperimentsAndResultsLoads) {
  std::map<Kind, int> counts;
  for (const std::string folder : {"experiments", "results"}) {
    for (const fs::path& relative : IniFiles(folder)) {
      const fs::path path = kSource / relative;
      const Kind kind = Classify(path, ReadFile(path.string()));
      ++counts[kind];
      std::string why;
      switch (kind) {
        case Kind::kExperiment:
          why = CheckExperimentConfig(path, /*strict=*/true);
          break;
        case Kind::kRunFolder:
          why = CheckExperimentConfig(path, /*strict=*/false);
          break;
        case Kind::kSuite: {
          testing::TempDir tmp;
          why = CheckSuite(path, tmp);
          break;
        }
        case Kind::kCheck:
          try {
            (void)Config::FromFile(path.string(), {}, ExperimentSchema());
          } catch (const std::exception& e) {
            why = e.what();
          }
          break;
      }
      EXPECT_EQ(why, "") << relative.string();
    }
  }
  // Every kind is there (a test that found no files would pass).
  EXPECT_GT(counts[Kind::kExperiment], 20);
  EXPECT_GT(counts[Kind::kRunFolder], 50);
  EXPECT_GE(counts[Kind::kSuite], 5);
  EXPECT_GE(counts[Kind::kCheck], 1);
}

}  // namespace
}  // namespace asgd::experiments
