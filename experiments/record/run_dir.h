// A run's folder (docs/architecture.md#run-folders-and-the-run-core): <out_dir>/<run_id>/ holding
//   config.ini       the resolved configuration (every key, with the value used)
//   provenance.json  what produced the run: git commit, host, compiler, build mode and
//                    instruction set, the CPU and its libraries' dispatch, seed, start
//                    time, command line; rewritten at the end with the end time and status
//   *.csv            the measurements (schemas in results/README.md)
//
// Run ids are "<UTC yyyymmdd-hhmmss>-<name>-s<seed>", with "-2", "-3", ... appended if
// the folder exists, so runs never overwrite each other.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "experiments/config/config.h"

namespace asgd::experiments {

class RunDir {
 public:
  // Creates the folder and writes config.ini and provenance.json. Throws IoError.
  // name: the run's label (experiment.name, or the config file's stem).
  static RunDir Create(const Config& config, const std::string& name,
                       const std::vector<std::string>& command_line);

  const std::string& id() const { return id_; }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

  // An existing run folder continued by `asgd run --resume`: provenance.json gets a
  // "resumed" entry (time, command line, commit, host) and status "running" again.
  // Throws DataError if its provenance.json is unreadable, IoError.
  static RunDir Resume(const std::string& path, const std::vector<std::string>& command_line);

  // Opens a file of the run for writing (truncating). Throws IoError.
  std::unique_ptr<std::ofstream> Open(const std::string& name) const;
  // Opens a file of the run for appending (a resumed run's CSVs). Throws IoError.
  std::unique_ptr<std::ofstream> OpenAppend(const std::string& name) const;

  // Rewrites provenance.json with the end time, status ("completed", "stopped",
  // "failed") and a reason, plus any extra string fields.
  void Finish(const std::string& status, const std::string& reason,
              const std::map<std::string, std::string>& extra = {}) const;

 private:
  std::string id_;
  std::string path_;
  std::string provenance_;  // JSON text written at creation
};

// A label usable in a folder name: letters, digits, '-', '_', '.'; others become '_'.
std::string SanitizeLabel(const std::string& text);
// The stem of a config path: "experiments/configs/mnist_mlp_sgd.ini" -> "mnist_mlp_sgd".
std::string ConfigStem(const std::string& path);

}  // namespace asgd::experiments
