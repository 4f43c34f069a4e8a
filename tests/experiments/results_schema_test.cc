// The run folder against its documentation in results/README.md: the files, the
// provenance keys and the convergence.csv columns, so the two cannot drift apart.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "experiments/record/csv.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

namespace fs = std::filesystem;

std::string Readme() { return ReadFile(std::string(ASGD_SOURCE_DIR) + "/results/README.md"); }

std::vector<std::string> TableNames(const std::string& doc, const std::string& heading) {
  return testing::MarkdownTableNames(doc, heading);
}

// Runs a tiny synthetic experiment and returns its run folder.
fs::path RunTiny(const testing::TempDir& dir, const std::string& algorithm = "") {
  testing::WriteTestFile(dir.File("tiny.ini"),
                         "[experiment]\nname = schema\nepochs = 1\nprogress = off\n"
                         "log_level = error\nout_dir = " +
                             dir.File("runs") +
                             "\n[data]\ndataset = synthetic\nsynthetic_train = 1000\n"
                             "synthetic_test = 200\n[model]\nname = mlp\nhidden = 8\n" +
                             algorithm);
  std::ostringstream out, err;
  EXPECT_EQ(Main({"run", dir.File("tiny.ini")}, out, err), kExitOk) << err.str();
  std::vector<fs::path> runs(fs::directory_iterator(dir.File("runs")), {});
  EXPECT_EQ(runs.size(), 1u);
  return runs.empty() ? fs::path() : runs[0];
}

// A run that compresses its pushes with error feedback (issue 17).
constexpr const char* kCompressedAsync =
    "[algorithm]\nname = async_sgd\nworkers = 2\n"
    "[compression]\nname = topk\nratio = 0.1\nerror_feedback = true\n";

TEST(ResultsSchema, ConvergenceColumnsAreExactlyTheDocumentedOnes) {
  // ef_residual_norm, documented last, only when error feedback is on.
  for (const bool ef : {false, true}) {
    SCOPED_TRACE(ef ? "error feedback" : "plain");
    testing::TempDir dir;
    fs::path run = RunTiny(dir, ef ? kCompressedAsync : "");
    std::ifstream in(run / "convergence.csv");
    std::string header;
    ASSERT_TRUE(std::getline(in, header));
    std::vector<std::string> documented = TableNames(Readme(), "### convergence.csv");
    ASSERT_EQ(documented.back(), "ef_residual_norm");
    if (!ef) documented.pop_back();
    EXPECT_EQ(ParseCsvLine(header), documented);
    // Rows: one at the start, at least one at the end; every row as wide as the header.
    std::string line;
    int rows = 0;
    while (std::getline(in, line)) {
      ++rows;
      EXPECT_EQ(ParseCsvLine(line).size(), ParseCsvLine(header).size()) << line;
    }
    EXPECT_GE(rows, 2);
  }
}

// The rows of a CSV file of the run, the header first.
std::vector<std::vector<std::string>> CsvRows(const fs::path& file) {
  std::ifstream in(file);
  EXPECT_TRUE(in) << file;
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) rows.push_back(ParseCsvLine(line));
  return rows;
}

// summary.csv, workers.csv and staleness_histogram.csv hold exactly the documented
// columns, rows as wide as the header, and agree with each other and with staleness.csv.
TEST(ResultsSchema, SummaryWorkersAndHistogramAreTheDocumentedOnes) {
  testing::TempDir dir;
  fs::path run = RunTiny(dir,
                         "[algorithm]\nname = agn\nworkers = 3\nwindow = 2\n"
                         "[metrics]\nstaleness_rows = 4\n");
  const auto summary = CsvRows(run / "summary.csv");
  ASSERT_EQ(summary.size(), 2u);
  EXPECT_EQ(summary[0], TableNames(Readme(), "### summary.csv"));
  ASSERT_EQ(summary[1].size(), summary[0].size());
  std::map<std::string, std::string> row;
  for (std::size_t i = 0; i < summary[0].size(); ++i) row[summary[0][i]] = summary[1][i];
  EXPECT_EQ(row["run_id"], run.filename().string());
  EXPECT_EQ(row["algorithm"], "agn");
  EXPECT_EQ(row["workers"], "3");
  EXPECT_EQ(row["transport"], "inproc");
  EXPECT_EQ(row["status"], "completed");

  const auto workers = CsvRows(run / "workers.csv");
  ASSERT_EQ(workers.size(), 4u);  // header + 3 workers
  EXPECT_EQ(workers[0], TableNames(Readme(), "### workers.csv"));
  int64_t samples = 0, pushes = 0, bytes = 0;
  for (std::size_t w = 1; w < workers.size(); ++w) {
    ASSERT_EQ(workers[w].size(), workers[0].size());
    samples += std::stoll(workers[w][2]);
    pushes += std::stoll(workers[w][6]);
    bytes += std::stoll(workers[w][7]);
  }
  EXPECT_EQ(std::to_string(samples), row["samples"]);
  EXPECT_EQ(std::to_string(pushes), row["updates"]);
  EXPECT_EQ(std::to_string(bytes), row["bytes_pushed"]);

  // Only 4 rows in staleness.csv, but the histogram counts every push exactly.
  EXPECT_EQ(CsvRows(run / "staleness.csv").size(), 5u);
  const auto histogram = CsvRows(run / "staleness_histogram.csv");
  EXPECT_EQ(histogram[0], TableNames(Readme(), "### staleness_histogram.csv"));
  int64_t counted = 0;
  for (std::size_t i = 1; i < histogram.size(); ++i) counted += std::stoll(histogram[i][2]);
  EXPECT_EQ(counted, pushes);
  auto provenance = nlohmann::json::parse(ReadFile((run / "provenance.json").string()));
  EXPECT_EQ(provenance["staleness_records"], std::to_string(pushes));
}

