#include "experiments/batch.h"

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
#include <signal.h>
#include <unistd.h>

#include "algorithms/strategy.h"
#include "core/check.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/process.h"
#include "core/strings.h"
#include "experiments/cli.h"
#include "experiments/command_line.h"
#include "experiments/compare.h"
#include "experiments/config_keys.h"
#include "experiments/csv.h"
#include "experiments/run_dir.h"
#include "experiments/setup.h"
#include "experiments/signals.h"
#include "models/device.h"

namespace asgd::experiments {
namespace po = boost::program_options;
namespace fs = std::filesystem;
namespace {

constexpr auto kGrace = std::chrono::milliseconds(2000);
constexpr auto kPollInterval = std::chrono::milliseconds(50);

// Keys a sweep or suite sets for every child itself (a sweep also sets experiment.seed,
// from --seeds; --set experiment.seed moves the first seed).
const std::vector<std::string> kBatchKeys = {"experiment.name", "experiment.out_dir",
                                             "experiment.progress"};

bool IsBatchKey(const std::string& key) {
  return std::find(kBatchKeys.begin(), kBatchKeys.end(), key) != kBatchKeys.end();
}

// ---- Running children ----------------------------------------------------------

// One `asgd run` of a sweep or suite.
struct BatchRun {
  std::string label;  // in the comparison and the progress lines
  std::string name;   // SanitizeLabel(label): log and run folder names
  std::string config_path;
  std::vector<std::string> overrides;  // every --set for the child, in order
  int64_t seed = 0;
  std::string log_path;
  // Filled in when it ends.
  int exit_status = -1;
  double seconds = 0;
  std::string run_dir;  // "" if none was found
  bool ok = false;      // exited 0 and left a well-formed summary.csv
  std::string problem;  // why not ok
};

struct BatchOutcome {
  int signal = 0;  // the stop signal that ended the batch, or 0
  int failed = 0;
};

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::vector<std::string> ChildArgv(const std::string& program, const BatchRun& run) {
  std::vector<std::string> argv = {program, "run", run.config_path};
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

// The line of a failed run's log that says why: asgd's error line, else "run stopped:",
// else the last line that is not the closing "run folder:".
std::string WhyItFailed(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string line, error, stopped, last;
  while (std::getline(in, line)) {
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
  std::string line, found;
  const std::string prefix = "run folder: ";
  while (std::getline(in, line)) {
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

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
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

// Runs every run as a child of program, at most parallel at a time.
// With gpus, at most one run per listed CUDA device at a time: a run starts on the
// lowest-numbered free one, with model.device = cuda:N added to its overrides.
BatchOutcome RunBatch(std::vector<BatchRun>& runs, const std::string& program, int parallel,
                      const std::string& runs_dir, const std::string& what, std::ostream& out,
                      const std::vector<int>& gpus = {}) {
  // SIGINT and SIGTERM are taken synchronously (experiments/signals.h), between polls;
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
  if (algorithm != kPsCheck && !algorithms::FindStrategy(algorithm).sequential) {
    BuildStrategyOptions(config);
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

// ---- SLURM backend ---------------------------------------------------------------
//
// The batch folder gets slurm/: tasks.txt (line i + 1 is array task i's shell command,
// run folder and log included), array.sbatch (the job-array script, which reads its line
// of tasks.txt, runs it and writes status/<i>), args (what `collect` replans from) and,
// once submitted, job_id. Nothing is recomputed on the cluster: every task's command is
// written here, after the same validation as a local batch.

struct SlurmOptions {
  std::string backend = "local";
  bool emit_only = false;
  std::string partition, time;
  int gpus_per_task = 0;
  std::vector<std::string> sbatch_args;  // passed as they are, after the options above
};

void AddBackendOptions(po::options_description& desc) {
  desc.add_options()("gpus", po::value<std::string>(),
                     "local backend: CUDA devices to place runs on, e.g. 0,1,2,3: at most one "
                     "run per device at a time, each with model.device = cuda:N")(
      "backend", po::value<std::string>(),
      "where the runs execute: local (default, child processes) or slurm "
      "(a job array submitted with sbatch; gather with `collect DIR`)")(
      "emit-only", "--backend slurm: write the job-array script without submitting it")(
      "partition", po::value<std::string>(), "--backend slurm: sbatch --partition")(
      "time", po::value<std::string>(), "--backend slurm: sbatch --time (per array task)")(
      "gpus-per-task", po::value<int>(),
      "--backend slurm: sbatch --gpus-per-task (a run sees its GPUs through "
      "CUDA_VISIBLE_DEVICES: model.device = cuda is the first of them)")(
      "sbatch", po::value<std::vector<std::string>>()->composing(),
      "--backend slurm: one more sbatch option, passed as it is (repeatable), e.g. "
      "--sbatch=--account=abc");
}

SlurmOptions ReadBackendOptions(const po::variables_map& vm, const std::string& command) {
  SlurmOptions o;
  if (vm.count("backend")) o.backend = vm["backend"].as<std::string>();
  if (o.backend != "local" && o.backend != "slurm") {
    throw InputError("asgd " + command + ": --backend " + QuoteForMessage(o.backend) +
                     ": unknown backend (expected local or slurm)");
  }
  const bool slurm = o.backend == "slurm";
  for (const char* name : {"emit-only", "partition", "time", "gpus-per-task", "sbatch"}) {
    if (vm.count(name) && !slurm) {
      throw InputError("asgd " + command + ": --" + name + " needs --backend slurm");
    }
  }
  o.emit_only = vm.count("emit-only") > 0;
  if (vm.count("partition")) o.partition = vm["partition"].as<std::string>();
  if (vm.count("time")) o.time = vm["time"].as<std::string>();
  if (vm.count("gpus-per-task")) {
    o.gpus_per_task = vm["gpus-per-task"].as<int>();
    if (o.gpus_per_task < 1) {
      throw ConfigError("--gpus-per-task", std::to_string(o.gpus_per_task), "an integer >= 1");
    }
  }
  if (vm.count("sbatch")) o.sbatch_args = vm["sbatch"].as<std::vector<std::string>>();
  for (const auto& a : o.sbatch_args) {
    if (!StartsWith(a, "-")) {
      throw InputError("asgd " + command + ": --sbatch " + QuoteForMessage(a) +
                       ": expected an sbatch option such as --account=abc");
    }
    if (a.find('\n') != std::string::npos) {
      throw InputError("asgd " + command + ": --sbatch: an option holds a newline");
    }
  }
  return o;
}

// --gpus: distinct CUDA ordinals that exist here (ASGD_FAKE_CUDA_DEVICES=N pretends N
// exist, for checking the placement on a machine without GPUs); none for the others.
std::vector<int> ReadGpus(const po::variables_map& vm, const std::vector<std::string>& sets,
                          const std::string& command, const SlurmOptions& backend) {
  if (!vm.count("gpus")) return {};
  const std::string list = vm["gpus"].as<std::string>();
  const std::string prefix = "asgd " + command + ": --gpus " + QuoteForMessage(list) + ": ";
  if (backend.backend == "slurm") {
    throw InputError(prefix + "the local backend's; with --backend slurm use --gpus-per-task");
  }
  for (const auto& s : sets) {
    if (KeyOf(s) == "model.device") {
      throw InputError(prefix + "sets model.device for every run; drop --set model.device");
    }
  }
  std::vector<int> gpus;
  for (const auto& item : Split(list, ',')) {
    const std::string t(Trim(item));
    if (t.empty() || t.size() > 4 ||
        !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      throw InputError(prefix + "expected CUDA device numbers separated by commas, e.g. 0,1,2,3");
    }
    const int g = std::stoi(t);
    if (std::find(gpus.begin(), gpus.end(), g) != gpus.end()) {
      throw InputError(prefix + "device " + t + " is given twice");
    }
    gpus.push_back(g);
  }
  const char* fake = std::getenv("ASGD_FAKE_CUDA_DEVICES");
  const int count = fake != nullptr ? std::atoi(fake) : models::CudaDeviceCount();
  for (int g : gpus) {
    if (g < count) continue;
    const std::string reason = count > 0 ? "this machine has " + std::to_string(count) +
                                               " (cuda:0 to cuda:" + std::to_string(count - 1) + ")"
                               : fake != nullptr ? "ASGD_FAKE_CUDA_DEVICES=0"
                                                 : models::CudaUnavailableReason();
    throw InputError(prefix + "no CUDA device " + std::to_string(g) + " (" + reason + ")");
  }
  return gpus;
}

// The path of program on PATH, or "".
std::string FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (const auto& d : Split(path, ':')) {
    if (d.empty()) continue;
    const std::string candidate = JoinPath(std::string(d), program);
    if (::access(candidate.c_str(), X_OK) == 0 && !IsDirectory(candidate)) return candidate;
  }
  return "";
}

struct ToolResult {
  int status = -1;
  std::vector<std::string> lines;  // stdout and stderr together
};

// Runs a SLURM client command (found on PATH) to its end, at most timeout; status -1
// when it is not installed.
ToolResult RunTool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  ToolResult result;
  const std::string path = FindOnPath(argv.at(0));
  if (path.empty()) return result;
  ChildOptions o;
  o.argv = argv;
  o.argv[0] = path;
  auto child = ChildProcess::Start(o);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (child->ReadLines([&](std::string_view line) { result.lines.emplace_back(line); })) {
    if (std::chrono::steady_clock::now() > deadline) {
      result.status = child->Terminate(kGrace);
      result.lines.push_back(argv[0] + ": timed out");
      return result;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto status = child->Wait(std::chrono::duration_cast<std::chrono::milliseconds>(
      std::max(deadline - std::chrono::steady_clock::now(),
               std::chrono::steady_clock::duration(std::chrono::seconds(1)))));
  result.status = status ? *status : child->Terminate(kGrace);
  return result;
}

std::string SlurmDir(const std::string& dir) { return JoinPath(dir, "slurm"); }

// Writes slurm/ (see above) for runs; returns the script's path.
std::string WriteSlurmFiles(const std::vector<BatchRun>& runs, const std::string& dir,
                            const std::vector<std::string>& replan_args,
                            const std::optional<int>& parallel, const SlurmOptions& options,
                            const std::string& job_name) {
  const std::string slurm = SlurmDir(dir);
  MakeDirs(JoinPath(slurm, "status"));
  MakeDirs(JoinPath(slurm, "output"));
  const std::string program = SelfExecutable();
  std::string tasks;
  for (const auto& r : runs) {
    const std::vector<std::string> argv = ChildArgv(program, r);
    WriteFileAtomic(r.log_path, "# " + CommandLine(argv) + "\n");
    tasks += CommandLine(argv) + " >> " + CommandLine({r.log_path}) + " 2>&1\n";
  }
  WriteFileAtomic(JoinPath(slurm, "tasks.txt"), tasks);
  std::string args;
  for (const auto& a : replan_args) args += a + "\n";
  WriteFileAtomic(JoinPath(slurm, "args"), args);

  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# Written by asgd: one array task per run; task i runs line i + 1 of tasks.txt\n"
    << "# (an `asgd run` into " << JoinPath(dir, "runs") << ") and writes its exit status\n"
    << "# to status/i. Gather the results with `asgd "
    << (job_name.find("suite") != std::string::npos ? "suite" : "sweep") << " collect " << dir
    << "`.\n"
    << "#SBATCH --job-name=" << job_name << "\n"
    << "#SBATCH --array=0-" << runs.size() - 1;
  if (parallel) s << "%" << *parallel;
  s << "\n#SBATCH --ntasks=1\n"
    << "#SBATCH --output=" << JoinPath(slurm, "output") << "/%A_%a.out\n"
    << "#SBATCH --chdir=" << fs::current_path().string() << "\n";
  if (!options.partition.empty()) s << "#SBATCH --partition=" << options.partition << "\n";
  if (!options.time.empty()) s << "#SBATCH --time=" << options.time << "\n";
  if (options.gpus_per_task > 0) s << "#SBATCH --gpus-per-task=" << options.gpus_per_task << "\n";
  for (const auto& a : options.sbatch_args) s << "#SBATCH " << a << "\n";
  s << "set -u\n"
    << "tasks=" << CommandLine({JoinPath(slurm, "tasks.txt")}) << "\n"
    << "status_dir=" << CommandLine({JoinPath(slurm, "status")}) << "\n"
    << "i=${SLURM_ARRAY_TASK_ID:?not an array task}\n"
    << "line=$(sed -n \"$((i + 1))p\" \"$tasks\")\n"
    << "if [ -z \"$line\" ]; then echo \"no line $((i + 1)) in $tasks\" >&2; exit 2; fi\n"
    << "start=$SECONDS\n"
    << "eval \"$line\"\n"
    << "status=$?\n"
    << "echo \"$status $((SECONDS - start))\" > \"$status_dir/$i.tmp\" && "
       "mv \"$status_dir/$i.tmp\" \"$status_dir/$i\"\n"
    << "exit \"$status\"\n";
  const std::string script = JoinPath(slurm, "array.sbatch");
  WriteFileAtomic(script, s.str());
  fs::permissions(script, fs::perms::owner_exec, fs::perm_options::add);
  return script;
}

// Submits the script; prints and returns the job id. Throws InputError with sbatch's
// first error line when it refuses.
std::string SubmitSlurm(const std::string& dir, const std::string& script,
                        const std::string& command, std::ostream& out) {
  const ToolResult r = RunTool({"sbatch", "--parsable", script}, std::chrono::seconds(60));
  if (r.status == -1 && r.lines.empty()) {
    throw InputError("asgd " + command + ": --backend slurm: sbatch not found on PATH");
  }
  std::string job;
  if (r.status == 0) {
    for (const auto& l : r.lines) {
      const std::string t(Trim(l.substr(0, l.find(';'))));
      if (!t.empty() &&
          std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
        job = t;
    }
  }
  if (job.empty()) {
    std::string why;
    for (const auto& l : r.lines) {
      if (!Trim(l).empty()) {
        why = std::string(Trim(l));
        break;
      }
    }
    throw InputError("asgd " + command + ": sbatch refused " + script + " (exit " +
                     std::to_string(r.status) + ")" + (why.empty() ? "" : ": " + why));
  }
  WriteFileAtomic(JoinPath(SlurmDir(dir), "job_id"), job + "\n");
  out << "submitted job " << job << " (" << CommandLine({script}) << ")\n"
      << "collect with: asgd " << command << " collect " << dir << "\n";
  out.flush();
  return job;
}

// Array task index -> SLURM state (e.g. PENDING, RUNNING, CANCELLED) for the tasks SLURM
// still knows: squeue for the queued and running, then sacct when accounting is there,
// else scontrol (which remembers ended jobs for MinJobAge).
std::map<std::size_t, std::string> SlurmTaskStates(const std::string& job) {
  std::map<std::size_t, std::string> states;
  auto index_of = [](const std::string& text) -> std::optional<std::size_t> {
    if (text.empty() ||
        !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    return static_cast<std::size_t>(std::stoull(text));
  };
  const auto timeout = std::chrono::seconds(30);
  const ToolResult sq = RunTool({"squeue", "-h", "-r", "-j", job, "-o", "%K %T"}, timeout);
  if (sq.status == 0) {
    for (const auto& l : sq.lines) {
      const auto f = Split(std::string(Trim(l)), ' ');
      if (f.size() == 2) {
        if (auto i = index_of(std::string(f[0]))) states[*i] = std::string(f[1]);
      }
    }
  }
  const ToolResult sa =
      RunTool({"sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State"}, timeout);
  if (sa.status == 0) {
    for (const auto& l : sa.lines) {
      const auto f = Split(std::string(Trim(l)), '|');
      if (f.size() < 2) continue;
      const std::string id(f[0]);
      const std::size_t us = id.find('_');
      if (us == std::string::npos) continue;
      if (auto i = index_of(id.substr(us + 1)); i && !states.count(*i)) {
        states[*i] = std::string(Trim(std::string(f[1]).substr(0, std::string(f[1]).find(' '))));
      }
    }
  }
  const ToolResult sc = RunTool({"scontrol", "-o", "show", "job", job}, timeout);
  if (sc.status == 0) {
    for (const auto& l : sc.lines) {
      std::optional<std::size_t> index;
      std::string state;
      for (const auto& field : Split(l, ' ')) {
        const std::string f(field);
        if (StartsWith(f, "ArrayTaskId=")) index = index_of(f.substr(12));
        if (StartsWith(f, "JobState=")) state = f.substr(9);
      }
      if (index && !state.empty() && !states.count(*index)) states[*index] = state;
    }
  }
  return states;
}

// `collect`: how every run of a submitted batch ended, from slurm/status/ and the run
// folders, with SLURM's word on the tasks that left no status. One line per run.
BatchOutcome CollectSlurm(std::vector<BatchRun>& runs, const std::string& dir,
                          const std::string& command, std::ostream& out) {
  const std::string slurm = SlurmDir(dir);
  const std::string job_file = JoinPath(slurm, "job_id");
  const std::string job =
      FileExists(job_file) ? std::string(Trim(ReadFile(job_file))) : std::string();
  std::map<std::size_t, std::string> states;
  bool asked = false;
  const std::string runs_dir = JoinPath(dir, "runs");
  BatchOutcome outcome;
  int completed = 0, failed = 0, missing = 0, waiting = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    BatchRun& r = runs[i];
    const std::string status_file = JoinPath(JoinPath(slurm, "status"), std::to_string(i));
    if (FileExists(status_file)) {
      std::istringstream in(ReadFile(status_file));
      int status = -1;
      double seconds = 0;
      in >> status >> seconds;
      Finish(r, status, seconds, runs_dir, i + 1, runs.size(), out);
      r.ok ? ++completed : ++failed;
      continue;
    }
    if (!asked && !job.empty()) {
      states = SlurmTaskStates(job);
      asked = true;
    }
    const auto it = states.find(i);
    const std::string state = it == states.end() ? "" : it->second;
    out << "[" << i + 1 << "/" << runs.size() << "] " << r.label << " s" << r.seed << ": ";
    if (state == "PENDING" || state == "RUNNING" || state == "CONFIGURING" ||
        state == "COMPLETING" || state == "REQUEUED" || state == "SUSPENDED") {
      ++waiting;
      r.problem = "still " + ToLower(state) + " in SLURM";
      out << "NOT FINISHED (array task " << job << "_" << i << " is " << state << ")\n";
    } else {
      ++missing;
      r.problem = job.empty() ? "never submitted" : "no exit status";
      out << "MISSING (array task " << (job.empty() ? "?" : job) << "_" << i
          << (job.empty()     ? " was never submitted"
              : state.empty() ? " left no exit status and SLURM no longer knows it"
                              : " left no exit status; SLURM says " + state)
          << ")\n";
    }
  }
  out << command << " collect: " << completed << " of " << runs.size() << " runs completed, "
      << failed << " failed, " << missing << " missing, " << waiting << " not finished\n";
  out.flush();
  outcome.failed = failed + missing + waiting;
  return outcome;
}

// The options `collect` replans a batch from, read from slurm/args.
std::vector<std::string> ReadReplanArgs(const std::string& dir, const std::string& command) {
  const std::string path = JoinPath(SlurmDir(dir), "args");
  if (!FileExists(path)) {
    throw InputError("asgd " + command + " collect: " + dir +
                     " holds no slurm/args (not a folder written by asgd " + command +
                     " --backend slurm)");
  }
  std::vector<std::string> args;
  std::istringstream in(ReadFile(path));
  std::string line;
  while (std::getline(in, line)) args.push_back(line);
  return args;
}

// ---- Sweep -----------------------------------------------------------------------

struct GridAxis {
  std::string key;                  // section.key
  std::string short_key;            // as shown in labels
  std::vector<std::string> values;  // as given
};

std::vector<GridAxis> ParseGrid(const std::vector<std::string>& specs) {
  std::vector<GridAxis> axes;
  const Schema& schema = ExperimentSchema();
  for (const auto& spec : specs) {
    const std::size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw InputError("asgd sweep: --grid " + QuoteForMessage(spec) +
                       ": expected section.key=v1,v2[,...], e.g. "
                       "--grid algorithm.learning_rate=0.01,0.1");
    }
    GridAxis axis;
    axis.key = std::string(Trim(std::string_view(spec).substr(0, eq)));
    schema.Get(axis.key);  // an unknown key, with a suggestion
    if (IsBatchKey(axis.key) || axis.key == "experiment.seed") {
      throw InputError("asgd sweep: --grid " + axis.key + ": set by the sweep for every run" +
                       (axis.key == "experiment.seed" ? " (use --seeds N)" : ""));
    }
    for (const auto& a : axes) {
      if (a.key == axis.key) throw InputError("asgd sweep: --grid " + axis.key + " is given twice");
    }
    // Values of list-valued keys hold commas: then ';' separates the values.
    const std::string list = spec.substr(eq + 1);
    const char sep = list.find(';') != std::string::npos ? ';' : ',';
    for (const auto& v : Split(list, sep)) {
      const std::string value(Trim(v));
      if (value.empty()) {
        throw InputError("asgd sweep: --grid " + QuoteForMessage(spec) +
                         ": an empty value (expected section.key=v1,v2[,...])");
      }
      if (std::find(axis.values.begin(), axis.values.end(), value) != axis.values.end()) {
        throw InputError("asgd sweep: --grid " + axis.key + ": value " + QuoteForMessage(value) +
                         " is given twice");
      }
      axis.values.push_back(value);
    }
    axes.push_back(std::move(axis));
  }
  // Labels use the key without its section unless two axes share it.
  for (auto& a : axes) {
    const std::string k = a.key.substr(a.key.find('.') + 1);
    const bool shared = std::count_if(axes.begin(), axes.end(), [&](const GridAxis& b) {
                          return b.key.substr(b.key.find('.') + 1) == k;
                        }) > 1;
    a.short_key = shared ? a.key : k;
  }
  return axes;
}

// One point of the grid: the value index of every axis.
std::vector<std::vector<std::size_t>> GridPoints(const std::vector<GridAxis>& axes) {
  std::vector<std::vector<std::size_t>> points = {{}};
  for (const auto& a : axes) {
    std::vector<std::vector<std::size_t>> next;
    for (const auto& p : points) {
      for (std::size_t v = 0; v < a.values.size(); ++v) {
        auto q = p;
        q.push_back(v);
        next.push_back(std::move(q));
      }
    }
    points = std::move(next);
  }
  return points;
}

std::string PointLabel(const std::vector<GridAxis>& axes, const std::vector<std::size_t>& point,
                       const std::string& fallback) {
  if (axes.empty()) return fallback;
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    parts.push_back(axes[i].short_key + "=" + axes[i].values[point[i]]);
  }
  return Join(parts, " ");
}

// A metric's value rounded for sweep.md.
std::string MetricText(const std::string& metric, double v) {
  if (metric.find("accuracy") != std::string::npos) return MarkdownNumber(v, 4);
  if (metric == "samples_per_s") return MarkdownNumber(v, 0);
  if (metric == "staleness_mean") return MarkdownNumber(v, 2);
  return MarkdownSeconds(v);
}

std::string StatCell(const std::string& metric, const SampleStats& s) {
  if (s.n == 0) return "—";
  std::string cell = MetricText(metric, s.mean);
  if (!std::isnan(s.std)) cell += " ± " + MetricText(metric, s.std);
  return cell;
}

std::string MetricHeader(const std::string& metric) {
  if (metric == "final_test_accuracy") return "final test acc.";
  if (metric == "best_test_accuracy") return "best test acc.";
  if (metric == "wall_time_s") return "wall time (s)";
  if (metric == "time_to_target_s") return "time to target (s)";
  if (metric == "samples_per_s") return "samples/s";
  if (metric == "staleness_mean") return "staleness mean";
  return metric;
}

// Whether a larger value of a sweep metric is better (accuracies, throughput) or worse
// (times, staleness).
bool HigherIsBetter(const std::string& metric) {
  return metric.find("accuracy") != std::string::npos || metric == "samples_per_s";
}

// Writes sweep.csv and sweep.md.
void WriteSweepTables(const std::string& dir, const std::string& config_path,
                      const std::vector<GridAxis>& axes,
                      const std::vector<std::vector<std::size_t>>& points,
                      const std::vector<std::string>& labels, const std::vector<BatchRun>& runs,
                      int seeds, std::ostream& out) {
  std::vector<std::string> columns = {"label"};
  for (const auto& a : axes) columns.push_back(a.key);
  columns.insert(columns.end(), {"runs", "failed"});
  for (const auto& m : SweepMetrics()) {
    for (const char* s : {"_mean", "_std", "_min", "_max"}) columns.push_back(m + s);
  }
  std::ostringstream csv, md;
  CsvWriter writer(csv, columns);
  md << "# Sweep of " << config_path << "\n\n";
  std::vector<std::string> grid_text;
  for (const auto& a : axes) grid_text.push_back(a.key + " in {" + Join(a.values, ", ") + "}");
  md << "Grid: " << (grid_text.empty() ? "none" : Join(grid_text, "; ")) << "; " << seeds
     << (seeds == 1 ? " seed" : " seeds") << " per point.\n\n"
     << "Cells are the mean ± sample standard deviation over the point's completed runs\n"
     << "(sweep.csv adds min and max); — means no value (e.g. a target never reached).\n"
     << "Accuracies are fractions of the test set, times seconds of training wall time.\n\n";
  md << "| label | runs | failed |";
  for (const auto& m : SweepMetrics()) md << " " << MetricHeader(m) << " |";
  md << "\n| --- | ---: | ---: |";
  for (std::size_t i = 0; i < SweepMetrics().size(); ++i) md << " ---: |";
  md << "\n";
  // The best point on each metric: its index and mean (-1: no point has a value).
  std::vector<std::pair<std::ptrdiff_t, double>> best(SweepMetrics().size(), {-1, 0.0});
  for (std::size_t p = 0; p < points.size(); ++p) {
    int64_t completed = 0, failed = 0;
    std::vector<std::vector<double>> values(SweepMetrics().size());
    for (const auto& r : runs) {
      if (r.label != labels[p]) continue;
      if (!r.ok) {
        ++failed;
        continue;
      }
      ++completed;
      const RunSummary s = ReadRunSummary(r.run_dir);
      for (std::size_t m = 0; m < SweepMetrics().size(); ++m) {
        values[m].push_back(s.Number(SweepMetrics()[m]));
      }
    }
    std::vector<std::string> cells = {CsvCell(labels[p])};
    for (std::size_t a = 0; a < axes.size(); ++a)
      cells.push_back(CsvCell(axes[a].values[points[p][a]]));
    cells.push_back(CsvCell(completed));
    cells.push_back(CsvCell(failed));
    md << "| " << MarkdownCell(labels[p]) << " | " << completed << " | " << failed << " |";
    for (std::size_t m = 0; m < SweepMetrics().size(); ++m) {
      const SampleStats s = Describe(values[m]);
      for (double v : {s.mean, s.std, s.min, s.max}) cells.push_back(CsvCell(v));
      md << " " << StatCell(SweepMetrics()[m], s) << " |";
      if (s.n > 0 &&
          (best[m].first < 0 || (HigherIsBetter(SweepMetrics()[m]) ? s.mean > best[m].second
                                                                   : s.mean < best[m].second))) {
        best[m] = {static_cast<std::ptrdiff_t>(p), s.mean};
      }
    }
    md << "\n";
    writer.WriteRow(cells);
  }
  md << "\nBest point on each metric (by its mean over seeds):\n\n";
  for (std::size_t m = 0; m < SweepMetrics().size(); ++m) {
    const std::string& metric = SweepMetrics()[m];
    md << "- " << MetricHeader(metric) << " (" << (HigherIsBetter(metric) ? "highest" : "lowest")
       << "): ";
    if (best[m].first < 0) {
      md << "— (no point has a value)\n";
    } else {
      md << MarkdownCell(labels[static_cast<std::size_t>(best[m].first)]) << ", "
         << MetricText(metric, best[m].second) << "\n";
    }
  }
  WriteFileAtomic(JoinPath(dir, "sweep.csv"), csv.str());
  out << "wrote " << JoinPath(dir, "sweep.csv") << "\n";
  WriteFileAtomic(JoinPath(dir, "sweep.md"), md.str());
  out << "wrote " << JoinPath(dir, "sweep.md") << "\n";
}

// ---- Suite -----------------------------------------------------------------------

struct IniEntry {
  std::string key;
  std::string value;
  int line = 0;
};

struct IniSection {
  std::string name;
  int line = 0;
  std::vector<IniEntry> entries;
};

std::vector<IniSection> ParseSuiteFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open the suite file");
  std::vector<IniSection> sections;
  std::string raw;
  int n = 0;
  while (std::getline(in, raw)) {
    ++n;
    std::string_view line = Trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    const std::string where = path + ":" + std::to_string(n);
    if (line.front() == '[') {
      if (line.back() != ']') throw InputError(where + ": expected '[section]'");
      IniSection s;
      s.name = std::string(Trim(line.substr(1, line.size() - 2)));
      s.line = n;
      sections.push_back(std::move(s));
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      throw InputError(where + ": expected 'key = value' or '[section]'");
    }
    if (sections.empty()) throw InputError(where + ": a key before any [section]");
    std::string_view value = line.substr(eq + 1);
    // An inline comment starts with '#' after a blank.
    for (std::size_t i = 1; i < value.size(); ++i) {
      if (value[i] == '#' && (value[i - 1] == ' ' || value[i - 1] == '\t')) {
        value = value.substr(0, i);
        break;
      }
    }
    IniEntry e;
    e.key = std::string(Trim(line.substr(0, eq)));
    e.value = std::string(Trim(value));
    e.line = n;
    for (const auto& other : sections.back().entries) {
      if (other.key == e.key) {
        throw InputError(where + ": [" + sections.back().name + "] " + e.key + " is given twice");
      }
    }
    sections.back().entries.push_back(std::move(e));
  }
  return sections;
}

// "section.key=value; section.key=value" -> the assignments.
std::vector<std::string> SplitSets(const std::string& text) {
  std::vector<std::string> sets;
  for (const auto& a : Split(text, ';')) {
    if (!Trim(a).empty()) sets.emplace_back(Trim(a));
  }
  return sets;
}

const IniEntry* FindEntry(const IniSection& s, const std::string& key) {
  for (const auto& e : s.entries) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

void CheckKeys(const std::string& path, const IniSection& s,
               const std::vector<std::string>& known) {
  for (const auto& e : s.entries) {
    if (std::find(known.begin(), known.end(), e.key) != known.end()) continue;
    const std::string guess = ClosestMatch(e.key, known);
    throw InputError(
        path + ":" + std::to_string(e.line) + ": [" + s.name + "] " + e.key + ": unknown key (" +
        (guess.empty() ? "expected " + Join(known, " or ") : "did you mean " + guess + "?") + ")");
  }
}

}  // namespace

SampleStats Describe(const std::vector<double>& values) {
  SampleStats s;
  const double nan = std::nan("");
  double sum = 0;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -s.min;
  for (double v : values) {
    if (std::isnan(v)) continue;
    ++s.n;
    sum += v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  if (s.n == 0) {
    s.mean = s.std = s.min = s.max = nan;
    return s;
  }
  s.mean = sum / static_cast<double>(s.n);
  if (s.n < 2) {
    s.std = nan;
    return s;
  }
  double ss = 0;
  for (double v : values) {
    if (!std::isnan(v)) ss += (v - s.mean) * (v - s.mean);
  }
  s.std = std::sqrt(ss / static_cast<double>(s.n - 1));
  return s;
}

const std::vector<std::string>& SweepMetrics() {
  static const std::vector<std::string> kMetrics = {"final_test_accuracy", "best_test_accuracy",
                                                    "wall_time_s",         "time_to_target_s",
                                                    "samples_per_s",       "staleness_mean"};
  return kMetrics;
}

int SweepCommand(const std::vector<std::string>& given_args, std::ostream& out) {
  // `collect DIR` replans the batch from what the submission wrote, then gathers.
  std::string collect_dir;
  std::vector<std::string> args = given_args;
  if (!args.empty() && args[0] == "collect") {
    if (args.size() < 2 || args.size() > 3 || (args.size() == 3 && args[2] != "--no-plots")) {
      throw InputError("usage: asgd sweep collect DIR [--no-plots]");
    }
    collect_dir = fs::absolute(args[1]).lexically_normal().string();
    const bool no_plots = args.size() == 3;
    args = ReadReplanArgs(collect_dir, "sweep");
    if (no_plots) args.emplace_back("--no-plots");
  }
  po::options_description desc("Options");
  desc.add_options()("help,h", "describe this command")(
      "grid", po::value<std::vector<std::string>>()->composing(),
      "an axis of the grid: --grid section.key=v1,v2[,...] (repeatable; values holding "
      "commas are separated by ';' instead)")(
      "seeds", po::value<int>(), "runs per grid point, seeds experiment.seed + 0..N-1 (default 1)")(
      "parallel", po::value<int>(), "runs at a time (default 1)")(
      "set", po::value<std::vector<std::string>>()->composing(),
      "override one key for every run: --set section.key=value (repeatable)")(
      "out", po::value<std::string>(),
      "the sweep folder (default results/sweeps/<UTC time>-<config stem>)")(
      "no-plots", "compare without drawing the PNGs")(
      "dry-run", "validate and list the runs without starting them")(
      "config", po::value<std::string>(), "the experiment config (INI)");
  AddBackendOptions(desc);
  po::positional_options_description pos;
  pos.add("config", 1);
  auto vm = ParseCommandLine(args, desc, pos, "sweep");
  const std::string usage =
      "usage: asgd sweep CONFIG --grid section.key=v1,v2 [--grid ...] [--seeds N]\n"
      "                  [--parallel P] [--set section.key=value ...] [--out DIR]\n\n"
      "Runs CONFIG at every point of the grid (the cartesian product of the --grid axes)\n"
      "with N seeds each, as `asgd run` children, P at a time; then writes\n"
      "DIR/sweep.csv and sweep.md (mean, std, min, max over seeds per point) and compares\n"
      "the runs (comparison.csv, comparison.md, plots). Logs: DIR/logs/. Exit 2 if a run\n"
      "failed; SIGINT/SIGTERM end every run by PID (exit 128 + the signal).\n\n"
      "With --backend slurm the runs become one SLURM job array instead: the script is\n"
      "written to DIR/slurm/array.sbatch and submitted with sbatch (the job id is printed);\n"
      "`asgd sweep collect DIR` then writes the tables once the tasks have ended.";
  if (vm.count("help")) {
    out << usage << "\n" << desc;
    return kExitOk;
  }
  if (!vm.count("config")) throw InputError("asgd sweep: missing CONFIG (see `asgd sweep --help`)");
  const SlurmOptions backend = ReadBackendOptions(vm, "sweep");
  const bool slurm = backend.backend == "slurm";
  std::vector<std::string> given_sets;
  if (vm.count("set")) given_sets = vm["set"].as<std::vector<std::string>>();
  if (vm.count("grid")) {
    for (const auto& g : vm["grid"].as<std::vector<std::string>>()) given_sets.push_back(g);
  }
  const std::vector<int> gpus = ReadGpus(vm, given_sets, "sweep", backend);
  // Array tasks may start in another folder: every path they get is absolute.
  const std::string config_path = slurm ? fs::absolute(vm["config"].as<std::string>()).string()
                                        : vm["config"].as<std::string>();
  const int seeds = PositiveOption(vm, "seeds", 1);
  const int parallel = PositiveOption(vm, "parallel", 1);
  std::vector<std::string> sets;
  if (vm.count("set")) sets = vm["set"].as<std::vector<std::string>>();
  const std::vector<GridAxis> axes = ParseGrid(
      vm.count("grid") ? vm["grid"].as<std::vector<std::string>>() : std::vector<std::string>());
  ValidateSets(sets, "sweep");
  for (const auto& s : sets) {
    for (const auto& a : axes) {
      if (KeyOf(s) == a.key) {
        throw InputError("asgd sweep: " + a.key + " is given by both --set and --grid");
      }
    }
  }
  const Schema& schema = ExperimentSchema();
  const Config base = Config::FromFile(config_path, sets, schema);
  const int64_t base_seed = base.Int("experiment.seed");
  const std::string stem = ConfigStem(config_path);
  const std::string fallback_label =
      base.String("experiment.name").empty() ? stem : base.String("experiment.name");
  const std::string given_out = vm.count("out") ? vm["out"].as<std::string>() : "";
  const std::string default_out = "results/sweeps/" + WallTimeCompact() + "-" + stem;
  // The folder's name is settled before validation so that every child's overrides are
  // validated exactly as they will be passed; it is created only after.
  std::string planned = given_out.empty() ? default_out : given_out;
  if (!collect_dir.empty()) planned = collect_dir;
  if (slurm) planned = fs::absolute(planned).lexically_normal().string();

  const auto points = GridPoints(axes);
  std::vector<std::string> labels;
  std::vector<BatchRun> runs;
  for (const auto& point : points) {
    labels.push_back(PointLabel(axes, point, fallback_label));
    for (int i = 0; i < seeds; ++i) {
      BatchRun r;
      r.label = labels.back();
      r.name = SanitizeLabel(r.label);
      r.config_path = config_path;
      r.seed = base_seed + i;
      r.overrides = sets;
      for (std::size_t a = 0; a < axes.size(); ++a) {
        r.overrides.push_back(axes[a].key + "=" + axes[a].values[point[a]]);
      }
      runs.push_back(std::move(r));
    }
  }
  auto add_fixed = [&](const std::string& dir) {
    for (auto& r : runs) {
      r.overrides.resize(sets.size() + axes.size());
      r.overrides.push_back("experiment.seed=" + std::to_string(r.seed));
      r.overrides.push_back("experiment.out_dir=" + JoinPath(dir, "runs"));
      r.overrides.push_back("experiment.name=" + r.label);
      r.overrides.push_back("experiment.progress=off");
    }
  };
  add_fixed(planned);
  for (const auto& r : runs) LoadRunConfig(config_path, r.overrides);
  AssignLogs(runs, planned);  // checks the names; paths redone below
  if (vm.count("dry-run")) {
    PrintDryRun(runs, planned, out);
    return kExitOk;
  }
  if (!collect_dir.empty()) {
    if (!IsDirectory(collect_dir)) throw InputError("asgd sweep collect: no folder " + collect_dir);
    const BatchOutcome outcome = CollectSlurm(runs, collect_dir, "sweep", out);
    WriteSweepTables(collect_dir, config_path, axes, points, labels, runs, seeds, out);
    const std::string plot_error = CompareBatch(runs, collect_dir, !vm.count("no-plots"), out);
    return BatchResult(outcome, runs.size(), plot_error, collect_dir, "sweep", out);
  }
  if (slurm && !backend.emit_only && FindOnPath("sbatch").empty()) {
    throw InputError(
        "asgd sweep: --backend slurm: sbatch not found on PATH (--emit-only writes "
        "the script without submitting)");
  }

  std::string dir = MakeBatchDir(given_out, default_out, "sweep");
  if (slurm) dir = fs::absolute(dir).lexically_normal().string();
  add_fixed(dir);
  AssignLogs(runs, dir);
  if (slurm) {
    std::vector<std::string> replan = {config_path, "--seeds", std::to_string(seeds)};
    for (const auto& g : vm.count("grid") ? vm["grid"].as<std::vector<std::string>>()
                                          : std::vector<std::string>()) {
      replan.insert(replan.end(), {"--grid", g});
    }
    for (const auto& st : sets) replan.insert(replan.end(), {"--set", st});
    if (vm.count("no-plots")) replan.emplace_back("--no-plots");
    const std::string script = WriteSlurmFiles(
        runs, dir, replan, vm.count("parallel") ? std::optional<int>(parallel) : std::nullopt,
        backend, "asgd-sweep-" + SanitizeLabel(stem));
    out << "sweep: " << runs.size() << " runs (" << points.size() << " grid points x " << seeds
        << (seeds == 1 ? " seed" : " seeds") << ") as a SLURM job array into " << dir << "\n"
        << "wrote " << script << "\n";
    if (!backend.emit_only) SubmitSlurm(dir, script, "sweep", out);
    return kExitOk;
  }
  out << "sweep: " << runs.size() << " runs (" << points.size() << " grid points x " << seeds
      << (seeds == 1 ? " seed" : " seeds") << "), "
      << (gpus.empty() ? parallel : std::min<int>(parallel, static_cast<int>(gpus.size())))
      << " at a time" << (gpus.empty() ? "" : " (one per GPU of --gpus)") << ", into " << dir
      << "\n";
  out.flush();
  const std::string runs_dir = JoinPath(dir, "runs");
  const BatchOutcome outcome =
      RunBatch(runs, SelfExecutable(), parallel, runs_dir, "sweep", out, gpus);
  if (outcome.signal != 0) return 128 + outcome.signal;
  WriteSweepTables(dir, config_path, axes, points, labels, runs, seeds, out);
  const std::string plot_error = CompareBatch(runs, dir, !vm.count("no-plots"), out);
  return BatchResult(outcome, runs.size(), plot_error, dir, "sweep", out);
}

int SuiteCommand(const std::vector<std::string>& given_args, std::ostream& out) {
  std::string collect_dir;
  std::vector<std::string> args = given_args;
  if (!args.empty() && args[0] == "collect") {
    if (args.size() < 2 || args.size() > 3 || (args.size() == 3 && args[2] != "--no-plots")) {
      throw InputError("usage: asgd suite collect DIR [--no-plots]");
    }
    collect_dir = fs::absolute(args[1]).lexically_normal().string();
    const bool no_plots = args.size() == 3;
    args = ReadReplanArgs(collect_dir, "suite");
    if (no_plots) args.emplace_back("--no-plots");
  }
  po::options_description desc("Options");
  desc.add_options()("help,h", "describe this command")("parallel", po::value<int>(),
                                                        "runs at a time (default 1)")(
      "out", po::value<std::string>(),
      "the suite folder (default: [suite] out_dir, else results/suites/<name>-<UTC time>)")(
      "set", po::value<std::vector<std::string>>()->composing(),
      "override one key for every run: --set section.key=value (repeatable; applied after "
      "the run's own set)")("no-plots", "compare without drawing the PNGs")(
      "dry-run", "validate and list the runs without starting them")(
      "file", po::value<std::string>(), "the suite file (INI)");
  AddBackendOptions(desc);
  po::positional_options_description pos;
  pos.add("file", 1);
  auto vm = ParseCommandLine(args, desc, pos, "suite");
  const std::string usage =
      "usage: asgd suite FILE [--parallel P] [--out DIR] [--set section.key=value ...]\n\n"
      "FILE is an INI file: [suite] with name (and optionally out_dir), then one\n"
      "[run LABEL] section per run with config = PATH (relative to FILE's folder) and\n"
      "optionally set = section.key=value; section.key=value. Runs each as an `asgd run`\n"
      "child, P at a time, then compares them into the suite folder (comparison.csv,\n"
      "comparison.md, plots). Logs: DIR/logs/. Exit 2 if a run failed; SIGINT/SIGTERM\n"
      "end every run by PID (exit 128 + the signal).\n\n"
      "With --backend slurm the runs become one SLURM job array instead (DIR/slurm/\n"
      "array.sbatch, submitted with sbatch); `asgd suite collect DIR` compares them after.";
  if (vm.count("help")) {
    out << usage << "\n" << desc;
    return kExitOk;
  }
  if (!vm.count("file")) throw InputError("asgd suite: missing FILE (see `asgd suite --help`)");
  const SlurmOptions backend = ReadBackendOptions(vm, "suite");
  const bool slurm = backend.backend == "slurm";
  const std::vector<int> gpus = ReadGpus(
      vm, vm.count("set") ? vm["set"].as<std::vector<std::string>>() : std::vector<std::string>(),
      "suite", backend);
  const std::string path =
      slurm ? fs::absolute(vm["file"].as<std::string>()).string() : vm["file"].as<std::string>();
  const int parallel = PositiveOption(vm, "parallel", 1);
  std::vector<std::string> sets;
  if (vm.count("set")) sets = vm["set"].as<std::vector<std::string>>();
  ValidateSets(sets, "suite");
  if (!FileExists(path)) throw InputError(path + ": no such suite file");

  const std::vector<IniSection> sections = ParseSuiteFile(path);
  const std::string base_dir = fs::path(path).parent_path().string();
  std::string name, file_out;
  std::vector<std::string> suite_sets;  // [suite] set: for every run, before its own
  bool have_suite = false;
  std::vector<BatchRun> runs;
  for (const auto& s : sections) {
    const std::string where = path + ":" + std::to_string(s.line);
    if (s.name == "suite") {
      if (have_suite) throw InputError(where + ": [suite] is given twice");
      have_suite = true;
      CheckKeys(path, s, {"name", "out_dir", "set"});
      if (const IniEntry* e = FindEntry(s, "name")) name = e->value;
      if (const IniEntry* e = FindEntry(s, "out_dir")) file_out = e->value;
      if (const IniEntry* e = FindEntry(s, "set")) suite_sets = SplitSets(e->value);
      if (name.empty()) throw InputError(path + ": [suite] name: missing (expected name = LABEL)");
      continue;
    }
    if (!StartsWith(s.name, "run ") || Trim(s.name.substr(4)).empty()) {
      throw InputError(where + ": [" + s.name +
                       "]: unknown section (expected [suite] or "
                       "[run LABEL])");
    }
    BatchRun r;
    r.label = std::string(Trim(s.name.substr(4)));
    for (const auto& other : runs) {
      if (other.label == r.label)
        throw InputError(where + ": [run " + r.label + "] is given twice");
    }
    CheckKeys(path, s, {"config", "set"});
    const std::string section = path + ": [run " + r.label + "]";
    const IniEntry* config = FindEntry(s, "config");
    if (config == nullptr || config->value.empty()) {
      throw InputError(section +
                       " config: missing (expected config = PATH of an experiment config)");
    }
    r.config_path = fs::path(config->value).is_absolute() || base_dir.empty()
                        ? config->value
                        : (fs::path(base_dir) / config->value).string();
    if (!FileExists(r.config_path)) {
      throw InputError(section + " config: no such file " + QuoteForMessage(r.config_path, 200));
    }
    if (const IniEntry* set = FindEntry(s, "set")) r.overrides = SplitSets(set->value);
    r.name = SanitizeLabel(r.label);
    runs.push_back(std::move(r));
  }
  if (!have_suite)
    throw InputError(path + ": no [suite] section (expected [suite] with name = LABEL)");
  if (runs.empty()) throw InputError(path + ": no [run LABEL] sections");
  for (auto& r : runs)
    r.overrides.insert(r.overrides.begin(), suite_sets.begin(), suite_sets.end());

  const std::string given_out = vm.count("out") ? vm["out"].as<std::string>() : file_out;
  const std::string default_out = "results/suites/" + SanitizeLabel(name) + "-" + WallTimeCompact();
  std::string planned = given_out.empty() ? default_out : given_out;
  if (!collect_dir.empty()) planned = collect_dir;
  if (slurm) planned = fs::absolute(planned).lexically_normal().string();
  std::vector<std::size_t> own_sets;  // how many overrides are the run's own set
  for (const auto& r : runs) own_sets.push_back(r.overrides.size());
  auto add_fixed = [&](const std::string& dir) {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      BatchRun& r = runs[i];
      r.overrides.resize(own_sets[i]);
      r.overrides.insert(r.overrides.end(), sets.begin(), sets.end());
      r.overrides.push_back("experiment.out_dir=" + JoinPath(dir, "runs"));
      r.overrides.push_back("experiment.name=" + r.label);
      r.overrides.push_back("experiment.progress=off");
    }
  };
  for (std::size_t i = 0; i < runs.size(); ++i) {
    for (std::size_t j = 0; j < own_sets[i]; ++j) {
      const std::string key = KeyOf(runs[i].overrides[j]);
      if (IsBatchKey(key)) {
        throw InputError(path + ": [run " + runs[i].label + "] set: " + key +
                         ": set by asgd suite for every run");
      }
    }
  }
  add_fixed(planned);
  for (auto& r : runs) {
    try {
      const Config c = LoadRunConfig(r.config_path, r.overrides);
      r.seed = c.Int("experiment.seed");
    } catch (const ConfigError& e) {
      throw InputError(path + ": [run " + r.label + "] " + e.what());
    }
  }
  AssignLogs(runs, planned);
  if (vm.count("dry-run")) {
    PrintDryRun(runs, planned, out);
    return kExitOk;
  }
  if (!collect_dir.empty()) {
    if (!IsDirectory(collect_dir)) throw InputError("asgd suite collect: no folder " + collect_dir);
    const BatchOutcome outcome = CollectSlurm(runs, collect_dir, "suite", out);
    const std::string plot_error = CompareBatch(runs, collect_dir, !vm.count("no-plots"), out);
    return BatchResult(outcome, runs.size(), plot_error, collect_dir, "suite", out);
  }
  if (slurm && !backend.emit_only && FindOnPath("sbatch").empty()) {
    throw InputError(
        "asgd suite: --backend slurm: sbatch not found on PATH (--emit-only writes "
        "the script without submitting)");
  }

  std::string dir = MakeBatchDir(given_out, default_out, "suite");
  if (slurm) dir = fs::absolute(dir).lexically_normal().string();
  add_fixed(dir);
  AssignLogs(runs, dir);
  WriteFileAtomic(JoinPath(dir, "suite.ini"), ReadFile(path));
  if (slurm) {
    std::vector<std::string> replan = {path};
    for (const auto& st : sets) replan.insert(replan.end(), {"--set", st});
    if (vm.count("no-plots")) replan.emplace_back("--no-plots");
    const std::string script = WriteSlurmFiles(
        runs, dir, replan, vm.count("parallel") ? std::optional<int>(parallel) : std::nullopt,
        backend, "asgd-suite-" + SanitizeLabel(name));
    out << "suite " << name << ": " << runs.size() << " runs as a SLURM job array into " << dir
        << "\n"
        << "wrote " << script << "\n";
    if (!backend.emit_only) SubmitSlurm(dir, script, "suite", out);
    return kExitOk;
  }
  out << "suite " << name << ": " << runs.size() << " runs, "
      << (gpus.empty() ? parallel : std::min<int>(parallel, static_cast<int>(gpus.size())))
      << " at a time" << (gpus.empty() ? "" : " (one per GPU of --gpus)") << ", into " << dir
      << "\n";
  out.flush();
  const std::string runs_dir = JoinPath(dir, "runs");
  const BatchOutcome outcome =
      RunBatch(runs, SelfExecutable(), parallel, runs_dir, "suite", out, gpus);
  if (outcome.signal != 0) return 128 + outcome.signal;
  const std::string plot_error = CompareBatch(runs, dir, !vm.count("no-plots"), out);
  return BatchResult(outcome, runs.size(), plot_error, dir, "suite", out);
}

}  // namespace asgd::experiments
