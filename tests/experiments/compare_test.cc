// `asgd compare` on run folders the tests write themselves, following the documented
// schema (results/README.md): the CSV has one row per run with every summary.csv column,
// the markdown table the columns a paper reports, the PNGs are real PNGs of the fixed
// size, and every bad input is one line on stderr and exit status 2.
#include "experiments/analysis/compare.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "experiments/record/csv.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// The PNGs' fixed size: 8 x 5 inches at 100 dpi (asgd_plots.py).
constexpr uint32_t kPngWidth = 800;
constexpr uint32_t kPngHeight = 500;

struct FakeRun {
  std::string name;
  std::string algorithm = "agn";
  int workers = 4;
  int seed = 1;
  double final_accuracy = 0.9;
  double wall_time_s = 10.0;
  double samples_per_s = 1000.0;
  double staleness_mean = 3.0;
  bool staleness_histogram = true;
};

// A run; sgd runs have no staleness histogram.
FakeRun Fake(const std::string& name, const std::string& algorithm, int workers, int seed,
             double accuracy = 0.9, double wall_time_s = 10.0, double samples_per_s = 1000.0,
             double staleness_mean = 3.0) {
  FakeRun r;
  r.name = name;
  r.algorithm = algorithm;
  r.workers = workers;
  r.seed = seed;
  r.final_accuracy = accuracy;
  r.wall_time_s = wall_time_s;
  r.samples_per_s = samples_per_s;
  r.staleness_mean = staleness_mean;
  r.staleness_histogram = algorithm != "sgd";
  return r;
}

// A run folder as `asgd run` documents it: config.ini, summary.csv, convergence.csv and,
// for distributed runs, staleness_histogram.csv.
std::string WriteRun(const std::string& parent, const FakeRun& r) {
  const std::string dir = parent + "/20260101-000000-" + r.name + "-s" + std::to_string(r.seed);
  MakeDirs(dir);
  testing::WriteTestFile(dir + "/config.ini",
                         "# Resolved configuration\n\n[experiment]\n# label of the run\nname = " +
                             r.name + "\nseed = " + std::to_string(r.seed) +
                             "\n\n[algorithm]\n# strategy (default)\nname = " + r.algorithm +
                             "\nworkers = " + std::to_string(r.workers) + "\n");
  std::map<std::string, std::string> v;
  for (const auto& c : SummaryColumns()) v[c] = "0";
  v["run_id"] = fs::path(dir).filename().string();
  v["algorithm"] = r.algorithm;
  v["model"] = "mlp";
  v["dataset"] = "mnist";
  v["workers"] = std::to_string(r.workers);
  v["transport"] = r.algorithm == "sgd" ? "none" : "inproc";
  v["device"] = "cpu";
  v["seed"] = std::to_string(r.seed);
  v["wall_time_s"] = CsvCell(r.wall_time_s);
  v["final_test_accuracy"] = CsvCell(r.final_accuracy);
  v["best_test_accuracy"] = CsvCell(r.final_accuracy + 0.001);
  v["target_accuracy"] = "0.95";
  v["time_to_target_s"] = r.final_accuracy >= 0.95 ? CsvCell(r.wall_time_s / 2) : "nan";
  v["staleness_mean"] = r.algorithm == "sgd" ? "nan" : CsvCell(r.staleness_mean);
  v["staleness_p99"] = r.algorithm == "sgd" ? "nan" : "7";
  v["samples_per_s"] = CsvCell(r.samples_per_s);
  if (r.algorithm != "sgd") {  // 400 pushes of 4000 bytes (the last convergence row's)
    v["updates"] = "400";
    v["bytes_pushed"] = "1600000";
  }
  v["status"] = "completed";
  std::ostringstream summary;
  CsvWriter w(summary, SummaryColumns());
  std::vector<std::string> cells;
  for (const auto& c : SummaryColumns()) cells.push_back(v[c]);
  w.WriteRow(cells);
  testing::WriteTestFile(dir + "/summary.csv", summary.str());

  std::ostringstream conv;
  CsvWriter cw(conv, {"time_s", "epoch", "samples", "updates", "train_loss", "test_loss",
                      "test_accuracy", "eval_examples", "learning_rate"});
  for (int i = 0; i <= 4; ++i) {
    const double acc = 0.1 + (r.final_accuracy - 0.1) * i / 4.0;
    cw.Write(r.wall_time_s * i / 4.0, i * 0.5, static_cast<int64_t>(i) * 30000,
             static_cast<int64_t>(i) * 100, i == 0 ? std::nan("") : 1.0 / (i + 1), 1.0 - acc, acc,
             static_cast<int64_t>(10000), 0.05);
  }
  testing::WriteTestFile(dir + "/convergence.csv", conv.str());
  if (r.staleness_histogram) {
    std::ostringstream hist;
    CsvWriter hw(hist, {"worker", "staleness", "count"});
    for (int w2 = 0; w2 < r.workers; ++w2) {
      for (int s = 0; s < 2 * r.workers; ++s) {
        hw.Write(w2, s, static_cast<int64_t>(100 - (s - r.workers + 1) * (s - r.workers + 1)));
      }
    }
    testing::WriteTestFile(dir + "/staleness_histogram.csv", hist.str());
  }
  return dir;
}

