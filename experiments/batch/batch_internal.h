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

#include "experiments/batch/tune_score.h"
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
  // --launch: `asgd launch` (the run as local processes) instead of `asgd run`.
  bool launch = false;
};

struct BatchOutcome {
  int signal = 0;   // the stop signal that ended the batch, or 0
  int failed = 0;   // with collect: failed, missing and not finished
  int waiting = 0;  // collect: tasks still pending or running in SLURM
};

// The commands (batch.h's SweepCommand and SuiteCommand), in batch_sweep.cc and
// batch_suite.cc.
int Sweep(const std::vector<std::string>& args, std::ostream& out);
int Suite(const std::vector<std::string>& args, std::ostream& out);
// `asgd tune` (batch.h's TuneCommand), in batch_tune.cc.
int Tune(const std::vector<std::string>& args, std::ostream& out);

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
// Resuming: the newest folder under runs_dir of this run's name and seed that holds the
// summary of a run that ended by itself (completed or failed, not stopped by SIGINT or
// SIGTERM), or "". Folders of the run that did not end so are moved into moved_to
// (created), so that neither a comparison nor a later resume takes them.
std::string FinishedRunDir(const BatchRun& run, const std::string& runs_dir,
                           const std::string& moved_to);
// Records a run as ended by an earlier invocation, in run_dir, and prints its one line.
void Reuse(BatchRun& run, const std::string& run_dir, std::ostream& out);
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

// ---- The grid (batch_grid.cc) ------------------------------------------------------

// One --grid axis of a sweep or tune.
struct GridAxis {
  std::string key;                  // section.key
  std::string short_key;            // as shown in labels: the key, or section.key if shared
  std::vector<std::string> values;  // as given, or a range's values (tune_score.h)
  Spacing spacing = Spacing::kList;
  double step = 0;       // a range's ratio (log) or difference (lin)
  bool integer = false;  // the key takes integers (the edge rule rounds)
};

// The --grid specs (section.key=v1,v2 | log:LO:HI:N | lin:LO:HI:N) as axes: every key in
// the schema, none twice, none that the batch sets itself (InputError, one line, prefixed
// "asgd COMMAND: "). Values are checked later, with each run's config.
std::vector<GridAxis> ParseGrid(const std::vector<std::string>& specs, const std::string& command);
// The cartesian product: each point is the value index of every axis, the last axis
// varying fastest.
std::vector<std::vector<std::size_t>> GridPoints(const std::vector<GridAxis>& axes);
// A point's value of every axis.
std::vector<std::string> PointValues(const std::vector<GridAxis>& axes,
                                     const std::vector<std::size_t>& point);
// "short_key=value short_key=value" (fallback when there are no axes).
std::string ValuesLabel(const std::vector<GridAxis>& axes, const std::vector<std::string>& values,
                        const std::string& fallback);

// ---- SLURM backend (batch_slurm.cc) -------------------------------------------------

