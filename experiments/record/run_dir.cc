#include "experiments/record/run_dir.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "core/build_info.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/file_util.h"
#include "experiments/config/cpu_dispatch.h"
#include "experiments/config/setup.h"

namespace asgd::experiments {
namespace {

// What decides the run's floats beside its config: the build mode, the instruction set
// compiled for and the one the CPU has, and the libraries' run-time dispatch
// (docs/building.md#build-modes). A resumed run records them again.
void RecordIsa(nlohmann::json& p) {
  const RunningCpu cpu = DetectRunningCpu();
  p["build_mode"] = ASGD_BUILD_MODE;
  p["march"] = ASGD_MARCH;
  p["compiled_isa"] = CompiledIsa();
  p["cpu"] = cpu.model;
  p["cpu_isa"] = cpu.isa;
  p["libm"] = cpu.libm;
  p["dispatch_env"] = DispatchEnvironment();
}

}  // namespace

std::string SanitizeLabel(const std::string& text) {
  std::string out;
  for (char c : text) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    out += ok ? c : '_';
  }
  return out.empty() ? "run" : out;
}

std::string ConfigStem(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

RunDir RunDir::Create(const Config& config, const std::string& name,
                      const std::vector<std::string>& command_line) {
  const std::string out_dir = config.String("experiment.out_dir");
  MakeDirs(out_dir);
  const std::string base = WallTimeCompact() + "-" + SanitizeLabel(name) + "-s" +
                           std::to_string(config.Int("experiment.seed"));
  RunDir run;
  for (int attempt = 1;; ++attempt) {
    run.id_ = attempt == 1 ? base : base + "-" + std::to_string(attempt);
    run.path_ = out_dir + "/" + run.id_;
    // mkdir (not create_directories) so that two runs racing for one id both notice.
    if (::mkdir(run.path_.c_str(), 0755) == 0) break;
    if (errno != EEXIST) {
      throw IoError("cannot create run folder " + run.path_ + ": " + std::strerror(errno));
    }
    if (attempt > 1000) throw IoError("cannot find a free run folder name under " + out_dir);
  }
  WriteFileAtomic(run.File("config.ini"), config.ResolvedIni());

  nlohmann::json p;
  p["run_id"] = run.id_;
  p["asgd_version"] = ASGD_VERSION;
  p["git_commit"] = GitCommit();
  p["git_dirty"] = GitDirty();
  p["build"] = BuildDescription();
  p["compiler"] = ASGD_CXX_COMPILER;
  p["build_type"] = ASGD_BUILD_TYPE;
  p["cuda"] = ASGD_HAVE_CUDA ? ASGD_CUDA_COMPILER : "off";
  p["host"] = HostName();
  RecordIsa(p);
  p["hardware_threads"] = std::thread::hardware_concurrency();
  p["seed"] = config.Int("experiment.seed");
  p["config_file"] = config.source();
  p["command_line"] = command_line;
  p["start_time"] = WallTimeIso8601();
  p["status"] = "running";
  p["ignored_keys"] = IgnoredAlgorithmKeys(config);
  run.provenance_ = p.dump(2);
  WriteFileAtomic(run.File("provenance.json"), run.provenance_ + "\n");
  return run;
}

RunDir RunDir::Resume(const std::string& path, const std::vector<std::string>& command_line) {
  RunDir run;
  run.path_ = path;
  while (run.path_.size() > 1 && run.path_.back() == '/') run.path_.pop_back();
  const std::size_t slash = run.path_.rfind('/');
  run.id_ = slash == std::string::npos ? run.path_ : run.path_.substr(slash + 1);
  nlohmann::json p;
  try {
    p = nlohmann::json::parse(ReadFile(run.File("provenance.json")));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(run.File("provenance.json"), std::string("not JSON (") + e.what() + ")");
  }
  if (!p.is_object()) throw DataError(run.File("provenance.json"), "not a JSON object");
  nlohmann::json resumed =
      p.contains("resumed") && p["resumed"].is_array() ? p["resumed"] : nlohmann::json::array();
  nlohmann::json entry;
  entry["time"] = WallTimeIso8601();
  entry["command_line"] = command_line;
  entry["git_commit"] = GitCommit();
  entry["build"] = BuildDescription();
  entry["host"] = HostName();
  entry["previous_status"] = p.value("status", "");
  RecordIsa(entry);
  resumed.push_back(entry);
  p["resumed"] = resumed;
  p["status"] = "running";
  p.erase("end_time");
  p.erase("status_reason");
  run.provenance_ = p.dump(2);
  WriteFileAtomic(run.File("provenance.json"), run.provenance_ + "\n");
  return run;
}

std::unique_ptr<std::ofstream> RunDir::Open(const std::string& name) const {
  auto out = std::make_unique<std::ofstream>(File(name), std::ios::out | std::ios::trunc);
  if (!*out) throw IoError("cannot write " + File(name) + ": " + std::strerror(errno));
  return out;
}

std::unique_ptr<std::ofstream> RunDir::OpenAppend(const std::string& name) const {
  auto out = std::make_unique<std::ofstream>(File(name), std::ios::out | std::ios::app);
  if (!*out) throw IoError("cannot append to " + File(name) + ": " + std::strerror(errno));
  return out;
}

void RunDir::Finish(const std::string& status, const std::string& reason,
                    const std::map<std::string, std::string>& extra) const {
  nlohmann::json p = nlohmann::json::parse(provenance_);
  p["end_time"] = WallTimeIso8601();
  p["status"] = status;
  p["status_reason"] = reason;
  for (const auto& [k, v] : extra) p[k] = v;
  WriteFileAtomic(File("provenance.json"), p.dump(2) + "\n");
}

}  // namespace asgd::experiments
