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
#include "experiments/analysis/compare.h"
#include "experiments/batch/batch_internal.h"
#include "experiments/config/cluster_plan.h"
#include "experiments/config/command_line.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/exit_status.h"
#include "experiments/config/setup.h"
#include "experiments/config/signals.h"
#include "experiments/record/csv.h"
#include "experiments/record/run_dir.h"
#include "models/device.h"

namespace asgd::experiments::batch {
namespace po = boost::program_options;
namespace fs = std::filesystem;
namespace {

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

// The folder of one job array's files: slurm/, or a tune's extension arrays' slurm-edge<k>/.
std::string SlurmDir(const std::string& dir, const std::string& sub = kSlurmFolder) {
  return JoinPath(dir, sub);
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

// "asgd-sweep-mnist" -> "sweep": the command whose `collect` gathers the array.
std::string CommandOfJob(const std::string& job_name) {
  const std::string prefix = "asgd-";
  if (!StartsWith(job_name, prefix)) return "sweep";
  const std::size_t dash = job_name.find('-', prefix.size());
  return job_name.substr(prefix.size(),
                         dash == std::string::npos ? std::string::npos : dash - prefix.size());
}

}  // namespace

// ---- SLURM backend ---------------------------------------------------------------
//
// The batch folder gets slurm/: tasks.txt (line i + 1 is array task i's shell command,
// run folder and log included), array.sbatch (the job-array script, which reads its line
// of tasks.txt, runs it and writes status/<i>), args (what `collect` replans from) and,
// once submitted, job_id. Nothing is recomputed on the cluster: every task's command is
// written here, after the same validation as a local batch.

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
      "srun",
      "--backend slurm: run each run as processes, one SLURM task per role (coordinator, "
      "cluster.shards shards, algorithm.workers workers) started by `srun asgd task`")(
      "sbatch", po::value<std::vector<std::string>>()->composing(),
      "--backend slurm: one more sbatch option, passed as it is (repeatable), e.g. "
      "--sbatch=--account=abc")(
      "launch",
      "local backend: run each run as processes with `asgd launch` (coordinator, shards, "
      "workers and evaluator on this machine over cluster.launch_transport) instead of "
      "threads in one `asgd run`");
}

