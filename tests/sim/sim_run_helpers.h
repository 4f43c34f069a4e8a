// What the tests of `asgd run` with cluster.transport = sim share (sim_run_test.cc for the
// parameter-server strategies, sim_collective_run_test.cc for those on a collective): run
// a config into a folder of its own, and read the CSVs it wrote.
#pragma once

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "tests/support/test_util.h"

namespace asgd::experiments::sim_run_helpers {

// One `asgd run`: its exit status, what it printed, and its run folder.
struct SimRun {
  int status = 0;
  std::string out, err, dir;  // dir: the run folder ("" if none)
  std::string File(const std::string& name) const { return ReadFile(dir + "/" + name); }
  nlohmann::json Provenance() const { return nlohmann::json::parse(File("provenance.json")); }
};

// Runs the config [experiment] name = label, progress off, errors only, out_dir a folder of
// its own under tmp, then `body` (which continues in [experiment]) and `problem` (its data
// and model sections).
inline SimRun RunConfig(const testing::TempDir& tmp, const std::string& label,
                        const std::string& body, const std::string& problem) {
  const std::string runs = tmp.File(label + "-runs");
  const std::string config = tmp.File(label + ".ini");
  testing::WriteTestFile(config, "[experiment]\nname = " + label +
                                     "\nprogress = off\nlog_level = error\nout_dir = " + runs +
                                     "\n" + body + problem);
  std::ostringstream out, err;
  SimRun r;
  r.status = Main({"run", config}, out, err);
  r.out = out.str();
  r.err = err.str();
  if (std::filesystem::exists(runs)) {
    for (const auto& e : std::filesystem::directory_iterator(runs)) r.dir = e.path().string();
  }
  return r;
}

// A CSV line's cells (no quoting: the files compared here have none).
inline std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream split(line);
  for (std::string cell; std::getline(split, cell, ',');) cells.push_back(cell);
  return cells;
}

// A summary.csv cell by column name.
inline std::string SummaryCell(const SimRun& r, const std::string& column) {
  std::istringstream in(r.File("summary.csv"));
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  const std::vector<std::string> names = Cells(header), cells = Cells(row);
  for (std::size_t i = 0; i < names.size() && i < cells.size(); ++i) {
    if (names[i] == column) return cells[i];
  }
  ADD_FAILURE() << "summary.csv has no column " << column;
  return "";
}

// summary.csv without its first field (run_id: the folder's name, which holds the start
// time).
inline std::string SummaryWithoutRunId(const SimRun& r) {
  std::istringstream in(r.File("summary.csv"));
  std::string line, out;
  while (std::getline(in, line)) out += line.substr(line.find(',')) + "\n";
  return out;
}

// Two runs wrote the same record: every CSV byte for byte, and summary.csv but its run_id.
inline void ExpectSameRecords(const SimRun& a, const SimRun& b) {
  for (const char* f :
       {"convergence.csv", "staleness.csv", "staleness_histogram.csv", "workers.csv"}) {
    EXPECT_EQ(a.File(f), b.File(f)) << f;
  }
  EXPECT_EQ(SummaryWithoutRunId(a), SummaryWithoutRunId(b));
}

}  // namespace asgd::experiments::sim_run_helpers
