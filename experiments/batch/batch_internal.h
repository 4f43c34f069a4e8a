// Inside `asgd sweep` and `asgd suite` (batch.h describes the commands): the commands
// themselves (batch_sweep.cc, batch_suite.cc) and what they share: running the children
// (batch_runs.cc) and the SLURM backend (batch_slurm.cc). Internal to the batch*.cc files.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "experiments/config/config.h"

namespace asgd::experiments::batch {

// How long a child gets between SIGTERM and SIGKILL.
inline constexpr auto kGrace = std::chrono::milliseconds(2000);

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
  // > 0 (--srun): a distributed run of this many SLURM tasks, one per role (`srun asgd
  // task`); 0: one `asgd run` process.
  int tasks = 0;
};

struct BatchOutcome {
  int signal = 0;  // the stop signal that ended the batch, or 0
  int failed = 0;
};

// The commands (batch.h's SweepCommand and SuiteCommand), in batch_sweep.cc and
// batch_suite.cc.
int Sweep(const std::vector<std::string>& args, std::ostream& out);
int Suite(const std::vector<std::string>& args, std::ostream& out);

// ---- Running children (batch_runs.cc) ----------------------------------------------

// Keys a sweep or suite sets for every child itself (experiment.name, out_dir, progress).
bool IsBatchKey(const std::string& key);
// dir/name, with one slash.
std::string JoinPath(const std::string& dir, const std::string& name);
// The child's argv: program run CONFIG --set ... .
std::vector<std::string> ChildArgv(const std::string& program, const BatchRun& run);
// argv as a shell would take it back: arguments with blanks or quotes in single quotes.
std::string CommandLine(const std::vector<std::string>& argv);
// Records how a run ended and prints its one line.
void Finish(BatchRun& run, int status, double seconds, const std::string& runs_dir,
            std::size_t done, std::size_t total, std::ostream& out);
// Runs every run as a child of program, at most parallel at a time.
// With gpus, at most one run per listed CUDA device at a time: a run starts on the
// lowest-numbered free one, with model.device = cuda:N added to its overrides.
BatchOutcome RunBatch(std::vector<BatchRun>& runs, const std::string& program, int parallel,
                      const std::string& runs_dir, const std::string& what, std::ostream& out,
                      const std::vector<int>& gpus = {});
// "section.key" of a "section.key=value" assignment.
std::string KeyOf(const std::string& assignment);
// Checks --set assignments against the schema (one line naming the bad one) and that
// none sets a key the batch sets itself.
void ValidateSets(const std::vector<std::string>& sets, const std::string& command);
// An integer option that must be >= 1 (ConfigError naming it otherwise), or fallback.
int PositiveOption(const boost::program_options::variables_map& vm, const std::string& name,
                   int fallback);
// A fresh output folder: out if given (it must not hold anything yet), else fallback,
// made unique with "-2", "-3", ... Creates it with runs/ and logs/.
std::string MakeBatchDir(const std::string& given, const std::string& fallback,
                         const std::string& command);
// Loads a run's config as the child will, with the checks that involve several keys
// (e.g. replicas_to_aggregate <= workers) that `asgd run` would make. Throws ConfigError.
Config LoadRunConfig(const std::string& path, const std::vector<std::string>& overrides);
// Fills in each run's log path; two runs whose labels give one file name are an error.
void AssignLogs(std::vector<BatchRun>& runs, const std::string& dir);
// --dry-run: the runs as they would start, one line each.
void PrintDryRun(const std::vector<BatchRun>& runs, const std::string& dir, std::ostream& out);
// Compares the runs that left a summary into dir. A plotting failure is returned (the
// tables are written first), so that a failed run can be reported instead.
std::string CompareBatch(const std::vector<BatchRun>& runs, const std::string& dir, bool plots,
                         std::ostream& out);
// Exit: a failed run, else a plotting problem, else 0.
int BatchResult(const BatchOutcome& outcome, std::size_t total, const std::string& plot_error,
                const std::string& dir, const std::string& command, std::ostream& out);

// ---- SLURM backend (batch_slurm.cc) -------------------------------------------------

struct SlurmOptions {
  std::string backend = "local";
  bool emit_only = false;
  std::string partition, time;
  int gpus_per_task = 0;
  std::vector<std::string> sbatch_args;  // passed as they are, after the options above
  bool srun = false;  // each run as processes: `srun asgd task`, one SLURM task per role
};

// --gpus, --backend and the sbatch options, for both commands' option lists.
void AddBackendOptions(boost::program_options::options_description& desc);
// Reads them; InputError (one line) for an unknown backend or options that do not fit it.
SlurmOptions ReadBackendOptions(const boost::program_options::variables_map& vm,
                                const std::string& command);
// --gpus: distinct CUDA ordinals that exist here (ASGD_FAKE_CUDA_DEVICES=N pretends N
// exist, for checking the placement on a machine without GPUs); none for the others.
std::vector<int> ReadGpus(const boost::program_options::variables_map& vm,
                          const std::vector<std::string>& sets, const std::string& command,
                          const SlurmOptions& backend);
// The path of program on PATH, or "".
std::string FindOnPath(const std::string& program);
// --srun: makes each run a distributed run of 1 + cluster.shards + algorithm.workers SLURM
// tasks (coordinator, shards, workers: `asgd task`'s rank order) and gives run i the
// ports cluster.base_port + i × (the most tasks of any run), so array tasks that share a
// node do not collide. Call after the runs' overrides are final. ConfigError (one line)
// for a strategy that cannot run as processes or ports past 65535.
void PlanSrunRuns(std::vector<BatchRun>& runs);
// The batch's fresh output folder (MakeBatchDir), once sbatch is known to be on PATH when
// it will be called (InputError, one line, otherwise); absolute with the SLURM backend,
// whose array tasks start elsewhere. Then the runs are fixed to it: fix_runs(dir) (the
// command's own per-run overrides), the srun plan (--srun) and the log paths.
std::string StartBatchDir(std::vector<BatchRun>& runs, const std::string& given,
                          const std::string& fallback, const std::string& command,
                          const SlurmOptions& backend,
                          const std::function<void(const std::string& dir)>& fix_runs);
// Writes slurm/ (tasks.txt, array.sbatch, args) for runs; returns the script's path.
std::string WriteSlurmFiles(const std::vector<BatchRun>& runs, const std::string& dir,
                            const std::vector<std::string>& replan_args,
                            const std::optional<int>& parallel, const SlurmOptions& options,
                            const std::string& job_name);
// Submits the script; prints and returns the job id. Throws InputError with sbatch's
// first error line when it refuses.
std::string SubmitSlurm(const std::string& dir, const std::string& script,
                        const std::string& command, std::ostream& out);
// `collect`: how every run of a submitted batch ended, from slurm/status/ and the run
// folders, with SLURM's word on the tasks that left no status. One line per run.
BatchOutcome CollectSlurm(std::vector<BatchRun>& runs, const std::string& dir,
                          const std::string& command, std::ostream& out);
// The options `collect` replans a batch from, read from slurm/args.
std::vector<std::string> ReadReplanArgs(const std::string& dir, const std::string& command);
// args as given, or for `collect DIR [--no-plots]` the replanned ones (with --no-plots
// kept) and *collect_dir set to DIR's absolute path. InputError on a bad collect line.
std::vector<std::string> ReplanIfCollect(const std::vector<std::string>& args,
                                         const std::string& command, std::string* collect_dir);

}  // namespace asgd::experiments::batch
