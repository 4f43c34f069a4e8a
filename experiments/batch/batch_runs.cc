#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include "algorithms/strategy.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/process.h"
#include "core/strings.h"
#include "experiments/analysis/compare.h"
#include "experiments/batch/batch_internal.h"
#include "experiments/config/command_line.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/exit_status.h"
#include "experiments/config/setup.h"
#include "experiments/config/signals.h"
#include "experiments/record/csv.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "models/device.h"

namespace asgd::experiments::batch {
namespace po = boost::program_options;
namespace fs = std::filesystem;
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

// Keys a sweep or suite sets for every child itself (a sweep also sets experiment.seed,
// from --seeds; --set experiment.seed moves the first seed).
const std::vector<std::string> kBatchKeys = {"experiment.name", "experiment.out_dir",
                                             "experiment.progress"};

// `asgd launch` prefixes each role's lines with "[role] " or "[role i] ": the line
// without it (or as it is).
std::string WithoutRolePrefix(const std::string& line) {
  if (line.empty() || line[0] != '[') return line;
  const std::size_t close = line.find("] ");
  return close == std::string::npos ? line : line.substr(close + 2);
}

// The line of a failed run's log that says why: asgd's error line, else "run stopped:",
// else the last line that is not the closing "run folder:".
std::string WhyItFailed(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string raw, error, stopped, last;
  while (std::getline(in, raw)) {
    const std::string line = WithoutRolePrefix(raw);
    if (Trim(line).empty() || StartsWith(line, "run folder: ")) continue;
    if (StartsWith(line, "asgd: ")) error = line;
    if (StartsWith(line, "run stopped: ")) stopped = line;
    last = line;
  }
  return !error.empty() ? error : !stopped.empty() ? stopped : last;
}

// "<yyyymmdd-hhmmss>-<name>-s<seed>" with an optional "-N" (RunDir's ids).
bool IsRunId(const std::string& id, const std::string& name, int64_t seed) {
  static constexpr std::size_t kStamp = 16;  // "yyyymmdd-hhmmss-"
  if (id.size() <= kStamp || id[8] != '-' || id[15] != '-') return false;
  for (std::size_t i = 0; i < 15; ++i) {
    if (i != 8 && (id[i] < '0' || id[i] > '9')) return false;
  }
  const std::string stem = name + "-s" + std::to_string(seed);
  const std::string rest = id.substr(kStamp);
  if (rest == stem) return true;
  if (!StartsWith(rest, stem + "-") || rest.size() == stem.size() + 1) return false;
  return std::all_of(rest.begin() + static_cast<std::ptrdiff_t>(stem.size() + 1), rest.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// The run folder a child wrote: the "run folder: PATH" line `asgd run` prints last, or
// else the folder under runs_dir named for the run.
std::string FindRunDir(const BatchRun& run, const std::string& runs_dir) {
  std::ifstream in(run.log_path);
  std::string raw, found;
  const std::string prefix = "run folder: ";
  while (std::getline(in, raw)) {
    const std::string line = WithoutRolePrefix(raw);
    if (StartsWith(line, prefix)) found = std::string(Trim(line.substr(prefix.size())));
  }
  if (!found.empty() && IsDirectory(found)) return found;
  std::vector<std::string> matches;
  if (IsDirectory(runs_dir)) {
    for (const auto& e : fs::directory_iterator(runs_dir)) {
      if (e.is_directory() && IsRunId(e.path().filename().string(), run.name, run.seed)) {
        matches.push_back(e.path().string());
      }
    }
  }
  std::sort(matches.begin(), matches.end());
  return matches.empty() ? std::string() : matches.back();
}

// True when the run folder holds a summary of a run that ended by itself: not one that a
// stop signal ended (its provenance.json gives that reason; `asgd run` killed by a
// signal leaves no summary at all).
bool EndedByItself(const std::string& run_dir) {
  if (!FileExists(JoinPath(run_dir, "summary.csv"))) return false;
  const std::string provenance = JoinPath(run_dir, "provenance.json");
  if (!FileExists(provenance)) return true;
  try {
    const auto j = nlohmann::json::parse(ReadFile(provenance));
    const std::string reason = j.value("status_reason", std::string());
    return reason != StopPolicy::SignalReason(SIGINT) &&
           reason != StopPolicy::SignalReason(SIGTERM);
  } catch (const nlohmann::json::exception&) {
    return false;  // a provenance cut short: the run did not end cleanly
  }
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

}  // namespace

bool IsBatchKey(const std::string& key) {
  return std::find(kBatchKeys.begin(), kBatchKeys.end(), key) != kBatchKeys.end();
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::vector<std::string> ChildArgv(const std::string& program, const BatchRun& run) {
  std::vector<std::string> argv = {program, run.launch ? "launch" : "run", run.config_path};
  if (run.tasks > 0) {
    argv = {"srun",         "--ntasks=" + std::to_string(run.tasks), program, "task", "--config",
            run.config_path};
  }
  for (const auto& o : run.overrides) {
    argv.emplace_back("--set");
    argv.push_back(o);
  }
  return argv;
}

// argv as a shell would take it back: arguments with blanks or quotes in single quotes.
std::string CommandLine(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) {
    if (!line.empty()) line += ' ';
    if (!a.empty() && a.find_first_of(" \t'\"$;&|<>()*?") == std::string::npos) {
      line += a;
      continue;
    }
    line += '\'';
    for (char c : a) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

// Records how a run ended and prints its one line.
void Finish(BatchRun& run, int status, double seconds, const std::string& runs_dir,
            std::size_t done, std::size_t total, std::ostream& out) {
  run.exit_status = status;
  run.seconds = seconds;
  run.run_dir = FindRunDir(run, runs_dir);
  std::string accuracy;
  if (status != 0) {
    const std::string why = WhyItFailed(run.log_path);
    run.problem = "exit status " + std::to_string(status) + (why.empty() ? "" : ": " + why);
  } else if (run.run_dir.empty()) {
    run.problem = "no run folder found under " + runs_dir;
  } else {
    try {
      RunSummary s = ReadRunSummary(run.run_dir);
      run.ok = true;
      accuracy = ", final test accuracy " + MarkdownNumber(s.Number("final_test_accuracy"), 4);
    } catch (const InputError& e) {
      run.problem = e.what();
    }
  }
  out << "[" << done << "/" << total << "] " << run.label << " s" << run.seed << ": ";
  if (run.ok) {
    out << "completed in " << Seconds(seconds) << accuracy << " (" << run.run_dir << ")\n";
  } else {
    out << "FAILED after " << Seconds(seconds) << " (" << run.problem << "; log " << run.log_path
        << ")\n";
  }
  out.flush();
}

std::string FinishedRunDir(const BatchRun& run, const std::string& runs_dir,
                           const std::string& moved_to) {
  std::vector<std::string> finished;
  if (!IsDirectory(runs_dir)) return "";
  for (const auto& e : fs::directory_iterator(runs_dir)) {
    if (!e.is_directory() || !IsRunId(e.path().filename().string(), run.name, run.seed)) continue;
    if (EndedByItself(e.path().string())) {
      finished.push_back(e.path().string());
    } else {
      MakeDirs(moved_to);
      fs::rename(e.path(), fs::path(moved_to) / e.path().filename());
    }
  }
  std::sort(finished.begin(), finished.end());
  return finished.empty() ? std::string() : finished.back();
}

void Reuse(BatchRun& run, const std::string& run_dir, std::ostream& out) {
  run.run_dir = run_dir;
  run.seconds = 0;
  try {
    const RunSummary s = ReadRunSummary(run_dir);
    run.ok = s.Get("status") == "completed";
    run.exit_status = run.ok ? 0 : kExitBadInput;  // what `asgd run` exits with on failure
    if (!run.ok) {
      const std::string why = WhyItFailed(run.log_path);
      run.problem = "status " + s.Get("status") + (why.empty() ? "" : ": " + why);
    }
  } catch (const InputError& e) {
    run.exit_status = kExitBadInput;
    run.problem = e.what();
  }
  out << "[resumed] " << run.label << " s" << run.seed << ": finished before, "
      << (run.ok ? "completed" : "FAILED (" + run.problem + ")") << " (" << run_dir << ")\n";
}

// Runs every run as a child of program, at most parallel at a time.
// With gpus, at most one run per listed CUDA device at a time: a run starts on the
// lowest-numbered free one, with model.device = cuda:N added to its overrides.
BatchOutcome RunBatch(std::vector<BatchRun>& runs, const std::string& program, int parallel,
                      const std::string& runs_dir, const std::string& what, std::ostream& out,
                      const std::vector<int>& gpus) {
  // SIGINT and SIGTERM are taken synchronously (experiments/config/signals.h), between polls;
  // the children start with an empty mask (ChildProcess).
  BlockedStopSignals signals;
  int sig = 0;
  struct Active {
    std::size_t index;
    std::unique_ptr<ChildProcess> child;
    std::chrono::steady_clock::time_point start;
    int gpu = -1;
  };
  std::set<int> free_gpus(gpus.begin(), gpus.end());
  if (!gpus.empty()) parallel = std::min(parallel, static_cast<int>(gpus.size()));
  std::vector<Active> active;
  std::size_t next = 0, done = 0;
  BatchOutcome outcome;
  while (done < runs.size()) {
    if (sig == 0) sig = signals.Wait(std::chrono::milliseconds(0));
    if (sig != 0) {
      // Signal every child first so that they stop together, then reap each.
      for (auto& a : active) a.child->Signal(SIGTERM);
      for (auto& a : active) a.child->Terminate(kGrace);
      outcome.signal = sig;
      out << what << ": " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": ended " << active.size()
          << " running run(s) by PID; " << done << " finished, " << runs.size() - next
          << " not started\n";
      out.flush();
      return outcome;
    }
    while (active.size() < static_cast<std::size_t>(parallel) && next < runs.size()) {
      BatchRun& run = runs[next];
      int gpu = -1;
      if (!free_gpus.empty()) {
        gpu = *free_gpus.begin();
        free_gpus.erase(free_gpus.begin());
        run.overrides.push_back("model.device=cuda:" + std::to_string(gpu));
      }
      const std::vector<std::string> argv = ChildArgv(program, run);
      WriteFileAtomic(run.log_path, "# " + CommandLine(argv) + "\n");
      ChildOptions o;
      o.argv = argv;
      o.capture_output = false;
      o.output_file = run.log_path;
      active.push_back({next, ChildProcess::Start(o), std::chrono::steady_clock::now(), gpu});
      ++next;
    }
    bool ended = false;
    for (auto it = active.begin(); it != active.end();) {
      if (const auto status = it->child->Poll()) {
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - it->start).count();
        Finish(runs[it->index], *status, seconds, runs_dir, ++done, runs.size(), out);
        if (!runs[it->index].ok) ++outcome.failed;
        if (it->gpu >= 0) free_gpus.insert(it->gpu);
        it = active.erase(it);
        ended = true;
      } else {
        ++it;
      }
    }
    if (!ended) sig = signals.Wait(kPollInterval);
  }
  return outcome;
}

// ---- Shared pieces of both commands ----------------------------------------------

std::string KeyOf(const std::string& assignment) {
  return std::string(Trim(std::string_view(assignment).substr(0, assignment.find('='))));
}

// Checks --set assignments against the schema (one line naming the bad one) and that
// none sets a key the batch sets itself.
void ValidateSets(const std::vector<std::string>& sets, const std::string& command) {
  Config scratch = Config::Defaults(ExperimentSchema());
  for (const auto& s : sets) {
    scratch.ApplyOverride(s);
    const std::string key = KeyOf(s);
    if (IsBatchKey(key)) {
      throw InputError("asgd " + command + ": --set " + key + ": set by asgd " + command +
                       " for every run");
    }
  }
}

int PositiveOption(const po::variables_map& vm, const std::string& name, int fallback) {
  if (!vm.count(name)) return fallback;
  const int v = vm[name].as<int>();
  if (v < 1) throw ConfigError("--" + name, std::to_string(v), "an integer >= 1");
  return v;
}

// A fresh output folder: out if given (it must not hold anything yet), else fallback,
// made unique with "-2", "-3", ... Creates it with runs/ and logs/.
std::string MakeBatchDir(const std::string& given, const std::string& fallback,
                         const std::string& command) {
  std::string dir = given;
  if (!dir.empty()) {
    if (fs::exists(dir) && !(IsDirectory(dir) && fs::is_empty(dir))) {
      throw InputError("asgd " + command + ": --out " + dir +
                       " exists and is not empty (runs would mix; choose another folder)");
    }
  } else {
    dir = fallback;
    for (int i = 2; fs::exists(dir); ++i) dir = fallback + "-" + std::to_string(i);
  }
  MakeDirs(JoinPath(dir, "runs"));
  MakeDirs(JoinPath(dir, "logs"));
  return dir;
}

// Loads a run's config as the child will, with the checks that involve several keys
// (e.g. replicas_to_aggregate <= workers) that `asgd run` would make. Throws ConfigError.
Config LoadRunConfig(const std::string& path, const std::vector<std::string>& overrides) {
  Config config = Config::FromFile(path, overrides, ExperimentSchema());
  const std::string algorithm = config.String("algorithm.name");
  if (algorithms::FindStrategy(algorithm).family != algorithms::Family::kSequential) {
    BuildStrategyOptions(config, 0);
  }
  return config;
}

// Fills in each run's log path; two runs whose labels give one file name are an error.
void AssignLogs(std::vector<BatchRun>& runs, const std::string& dir) {
  std::set<std::string> names;
  for (auto& r : runs) {
    const std::string file = r.name + "-s" + std::to_string(r.seed);
    if (!names.insert(file).second) {
      throw InputError("two runs would share the log and run folder name " + file +
                       " (labels differ only in characters other than letters, digits, "
                       "'-', '_' and '.')");
    }
    r.log_path = JoinPath(JoinPath(dir, "logs"), file + ".log");
  }
}

// --dry-run: the runs as they would start, one line each.
void PrintDryRun(const std::vector<BatchRun>& runs, const std::string& dir, std::ostream& out) {
  out << "would run " << runs.size() << " runs into " << dir << ":\n";
  for (const auto& r : runs) out << "  " << CommandLine(ChildArgv("asgd", r)) << "\n";
}

// Compares the runs that left a summary into dir. A plotting failure is returned (the
// tables are written first), so that a failed run can be reported instead.
std::string CompareBatch(const std::vector<BatchRun>& runs, const std::string& dir, bool plots,
                         std::ostream& out) {
  CompareOptions options;
  options.out_dir = dir;
  options.plots = plots;
  for (const auto& r : runs) {
    if (r.run_dir.empty() || !FileExists(JoinPath(r.run_dir, "summary.csv"))) continue;
    try {
      ReadRunSummary(r.run_dir);
    } catch (const InputError&) {
      continue;  // already reported as the run's problem
    }
    options.run_dirs.push_back(r.run_dir);
    options.labels.push_back(r.label);
  }
  if (options.run_dirs.empty()) {
    out << "no run left a summary.csv: nothing to compare\n";
    return "";
  }
  try {
    CompareRuns(options, out);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Exit: a failed run, else a plotting problem, else 0.
int BatchResult(const BatchOutcome& outcome, std::size_t total, const std::string& plot_error,
                const std::string& dir, const std::string& command, std::ostream& out) {
  if (outcome.failed > 0) {
    if (!plot_error.empty()) out << plot_error << "\n";
    throw InputError(::asgd::internal::StrCat("asgd ", command, ": ", outcome.failed, " of ", total,
                                              " runs failed (logs in ", JoinPath(dir, "logs"),
                                              ")"));
  }
  if (!plot_error.empty()) throw InputError(plot_error);
  return kExitOk;
}

}  // namespace asgd::experiments::batch
