// Shared by the tests of training runs as processes (launch_test.cc: the strategies over
// the parameter server; launch_collective_test.cc: the strategies on a collective): the
// asgd binary, a small training config, the run folder's files, the PIDs launch reported,
// and the comparison of a run's final line with another's.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/file_util.h"
#include "experiments/record/csv.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_util.h"

namespace asgd::experiments::launch_test {

using testing::Subprocess;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

inline const std::string kAsgd = std::string(ASGD_BINARY_DIR) + "/asgd";
inline constexpr auto kTimeout = 120s;

// Ports below Linux's ephemeral range, spread by PID so concurrent test runs differ.
inline int BasePort() { return 21000 + static_cast<int>(::getpid() % 1500) * 6; }

inline std::string TrainingConfig(const testing::TempDir& dir, const std::string& algorithm,
                                  const std::string& extra = "") {
  const std::string path = dir.File("train.ini");
  testing::WriteTestFile(
      path, "[experiment]\nname = launched\nepochs = 3\nlog_level = warning\nout_dir = " +
                dir.File("runs") +
                "\n[data]\ndataset = synthetic\nsynthetic_train = 3000\nsynthetic_test = 600\n"
                "synthetic_classes = 3\nsynthetic_features = 16\n[model]\nname = mlp\n"
                "hidden = 16\n[algorithm]\nname = " +
                algorithm +
                "\nworkers = 3\nwindow = 2\nlearning_rate = 0.1\n[cluster]\nshards = 2\n"
                "timeout_s = 20\n" +
                extra);
  return path;
}

// The one run folder under dir/runs, and its summary row as column -> value.
inline std::map<std::string, std::string> Summary(const testing::TempDir& dir,
                                                  fs::path* run = nullptr) {
  std::vector<fs::path> runs(fs::directory_iterator(dir.File("runs")), {});
  EXPECT_EQ(runs.size(), 1u);
  if (runs.empty()) return {};
  if (run != nullptr) *run = runs[0];
  std::ifstream in(runs[0] / "summary.csv");
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  const auto names = ParseCsvLine(header), cells = ParseCsvLine(row);
  std::map<std::string, std::string> m;
  for (std::size_t i = 0; i < names.size() && i < cells.size(); ++i) m[names[i]] = cells[i];
  return m;
}

// The PIDs launch reported for its children ("[launch] worker 1: pid 123").
inline std::vector<pid_t> ChildPids(const std::string& output) {
  std::vector<pid_t> pids;
  static const std::regex line(R"(\[launch\] [a-z]+( [0-9]+)?: pid ([0-9]+))");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    pids.push_back(static_cast<pid_t>(std::stol((*it)[2])));
  }
  return pids;
}

// Waits (at most 60 s) until the process printed text.
inline void WaitForOutput(const Subprocess& process, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (process.Output().find(text) == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
}

inline bool Alive(pid_t pid) {
  // A zombie is not running; /proc says which.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(stat, s)) return false;
  const auto close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() && s[close + 2] != 'Z';
}

// provenance.json of the one run under dir/runs.
inline nlohmann::json Provenance(const testing::TempDir& dir) {
  fs::path run;
  (void)Summary(dir, &run);
  return nlohmann::json::parse(ReadFile((run / "provenance.json").string()));
}

// Rows of a CSV of the one run (without the header).
inline int64_t CsvRows(const testing::TempDir& dir, const std::string& name) {
  fs::path run;
  (void)Summary(dir, &run);
  const std::string text = ReadFile((run / name).string());
  return static_cast<int64_t>(std::count(text.begin(), text.end(), '\n')) - 1;
}

inline std::vector<std::string> CsvLines(const fs::path& run, const std::string& name) {
  std::vector<std::string> lines;
  std::ifstream in(run / name);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Two runs' "final test accuracy: A (loss L)" lines agree in A and L, digit for digit.
inline void ExpectSameFinalLine(const std::string& one, const std::string& other) {
  const std::regex final_line(R"(final test accuracy: ([0-9.]+) \(loss ([0-9.]+)\))");
  std::smatch a, b;
  ASSERT_TRUE(std::regex_search(one, a, final_line)) << one;
  ASSERT_TRUE(std::regex_search(other, b, final_line)) << other;
  EXPECT_EQ(a[1], b[1]);
  EXPECT_EQ(a[2], b[2]);
}

}  // namespace asgd::experiments::launch_test