// A compressed run reports the bytes on the wire and their dense equivalent: the ratio
// is theirs, the workers' bytes add up to the summary's, and error feedback's residual
// shows in convergence.csv.
TEST(ResultsSchema, CompressedRunReportsWireAndDenseBytes) {
  testing::TempDir dir;
  fs::path run = RunTiny(dir, kCompressedAsync);
  const auto summary = CsvRows(run / "summary.csv");
  ASSERT_EQ(summary.size(), 2u);
  std::map<std::string, std::string> row;
  for (std::size_t i = 0; i < summary[0].size(); ++i) row[summary[0][i]] = summary[1][i];
  EXPECT_EQ(row["compression"], "topk+ef");
  const int64_t wire = std::stoll(row["bytes_pushed"]);
  const int64_t dense = std::stoll(row["dense_bytes_pushed"]);
  EXPECT_GT(wire, 0);
  // Every push is 4 bytes per parameter dense; topk at 10 % sends 8 bytes per kept one.
  EXPECT_EQ(dense % std::stoll(row["updates"]), 0);
  EXPECT_LT(wire, dense);
  EXPECT_NEAR(std::stod(row["compression_ratio"]),
              static_cast<double>(dense) / static_cast<double>(wire), 1e-6 * dense / wire);
  const auto workers = CsvRows(run / "workers.csv");
  ASSERT_EQ(workers.size(), 3u);
  auto column = [&workers](const std::string& name) {
    return static_cast<std::size_t>(
        std::find(workers[0].begin(), workers[0].end(), name) - workers[0].begin());
  };
  const std::size_t wire_at = column("bytes_pushed"), dense_at = column("dense_bytes_pushed");
  ASSERT_LT(dense_at, workers[0].size());
  int64_t worker_wire = 0, worker_dense = 0;
  for (std::size_t w = 1; w < workers.size(); ++w) {
    worker_wire += std::stoll(workers[w][wire_at]);
    worker_dense += std::stoll(workers[w][dense_at]);
  }
  EXPECT_EQ(worker_wire, wire);
  EXPECT_EQ(worker_dense, dense);
  const auto convergence = CsvRows(run / "convergence.csv");
  ASSERT_GE(convergence.size(), 3u);
  EXPECT_EQ(convergence[1].back(), "0");  // before any push
  EXPECT_GT(std::stod(convergence.back().back()), 0);
}

// The sequential baseline writes the same summary (no staleness: nan) and one worker.
TEST(ResultsSchema, SequentialRunWritesSummaryAndOneWorker) {
  testing::TempDir dir;
  fs::path run = RunTiny(dir);
  const auto summary = CsvRows(run / "summary.csv");
  ASSERT_EQ(summary.size(), 2u);
  EXPECT_EQ(summary[0], TableNames(Readme(), "### summary.csv"));
  std::map<std::string, std::string> row;
  for (std::size_t i = 0; i < summary[0].size(); ++i) row[summary[0][i]] = summary[1][i];
  EXPECT_EQ(row["algorithm"], "sgd");
  EXPECT_EQ(row["transport"], "none");
  EXPECT_EQ(row["staleness_mean"], "nan");
  EXPECT_EQ(CsvRows(run / "workers.csv").size(), 2u);
  EXPECT_FALSE(fs::exists(run / "staleness.csv"));
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

// The rows of a run's staleness.csv as column -> value maps.
std::vector<std::map<std::string, std::string>> StalenessRows(const fs::path& run) {
  const auto rows = CsvRows(run / "staleness.csv");
  std::vector<std::map<std::string, std::string>> out;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    std::map<std::string, std::string> row;
    for (std::size_t c = 0; c < rows[0].size() && c < rows[i].size(); ++c) {
      row[rows[0][c]] = rows[i][c];
    }
    out.push_back(row);
  }
  return out;
}

