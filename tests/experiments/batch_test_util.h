// What the tests of `asgd sweep`, `asgd suite` and `asgd tune` share: running the CLI in
// this process, reading the CSVs they write, and listing run folders.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/cli/cli.h"
#include "experiments/record/csv.h"

namespace asgd::experiments::batch_test {

struct CliResult {
  int status;
  std::string out;
  std::string err;
};

// `asgd ARGS...` in this process (for what ends before any child starts).
inline CliResult Cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int status = Main(args, out, err);
  return {status, out.str(), err.str()};
}

inline int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

inline std::vector<std::vector<std::string>> ReadCsv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) rows.push_back(ParseCsvLine(line));
  return rows;
}

// A CSV's rows as column -> cell maps (the header names the columns).
inline std::vector<std::map<std::string, std::string>> ReadCsvRecords(const std::string& path) {
  const auto rows = ReadCsv(path);
  std::vector<std::map<std::string, std::string>> records;
  for (std::size_t r = 1; r < rows.size(); ++r) {
    std::map<std::string, std::string> record;
    for (std::size_t c = 0; c < rows[0].size() && c < rows[r].size(); ++c) {
      record[rows[0][c]] = rows[r][c];
    }
    records.push_back(std::move(record));
  }
  return records;
}

inline std::vector<std::string> Subfolders(const std::string& dir) {
  std::vector<std::string> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_directory()) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace asgd::experiments::batch_test