SlurmOptions ReadBackendOptions(const po::variables_map& vm, const std::string& command) {
  SlurmOptions o;
  if (vm.count("backend")) o.backend = vm["backend"].as<std::string>();
  if (o.backend != "local" && o.backend != "slurm") {
    throw InputError("asgd " + command + ": --backend " + QuoteForMessage(o.backend) +
                     ": unknown backend (expected local or slurm)");
  }
  const bool slurm = o.backend == "slurm";
  for (const char* name : {"emit-only", "partition", "time", "gpus-per-task", "sbatch", "srun"}) {
    if (vm.count(name) && !slurm) {
      throw InputError("asgd " + command + ": --" + name + " needs --backend slurm");
    }
  }
  if (vm.count("launch") && slurm) {
    throw InputError("asgd " + command +
                     ": --launch is the local backend's; with --backend slurm use --srun");
  }
  o.launch = vm.count("launch") > 0;
  o.emit_only = vm.count("emit-only") > 0;
  o.srun = vm.count("srun") > 0;
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

void RequireSbatch(const SlurmOptions& backend, const std::string& command) {
  if (backend.backend == "slurm" && !backend.emit_only && FindOnPath("sbatch").empty()) {
    throw InputError("asgd " + command +
                     ": --backend slurm: sbatch not found on PATH (--emit-only writes "
                     "the script without submitting)");
  }
}

std::vector<std::string> BackendReplanArgs(const po::variables_map& vm) {
  std::vector<std::string> args;
  for (const char* name : {"partition", "time"}) {
    if (vm.count(name))
      args.insert(args.end(), {std::string("--") + name, vm[name].as<std::string>()});
  }
  for (const char* name : {"gpus-per-task", "parallel"}) {
    if (vm.count(name)) {
      args.insert(args.end(), {std::string("--") + name, std::to_string(vm[name].as<int>())});
    }
  }
  if (vm.count("sbatch")) {
    for (const auto& a : vm["sbatch"].as<std::vector<std::string>>())
      args.push_back("--sbatch=" + a);
  }
  for (const char* flag : {"srun", "emit-only"}) {
    if (vm.count(flag)) args.push_back(std::string("--") + flag);
  }
  return args;
}

std::string StartBatchDir(std::vector<BatchRun>& runs, const std::string& given,
                          const std::string& fallback, const std::string& command,
                          const SlurmOptions& backend,
                          const std::function<void(const std::string& dir)>& fix_runs) {
  const bool slurm = backend.backend == "slurm";
  RequireSbatch(backend, command);
  std::string dir = MakeBatchDir(given, fallback, command);
  if (slurm) dir = fs::absolute(dir).lexically_normal().string();
  fix_runs(dir);
  if (backend.srun) PlanSrunRuns(runs);
  AssignLogs(runs, dir);
  return dir;
}

// sgd and hogwild run in one process only.
void RefuseOneProcessStrategy(const Config& c, const std::string& option) {
  const std::string name = c.String("algorithm.name");
  const algorithms::Strategy& s = algorithms::FindStrategy(name);
  if (s.family == algorithms::Family::kSequential || s.shared_memory) {
    throw ConfigError("algorithm.name", name,
                      "a strategy over the parameter server for " + option +
                          " (sgd and hogwild run in one process: leave " + option + " out)");
  }
}

void PlanLaunchRuns(std::vector<BatchRun>& runs) {
  for (auto& r : runs) {
    RefuseOneProcessStrategy(LoadRunConfig(r.config_path, r.overrides), "--launch");
    r.launch = true;
  }
}

void PlanSrunRuns(std::vector<BatchRun>& runs) {
  int most = 0;
  std::vector<int64_t> base_ports;
  for (auto& r : runs) {
    const Config c = LoadRunConfig(r.config_path, r.overrides);
    RefuseOneProcessStrategy(c, "--srun");
    const ClusterPlan cluster = ClusterPlan::FromConfig(c);
    r.tasks = static_cast<int>(1 + cluster.shards + c.Int("algorithm.workers"));
    most = std::max(most, r.tasks);
    base_ports.push_back(cluster.base_port);
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const int64_t port = base_ports[i] + static_cast<int64_t>(i) * most;
    if (port + most - 1 > 65535) {
      throw ConfigError(ClusterPlan::kBasePortKey, std::to_string(base_ports[i]),
                        internal::StrCat("a port that leaves ", runs.size(), " runs x ", most,
                                         " tasks room below 65536"));
    }
    runs[i].overrides.push_back(std::string(ClusterPlan::kBasePortKey) + "=" +
                                std::to_string(port));
  }
}

// Writes slurm/ (see above) for runs; returns the script's path.
std::string WriteSlurmFiles(const std::vector<BatchRun>& runs, const std::string& dir,
                            const std::vector<std::string>& replan_args,
                            const std::optional<int>& parallel, const SlurmOptions& options,
                            const std::string& job_name, const std::string& sub) {
  const std::string slurm = SlurmDir(dir, sub);
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
    << "# (an `asgd run`, or with --srun an `srun asgd task` run, into " << JoinPath(dir, "runs")
    << ")\n# and writes its exit status"
    << " to status/i. Gather the results with `asgd " << CommandOfJob(job_name) << " collect "
    << dir << "`.\n"
    << "#SBATCH --job-name=" << job_name << "\n"
    << "#SBATCH --array=0-" << runs.size() - 1;
  if (parallel) s << "%" << *parallel;
  int ntasks = 1;
  for (const auto& r : runs) ntasks = std::max(ntasks, r.tasks);
  s << "\n#SBATCH --ntasks=" << ntasks << "\n"
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
                        const std::string& command, std::ostream& out, const std::string& sub) {
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
  WriteFileAtomic(JoinPath(SlurmDir(dir, sub), "job_id"), job + "\n");
  out << "submitted job " << job << " (" << CommandLine({script}) << ")\n"
      << "collect with: asgd " << command << " collect " << dir << "\n";
  out.flush();
  return job;
}

// `collect`: how every run of a submitted batch ended, from slurm/status/ and the run
// folders, with SLURM's word on the tasks that left no status. One line per run.
BatchOutcome CollectSlurm(std::vector<BatchRun>& runs, const std::string& dir,
                          const std::string& command, std::ostream& out, const std::string& sub) {
  const std::string slurm = SlurmDir(dir, sub);
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
  outcome.waiting = waiting;
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

std::vector<std::string> ReplanIfCollect(const std::vector<std::string>& given,
                                         const std::string& command, std::string* collect_dir) {
  if (given.empty() || given[0] != "collect") return given;
  if (given.size() < 2 || given.size() > 3 || (given.size() == 3 && given[2] != "--no-plots")) {
    throw InputError("usage: asgd " + command + " collect DIR [--no-plots]");
  }
  *collect_dir = fs::absolute(given[1]).lexically_normal().string();
  std::vector<std::string> args = ReadReplanArgs(*collect_dir, command);
  // A batch submitted with --no-plots has it in its args already (given twice, the
  // option parser would refuse it).
  if (given.size() == 3 && std::find(args.begin(), args.end(), "--no-plots") == args.end()) {
    args.emplace_back("--no-plots");
  }
  // The batch was planned for SLURM (its --srun, if any, is in the replanned options).
  args.insert(args.end(), {"--backend", "slurm"});
  return args;
}

}  // namespace asgd::experiments::batch