std::map<std::string, std::string> SummaryRow(const fs::path& run) {
  const auto summary = CsvRows(run / "summary.csv");
  std::map<std::string, std::string> row;
  if (summary.size() != 2) return row;
  for (std::size_t i = 0; i < summary[0].size(); ++i) row[summary[0][i]] = summary[1][i];
  return row;
}

// Backup workers: every push a round dropped has its row with dropped = 1 (and outcome
// dropped), as many as summary.csv's dropped_pushes; the histogram and the staleness
// statistics count the others only.
TEST(ResultsSchema, DroppedPushesHaveRowsAndStayOutOfTheStatistics) {
  testing::TempDir dir;
  // Batches of one: about 250 rounds, so that every worker takes part (a round drops the
  // push of whichever worker comes fourth) however late a thread starts.
  fs::path run = RunTiny(dir,
                         "[algorithm]\nname = sync_sgd\nworkers = 4\n"
                         "replicas_to_aggregate = 3\nbatch_size = 1\n");
  const auto rows = StalenessRows(run);
  int64_t dropped = 0, kept = 0;
  for (const auto& r : rows) {
    ASSERT_TRUE(r.at("dropped") == "0" || r.at("dropped") == "1") << r.at("dropped");
    if (r.at("dropped") == "1") {
      ++dropped;
      EXPECT_EQ(r.at("outcome"), "dropped");
    } else {
      ++kept;
      EXPECT_NE(r.at("outcome"), "dropped");
    }
    EXPECT_EQ(r.at("oldest_version"), r.at("pulled_version"));
    EXPECT_EQ(r.at("oldest_staleness"), r.at("staleness"));
  }
  const auto summary = SummaryRow(run);
  EXPECT_GT(dropped, 0) << ReadFile((run / "staleness.csv").string())
                        << ReadFile((run / "workers.csv").string());
  EXPECT_EQ(std::to_string(dropped), summary.at("dropped_pushes"));
  const auto histogram = CsvRows(run / "staleness_histogram.csv");
  int64_t counted = 0;
  for (std::size_t i = 1; i < histogram.size(); ++i) counted += std::stoll(histogram[i][2]);
  EXPECT_EQ(counted, kept);
  auto provenance = nlohmann::json::parse(ReadFile((run / "provenance.json").string()));
  EXPECT_EQ(provenance["staleness_records"], std::to_string(kept));
  EXPECT_EQ(provenance["dropped_pushes"], std::to_string(dropped));
}

// DOWNPOUR fetching every step and pushing every 4: the rows name the oldest parameters
// too; the summary's percentiles are of `staleness` (from the newest), not of
// oldest_staleness.
TEST(ResultsSchema, WindowedPushesNameTheirOldestVersion) {
  testing::TempDir dir;
  // Batches of one: about 80 pushes per worker, so pushes of others fall inside windows.
  fs::path run = RunTiny(dir,
                         "[algorithm]\nname = downpour\nworkers = 3\nwindow = 4\n"
                         "fetch_window = 1\nbatch_size = 1\n");
  const auto rows = StalenessRows(run);
  ASSERT_FALSE(rows.empty());
  int64_t older = 0, max_staleness = 0, max_oldest = 0;
  for (const auto& r : rows) {
    const int64_t oldest = std::stoll(r.at("oldest_version"));
    const int64_t pulled = std::stoll(r.at("pulled_version"));
    const int64_t staleness = std::stoll(r.at("staleness"));
    const int64_t oldest_staleness = std::stoll(r.at("oldest_staleness"));
    EXPECT_LE(oldest, pulled);
    EXPECT_EQ(oldest_staleness, staleness + pulled - oldest);
    EXPECT_EQ(oldest_staleness, std::stoll(r.at("applied_version")) - oldest);
    EXPECT_EQ(r.at("dropped"), "0");
    if (oldest < pulled) ++older;
    max_staleness = std::max(max_staleness, staleness);
    max_oldest = std::max(max_oldest, oldest_staleness);
  }
  EXPECT_GT(older, 0);
  const auto summary = SummaryRow(run);
  EXPECT_EQ(summary.at("staleness_max"), std::to_string(max_staleness));
  EXPECT_LE(max_staleness, max_oldest);
}

TEST(ResultsSchema, RunFolderHoldsTheDocumentedFiles) {
  testing::TempDir dir;
  fs::path run = RunTiny(dir);
  for (const std::string& file : TableNames(Readme(), "## A run folder")) {
    if (file == "staleness.csv" || file == "staleness_histogram.csv") continue;  // distributed only
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
