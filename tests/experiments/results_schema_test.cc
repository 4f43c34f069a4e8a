// The run folder against its documentation in results/README.md: the files, the
// provenance keys and the convergence.csv columns, so the two cannot drift apart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/file_util.h"
#include "experiments/cli.h"
#include "experiments/csv.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

namespace fs = std::filesystem;

std::string Readme() { return ReadFile(std::string(ASGD_SOURCE_DIR) + "/results/README.md"); }

// The first cells (`name`) of the markdown table that follows `heading`.
std::vector<std::string> TableNames(const std::string& doc, const std::string& heading) {
  std::vector<std::string> names;
  size_t at = doc.find(heading);
  EXPECT_NE(at, std::string::npos) << heading;
  if (at == std::string::npos) return names;
  std::istringstream in(doc.substr(at + heading.size()));
  std::string line;
  bool in_table = false;
  static const std::regex row(R"(^\| `([a-z_0-9.]+)` \|)");
  while (std::getline(in, line)) {
    if (line.rfind("|", 0) == 0) {
      in_table = true;
      std::smatch m;
      if (std::regex_search(line, m, row)) names.push_back(m[1]);
    } else if (in_table) {
      break;
    }
  }
  return names;
}

// Runs a tiny synthetic experiment and returns its run folder.
fs::path RunTiny(const testing::TempDir& dir, const std::string& algorithm = "") {
  testing::WriteTestFile(dir.File("tiny.ini"),
                         "[experiment]\nname = schema\nepochs = 1\nprogress = off\n"
                         "log_level = error\nout_dir = " + dir.File("runs") +
                             "\n[data]\ndataset = synthetic\nsynthetic_train = 1000\n"
                             "synthetic_test = 200\n[model]\nname = mlp\nhidden = 8\n" +
                             algorithm);
  std::ostringstream out, err;
  EXPECT_EQ(Main({"run", dir.File("tiny.ini")}, out, err), kExitOk) << err.str();
  std::vector<fs::path> runs(fs::directory_iterator(dir.File("runs")), {});
  EXPECT_EQ(runs.size(), 1u);
  return runs.empty() ? fs::path() : runs[0];
}

TEST(ResultsSchema, ConvergenceColumnsAreExactlyTheDocumentedOnes) {
  testing::TempDir dir;
  fs::path run = RunTiny(dir);
  std::ifstream in(run / "convergence.csv");
  std::string header;
  ASSERT_TRUE(std::getline(in, header));
  EXPECT_EQ(ParseCsvLine(header), TableNames(Readme(), "### convergence.csv"));
  // Rows: one at the start, at least one at the end; every row as wide as the header.
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    ++rows;
    EXPECT_EQ(ParseCsvLine(line).size(), ParseCsvLine(header).size()) << line;
  }
  EXPECT_GE(rows, 2);
}

TEST(ResultsSchema, StalenessColumnsAreExactlyTheDocumentedOnes) {
  testing::TempDir dir;
  fs::path run = RunTiny(dir, "[algorithm]\nname = agn\nworkers = 3\nwindow = 2\n");
  std::ifstream in(run / "staleness.csv");
  std::string header;
  ASSERT_TRUE(std::getline(in, header));
  EXPECT_EQ(ParseCsvLine(header), TableNames(Readme(), "### staleness.csv"));
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    ++rows;
    EXPECT_EQ(ParseCsvLine(line).size(), ParseCsvLine(header).size()) << line;
  }
  EXPECT_GE(rows, 5);  // about 16 steps over 3 workers, a push every 2
  auto provenance = nlohmann::json::parse(ReadFile((run / "provenance.json").string()));
  const std::string doc = Readme();
  const size_t row = doc.find("| `provenance.json` |");
  const std::string documented = doc.substr(row, doc.find('\n', row) - row);
  for (const auto& [key, value] : provenance.items()) {
    EXPECT_NE(documented.find("`" + key + "`"), std::string::npos) << key << " is undocumented";
  }
  EXPECT_TRUE(provenance.contains("mean_staleness"));
}

TEST(ResultsSchema, RunFolderHoldsTheDocumentedFiles) {
  testing::TempDir dir;
  fs::path run = RunTiny(dir);
  for (const std::string& file : TableNames(Readme(), "## A run folder")) {
    if (file == "staleness.csv") continue;  // distributed strategies only
    EXPECT_TRUE(fs::exists(run / file)) << file;
  }
  // config.ini is the resolved config: it names keys the file never set.
  EXPECT_NE(ReadFile((run / "config.ini").string()).find("learning_rate"), std::string::npos);
}

TEST(ResultsSchema, ProvenanceKeysAreDocumented) {
  testing::TempDir dir;
  fs::path run = RunTiny(dir);
  auto provenance = nlohmann::json::parse(ReadFile((run / "provenance.json").string()));
  const std::string doc = Readme();
  const size_t row = doc.find("| `provenance.json` |");
  ASSERT_NE(row, std::string::npos);
  const std::string documented = doc.substr(row, doc.find('\n', row) - row);
  for (const auto& [key, value] : provenance.items()) {
    EXPECT_NE(documented.find("`" + key + "`"), std::string::npos) << key << " is undocumented";
  }
  for (const char* key : {"git_commit", "host", "compiler", "seed", "start_time", "status"}) {
    EXPECT_TRUE(provenance.contains(key)) << key;
  }
  EXPECT_EQ(provenance["status"], "completed");
}

}  // namespace
}  // namespace asgd::experiments