struct CliResult {
  int status;
  std::string out;
  std::string err;
};

CliResult Cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int status = Main(args, out, err);
  return {status, out.str(), err.str()};
}

std::vector<std::vector<std::string>> ReadCsv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) rows.push_back(ParseCsvLine(line));
  return rows;
}

int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// Width and height from a PNG's IHDR chunk; fails the test unless the file is a PNG.
std::pair<uint32_t, uint32_t> PngSize(const std::string& path) {
  const std::string data = ReadFile(path);
  EXPECT_GE(data.size(), 33u) << path;
  if (data.size() < 33) return {0, 0};
  EXPECT_EQ(data.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << path;
  EXPECT_EQ(data.substr(12, 4), "IHDR") << path;
  auto be32 = [&](std::size_t at) {
    uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(data[at + i]);
    return v;
  };
  EXPECT_EQ(be32(8), 13u) << path;  // IHDR length
  return {be32(16), be32(20)};
}

TEST(Compare, SummaryColumnsAreTheDocumentedOnes) {
  const std::string doc = ReadFile(std::string(ASGD_SOURCE_DIR) + "/results/README.md");
  const std::size_t at = doc.find("### summary.csv");
  ASSERT_NE(at, std::string::npos);
  std::istringstream in(doc.substr(at));
  std::string line;
  std::vector<std::string> names;
  static const std::regex cell(R"(`([a-z_0-9]+)`)");
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("|", 0) != 0) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    // The first cell: one or more `column` names ("`staleness_p50`, `staleness_p99`").
    const std::string first = line.substr(1, line.find('|', 1) - 1);
    for (std::sregex_iterator it(first.begin(), first.end(), cell), end; it != end; ++it) {
      names.push_back((*it)[1]);
    }
  }
  EXPECT_EQ(names, SummaryColumns());
}