struct SlurmOptions {
  std::string backend = "local";
  bool emit_only = false;
  std::string partition, time;
  int gpus_per_task = 0;
  std::vector<std::string> sbatch_args;  // passed as they are, after the options above
  bool srun = false;    // each run as processes: `srun asgd task`, one SLURM task per role
  bool launch = false;  // local backend: each run as processes, `asgd launch`
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
// --launch: makes each run an `asgd launch` (local processes). ConfigError (one line) for
// a strategy that cannot run as processes (sgd, hogwild).
void PlanLaunchRuns(std::vector<BatchRun>& runs);
// The batch's fresh output folder (MakeBatchDir), once sbatch is known to be on PATH when
// it will be called (InputError, one line, otherwise); absolute with the SLURM backend,
// whose array tasks start elsewhere. Then the runs are fixed to it: fix_runs(dir) (the
// command's own per-run overrides), the srun plan (--srun) and the log paths.
std::string StartBatchDir(std::vector<BatchRun>& runs, const std::string& given,
                          const std::string& fallback, const std::string& command,
                          const SlurmOptions& backend,
                          const std::function<void(const std::string& dir)>& fix_runs);
// The folder under a batch folder that holds its job array's files.
inline constexpr const char* kSlurmFolder = "slurm";
// With the SLURM backend (and not --emit-only): InputError (one line) unless sbatch is on
// PATH.
void RequireSbatch(const SlurmOptions& backend, const std::string& command);
// --partition, --time, --gpus-per-task, --sbatch, --srun, --emit-only and --parallel as
// given: what `collect` needs to write and submit another array as the first was.
std::vector<std::string> BackendReplanArgs(const boost::program_options::variables_map& vm);
// Writes slurm/ (tasks.txt, array.sbatch, args) for runs, or another folder sub of dir
// (a tune's extension arrays); returns the script's path. job_name is
// "asgd-<command>-<name>": the script tells to gather with `asgd <command> collect`.
std::string WriteSlurmFiles(const std::vector<BatchRun>& runs, const std::string& dir,
                            const std::vector<std::string>& replan_args,
                            const std::optional<int>& parallel, const SlurmOptions& options,
                            const std::string& job_name, const std::string& sub = kSlurmFolder);
// Submits the script; prints and returns the job id. Throws InputError with sbatch's
// first error line when it refuses.
std::string SubmitSlurm(const std::string& dir, const std::string& script,
                        const std::string& command, std::ostream& out,
                        const std::string& sub = kSlurmFolder);
// `collect`: how every run of a submitted batch ended, from slurm/status/ and the run
// folders, with SLURM's word on the tasks that left no status. One line per run.
BatchOutcome CollectSlurm(std::vector<BatchRun>& runs, const std::string& dir,
                          const std::string& command, std::ostream& out,
                          const std::string& sub = kSlurmFolder);
// The options `collect` replans a batch from, read from slurm/args.
std::vector<std::string> ReadReplanArgs(const std::string& dir, const std::string& command);
// args as given, or for `collect DIR [--no-plots]` the replanned ones (with --no-plots
// kept) and *collect_dir set to DIR's absolute path. InputError on a bad collect line.
std::vector<std::string> ReplanIfCollect(const std::vector<std::string>& args,
                                         const std::string& command, std::string* collect_dir);

// ---- Tuning (batch_tune.cc, batch_tune_slurm.cc, batch_tune_report.cc) -------------
//
// The protocol of `asgd tune` and of a suite's [tune] section (batch.h describes both).

// One comparison point of a tune: a config and its own overrides.
struct TunePoint {
  std::string label;              // in tables (asgd tune: experiment.name or the config stem)
  std::string config_path;        // absolute with the SLURM backend
  std::vector<std::string> sets;  // before the grid's values (a suite: [suite], [run], --set)
  int64_t base_seed = 0;          // experiment.seed of the point's config
  // The point's own grid: the tune's axes, in their order, with this point's values (a
  // suite's [run] grid = ...); empty: the tune's (TuneSettings::axes).
  std::vector<GridAxis> axes;
};

// What a tune is: its points, grid, metric, seeds and edge rule.
struct TuneSettings {
  std::string command;  // "tune" or "suite": messages, job names, `collect`
  std::string where;    // the prefix of a bad-input line: "asgd tune: " or "FILE: "
  std::vector<TunePoint> points;
  bool prefix_labels = false;  // run labels start with their point's label (a suite)
  std::vector<GridAxis> axes;  // the keys, and every point's values but its own (AxesOf)
  const TuneMetric* metric = nullptr;
  int seeds = 3;   // seeds at the chosen value (SLURM: at every value)
  int extend = 2;  // rounds of the edge rule
  // Lines that identify the tune (plan.txt): a rerun resumes only when they are equal.
  std::vector<std::string> plan;
};

// Point p's grid: its own values, or the tune's.
const std::vector<GridAxis>& AxesOf(const TuneSettings& s, std::size_t p);

// How and where the runs execute.
struct TuneExecution {
  int parallel = 1;
  std::optional<int> given_parallel;  // --parallel as given: the SLURM throttle
  std::vector<int> gpus;
  SlurmOptions backend;
  bool plots = true;
  bool dry_run = false;
  std::string given_out, default_out;
  std::string collect_dir;          // `collect DIR`: DIR, absolute
  std::vector<std::string> replan;  // slurm/args: what `collect` replans from
  std::string job_name;             // asgd-<command>-<name>
};

// One run of a tune.
struct TuneRun {
  std::size_t point = 0;
  std::vector<std::string> values;  // one per axis
  std::string stage;                // "grid", "edge 1", "edge 2", ..., "seeds"
  BatchRun run;
  RunScore score;
  double final_accuracy = 0;  // nan without a record
  bool simulated = false;     // its times are virtual seconds (summary.csv time_model)
  bool Ended() const { return run.exit_status >= 0 || !run.problem.empty(); }
  bool Selects() const { return stage != "seeds"; }  // counts in the choice of a value
};

// A tune in progress.
struct TuneState {
  TuneSettings settings;
  std::string dir;
  bool resuming = false;  // --out held this tune's plan: finished runs are reused
  std::vector<TuneRun> runs;
  std::vector<std::vector<std::string>> notes;  // per point: what the edge rule did
};

// The values tried for a point with their scores, best first (RankScores); a value's
// score is MeanScore over its runs' seeds.
struct ValueScore {
  std::vector<std::string> values;
  std::vector<std::size_t> runs;  // indices into TuneState::runs
  RunScore score;
};

// --parallel, --no-plots, --dry-run and the backend's options (replan: what collect needs
// of them; the command adds its own arguments before).
TuneExecution TuneExecutionOf(const boost::program_options::variables_map& vm,
                              const SlurmOptions& backend, const std::vector<int>& gpus);
// Validates every run of the grid, then runs the protocol as the execution says: locally
// (grid, edge rounds, seeds; resuming in a folder that holds the same plan), as a SLURM
// array, or collecting one. Returns the exit status (batch.h).
int RunTune(const TuneSettings& settings, const TuneExecution& execution, std::ostream& out);

// Pieces of the protocol shared by the local and the SLURM path (batch_tune.cc).
// A run of point p at values with seed base + seed_offset: its label, overrides (the
// point's sets, the values, experiment.seed, out_dir, name, progress) and log path.
TuneRun MakeTuneRun(const TuneState& st, std::size_t point, const std::vector<std::string>& values,
                    int64_t seed_offset, const std::string& stage, const SlurmOptions& backend);
// Loads the run's config as `asgd run` will and checks that its runs record the metric
// (a target for *_to_target, pushes for bytes_to_target). InputError, one line.
void CheckTuneRun(const TuneSettings& s, const TuneRun& r);
// Adds the grid's runs: every point x grid value x seeds offsets 0..seeds-1.
void PlanGrid(TuneState& st, int seeds, const SlurmOptions& backend);
// One round of the edge rule: for each point whose best value lies on an edge of the
// values tried on an axis, the next value beyond it (the other axes at their best),
// seeds offsets 0..seeds-1; prints and notes what it did. Returns the indices added.
std::vector<std::size_t> PlanEdges(TuneState& st, int round, int seeds, const SlurmOptions& backend,
                                   std::ostream& out);
// Scores every ended run from its folder.
void ScoreRuns(TuneState& st);
std::vector<ValueScore> RankedValues(const TuneState& st, std::size_t point);

// The tables and the winner lines (batch_tune_report.cc).
// tune.csv: every ended run.
void WriteTuneCsv(const TuneState& st, std::ostream& out);
// (After tune.csv.) best.csv, tune.md, the winner lines, then the comparison of every run with a
// record (comparison.*, plots). Returns the exit status: 2 when a point has no run with a record or
// the plots failed.
int FinishTune(const TuneState& st, bool plots, std::ostream& out);

// The SLURM path (batch_tune_slurm.cc).
int SubmitTune(TuneState& st, const TuneExecution& ex, std::ostream& out);
int CollectTune(TuneState& st, const TuneExecution& ex, std::ostream& out);

}  // namespace asgd::experiments::batch