TEST(Compare, WritesOneRowPerRunWithEverySummaryColumnAndAMarkdownTable) {
  testing::TempDir dir;
  const std::string a =
      WriteRun(dir.File("runs"), Fake("sgd-base", "sgd", 1, 1, 0.9712, 20.6, 5000, 0));
  const std::string b =
      WriteRun(dir.File("runs"), Fake("agn-w4", "agn", 4, 1, 0.96, 8.4, 12000.4, 3.1234));
  const CliResult r = Cli({"compare", a, b, "--out", dir.File("cmp"), "--no-plots"});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr(dir.File("cmp") + "/comparison.csv"));
  EXPECT_THAT(r.out, HasSubstr(dir.File("cmp") + "/comparison.md"));

  const auto rows = ReadCsv(dir.File("cmp/comparison.csv"));
  ASSERT_EQ(rows.size(), 3u);
  std::vector<std::string> expected = {"label", "run_dir", "group"};
  expected.insert(expected.end(), SummaryColumns().begin(), SummaryColumns().end());
  EXPECT_EQ(rows[0], expected);
  EXPECT_EQ(rows[1][0], "sgd-base");  // experiment.name from config.ini
  EXPECT_EQ(rows[1][1], a);
  EXPECT_EQ(rows[2][0], "agn-w4");
  EXPECT_EQ(rows[2][1], b);
  const auto col = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(expected.begin(), expected.end(), name) -
                                    expected.begin());
  };
  EXPECT_EQ(rows[1][col("algorithm")], "sgd");
  EXPECT_EQ(rows[2][col("final_test_accuracy")], "0.96");
  EXPECT_EQ(rows[2][col("samples_per_s")], "12000.4");

  const std::string md = ReadFile(dir.File("cmp/comparison.md"));
  EXPECT_THAT(md, HasSubstr("| label | seeds | algorithm | workers | final test acc. | "
                            "best test acc. | time to 0.95 (s) | wall time (s) | samples/s | "
                            "staleness mean | staleness p99 | dropped pushes |"));
  // One seed each: the values, no interval.
  EXPECT_THAT(
      md,
      HasSubstr("| sgd-base | 1 | sgd | 1 | 0.9712 | 0.9722 | 10.3 | 20.6 | 5000 | — | — | 0 |"));
  EXPECT_THAT(
      md,
      HasSubstr("| agn-w4 | 1 | agn | 4 | 0.9600 | 0.9610 | 4.20 | 8.40 | 12000 | 3.12 | 7 | 0 |"));
  EXPECT_THAT(md, Not(HasSubstr("†")));
  EXPECT_EQ(rows[1][col("group")], "sgd-base");

  // --label takes any config key instead.
  const CliResult byalg =
      Cli({"compare", a, b, "--out", dir.File("cmp2"), "--no-plots", "--label", "algorithm.name"});
  ASSERT_EQ(byalg.status, kExitOk) << byalg.err;
  const auto rows2 = ReadCsv(dir.File("cmp2/comparison.csv"));
  ASSERT_EQ(rows2.size(), 3u);
  EXPECT_EQ(rows2[1][0], "sgd");
  EXPECT_EQ(rows2[2][0], "agn");
}

// Seeds of one configuration are one row: mean ± the 95 % half-width (Student's t), how
// many seeds, and a mark where the intervals do not separate a row from the best one.
TEST(Compare, RunsThatDifferOnlyInTheirSeedAreOneRowWithAnInterval) {
  testing::TempDir dir;
  std::vector<std::string> runs;
  for (int seed = 1; seed <= 3; ++seed) {
    runs.push_back(WriteRun(dir.File("runs"), Fake("agn-w4", "agn", 4, seed, 0.87 + 0.03 * seed)));
    runs.push_back(
        WriteRun(dir.File("runs"), Fake("slow", "downpour", 4, seed, 0.5 + 0.01 * seed)));
  }
  for (int seed = 1; seed <= 2; ++seed) {
    runs.push_back(WriteRun(dir.File("runs"), Fake("sgd", "sgd", 1, seed, 0.965 + 0.005 * seed)));
  }
  runs.push_back(WriteRun(dir.File("runs"), Fake("one", "dynsgd", 4, 1, 0.99)));
  std::vector<std::string> args = {"compare"};
  args.insert(args.end(), runs.begin(), runs.end());
  args.insert(args.end(), {"--out", dir.File("cmp"), "--no-plots"});
  const CliResult r = Cli(args);
  ASSERT_EQ(r.status, kExitOk) << r.err;
  const std::string md = ReadFile(dir.File("cmp/comparison.md"));
  // agn: 0.90, 0.93, 0.96: mean 0.93, s = 0.03, half-width 4.303 * 0.03 / sqrt(3) = 0.0745;
  // it overlaps sgd's (0.9725 ± 0.0318) but the best row is the single seed of dynsgd, which
  // has no interval: nothing is marked in that column. Only one agn seed reached 0.95.
  EXPECT_THAT(md, HasSubstr("| agn-w4 | 3 | agn | 4 | 0.9300 ± 0.0745 | 0.9310 ± 0.0745 | "
                            "5.00 (1 of 3) |"));
  EXPECT_THAT(md, HasSubstr("| sgd | 2 | sgd | 1 | 0.9725 ± 0.0318 | "));
  EXPECT_THAT(md, HasSubstr("| one | 1 | dynsgd | 4 | 0.9900 | "));
  const auto rows = ReadCsv(dir.File("cmp/comparison.csv"));
  ASSERT_EQ(rows.size(), 10u);
  EXPECT_EQ(rows[1][2], "agn-w4");
  EXPECT_EQ(rows[3][2], "agn-w4");

  // Without the single seed, sgd is the best row: agn's interval overlaps it (†), the
  // downpour runs' (0.52 ± 0.025) does not.
  runs.pop_back();
  args = {"compare"};
  args.insert(args.end(), runs.begin(), runs.end());
  args.insert(args.end(), {"--out", dir.File("cmp2"), "--no-plots"});
  ASSERT_EQ(Cli(args).status, kExitOk);
  const std::string md2 = ReadFile(dir.File("cmp2/comparison.md"));
  EXPECT_THAT(md2, HasSubstr("| agn-w4 | 3 | agn | 4 | 0.9300 ± 0.0745 † | 0.9310 ± 0.0745 † |"));
  EXPECT_THAT(md2, HasSubstr("| slow | 3 | downpour | 4 | 0.5200 ± 0.0248 | "));
  EXPECT_THAT(md2, HasSubstr("† its 95 % interval overlaps"));
}

TEST(Compare, ExpandsSweepAndSuiteFoldersIntoTheirRuns) {
  testing::TempDir dir;
  // A sweep folder: runs under runs/, plus logs/ and a run that left no summary.
  WriteRun(dir.File("sweep/runs"), Fake("lr-0.1", "agn", 2, 1));
  WriteRun(dir.File("sweep/runs"), Fake("lr-0.1", "agn", 2, 2));
  MakeDirs(dir.File("sweep/logs"));
  MakeDirs(dir.File("sweep/runs/20260101-000000-crashed-s1"));
  // A folder whose immediate subfolders are runs.
  WriteRun(dir.File("flat"), Fake("sgd", "sgd", 1, 1, 0.9, 10, 1000, 0));
  const std::vector<std::string> runs = ExpandRunDirs({dir.File("sweep/"), dir.File("flat")});
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_THAT(runs[0], HasSubstr("lr-0.1-s1"));
  EXPECT_THAT(runs[1], HasSubstr("lr-0.1-s2"));
  EXPECT_THAT(runs[2], HasSubstr("sgd-s1"));
}

TEST(Compare, DrawsThePlotsAsPngsOfTheFixedSize) {
  testing::TempDir dir;
  const std::string runs = dir.File("runs");
  WriteRun(runs, Fake("sgd", "sgd", 1, 1, 0.97, 20, 5000, 0));
  WriteRun(runs, Fake("agn-2", "agn", 2, 1, 0.965, 12, 9000, 1.0));
  WriteRun(runs, Fake("agn-4", "agn", 4, 1, 0.96, 8, 15000, 3.0));
  WriteRun(runs, Fake("dc-4", "dc_asgd", 4, 1, 0.955, 9, 14000, 3.2));
  const CliResult r = Cli({"compare", runs, "--out", dir.File("cmp")});
  ASSERT_EQ(r.status, kExitOk) << r.err << r.out;
  for (const std::string name : {"accuracy.png", "accuracy_samples.png", "accuracy_bytes.png",
                                 "staleness.png", "throughput.png"}) {
    const std::string path = dir.File("cmp/" + name);
    ASSERT_TRUE(FileExists(path)) << name << "\n" << r.out;
    EXPECT_THAT(r.out, HasSubstr("wrote " + path));
    const auto [w, h] = PngSize(path);
    EXPECT_EQ(w, kPngWidth) << name;
    EXPECT_EQ(h, kPngHeight) << name;
  }
}

TEST(Compare, SkipsThePlotsWhoseFilesNoRunHas) {
  testing::TempDir dir;
  const std::string a = WriteRun(dir.File("runs"), Fake("sgd", "sgd", 1, 1, 0.97, 20, 5000, 0));
  const std::string b = WriteRun(dir.File("runs"), Fake("sgd2", "sgd", 1, 2, 0.96, 21, 4900, 0));
  const CliResult r = Cli({"compare", a, b, "--out", dir.File("cmp")});
  ASSERT_EQ(r.status, kExitOk) << r.err << r.out;
  EXPECT_TRUE(FileExists(dir.File("cmp/accuracy.png")));
  EXPECT_TRUE(FileExists(dir.File("cmp/accuracy_samples.png")));
  EXPECT_FALSE(FileExists(dir.File("cmp/staleness.png")));
  EXPECT_FALSE(FileExists(dir.File("cmp/throughput.png")));
  EXPECT_FALSE(FileExists(dir.File("cmp/accuracy_bytes.png")));  // sgd pushes nothing
  EXPECT_THAT(r.out, HasSubstr("skipped staleness.png"));
  EXPECT_THAT(r.out, HasSubstr("skipped accuracy_bytes.png"));
  EXPECT_THAT(r.out, HasSubstr("skipped throughput.png"));
}

TEST(Compare, AMissingFolderIsOneLineAndExitTwo) {
  testing::TempDir dir;
  const CliResult r = Cli({"compare", dir.File("nope"), "--out", dir.File("cmp")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(dir.File("nope") + ": no such folder"));
  EXPECT_FALSE(fs::exists(dir.File("cmp")));
}

TEST(Compare, AFolderWithoutSummaryIsOneLineAndExitTwo) {
  testing::TempDir dir;
  MakeDirs(dir.File("empty/sub"));
  const CliResult r = Cli({"compare", dir.File("empty"), "--out", dir.File("cmp")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(dir.File("empty") + ": no summary.csv"));
}

TEST(Compare, AMalformedSummaryIsOneLineNamingTheFile) {
  testing::TempDir dir;
  const std::string run = WriteRun(dir.File("runs"), Fake("x", "agn", 2, 1));
  const std::string summary = run + "/summary.csv";
  const std::string good = ReadFile(summary);
  const std::string header = good.substr(0, good.find('\n'));
  const std::string row = good.substr(good.find('\n') + 1);

  // A header without a documented column.
  testing::WriteTestFile(
      summary, std::regex_replace(header, std::regex("wall_time_s"), "wall_s") + "\n" + row);
  CliResult r = Cli({"compare", run, "--out", dir.File("cmp")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(summary + ": the header lacks column 'wall_time_s'"));

  // A row with a cell too few.
  testing::WriteTestFile(summary, header + "\n" + row.substr(0, row.rfind(',')) + "\n");
  r = Cli({"compare", run, "--out", dir.File("cmp")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(summary + ":2: expected " + std::to_string(SummaryColumns().size()) +
                               " cells as in the header, found " +
                               std::to_string(SummaryColumns().size() - 1)));

  // No row.
  testing::WriteTestFile(summary, header + "\n");
  r = Cli({"compare", run, "--out", dir.File("cmp")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(summary + ": expected one row after the header, found 0"));
}

TEST(Compare, MissingMatplotlibKeepsTheTablesAndIsOneLine) {
  testing::TempDir dir;
  const std::string run = WriteRun(dir.File("runs"), Fake("x", "agn", 2, 1));
  // A "python3" that behaves as asgd_plots.py does without matplotlib.
  const std::string fake = dir.File("python3");
  testing::WriteTestFile(
      fake, "#!/bin/sh\necho 'asgd_plots.py: matplotlib is not installed' >&2\nexit 3\n");
  ::chmod(fake.c_str(), 0755);
  ::setenv("ASGD_PYTHON", fake.c_str(), 1);
  const CliResult r = Cli({"compare", run, "--out", dir.File("cmp")});
  ::unsetenv("ASGD_PYTHON");
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("matplotlib is not installed for " + fake));
  EXPECT_THAT(r.err, HasSubstr("comparison.csv and comparison.md were written"));
  EXPECT_TRUE(FileExists(dir.File("cmp/comparison.csv")));
  EXPECT_TRUE(FileExists(dir.File("cmp/comparison.md")));
  EXPECT_FALSE(FileExists(dir.File("cmp/accuracy.png")));
}

TEST(Compare, AnUnknownLabelKeyIsOneLineWithASuggestion) {
  testing::TempDir dir;
  const std::string run = WriteRun(dir.File("runs"), Fake("x", "agn", 2, 1));
  const CliResult r = Cli({"compare", run, "--out", dir.File("cmp"), "--label", "algorithm.nme"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("did you mean algorithm.name?"));
  EXPECT_THAT(r.out, Not(HasSubstr("wrote")));
}

}  // namespace
}  // namespace asgd::experiments
