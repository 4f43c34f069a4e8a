// `asgd sweep`, `asgd suite` and `asgd tune`: many runs, each an `asgd run` child process
// (with --launch an `asgd launch`: the run as local processes), then one comparison of
// them (experiments/analysis/compare.h: seeds of one configuration are one row).
//
// Both validate everything they can before starting anything (every grid point's or
// suite entry's config is loaded with its overrides through the schema), so a typo is
// one line and exit status 2, not a failure an hour in. Then they run at most
// `parallel` children at a time, each with its output in <folder>/logs/<label>-s<seed>.log
// and its run folder under <folder>/runs/, print one line per finished run, and compare
// the runs into <folder>. A run that exits non-zero (or leaves no summary.csv) is
// reported and counted; the command then exits 2 after writing what it can.
//
// SIGINT or SIGTERM to the sweep or suite ends every running child by PID (SIGTERM, then
// SIGKILL after 2 s), reaps it and returns 128 + the signal number; the children also
// get SIGTERM from the kernel should this process die (PR_SET_PDEATHSIG).
//
// --gpus 0,1,... (local backend): at most one run per listed CUDA device at a time, each
// started with model.device = cuda:N of a free device; a device that does not exist here
// is one line and exit 2 before anything starts (ASGD_FAKE_CUDA_DEVICES=N pretends N
// exist, to check the placement on a machine without GPUs).
//
// --backend slurm: instead of running, writes <folder>/slurm/ (tasks.txt: line i + 1 is
// array task i's `asgd run` command with its log, or with --srun its `srun --ntasks=N asgd
// task` command, one SLURM task per role, ports apart per run; array.sbatch: the job-array script,
// one task per run, with #SBATCH lines for --partition, --time, --gpus-per-task, --sbatch options
// and the %P throttle from --parallel; args: what collect replans from), submits it with `sbatch
// --parsable` (job id in slurm/job_id, printed) and returns 0;
// --emit-only stops before submitting. sbatch refusing the script, sbatch not on PATH or
// an unknown backend is one line and exit 2. `collect DIR [--no-plots]` replans the batch
// from slurm/args, takes each task's exit status from slurm/status/<i> (written by the
// script), asks squeue, sacct and scontrol about tasks that left none (reported as not
// finished or missing and counted), and writes the tables and comparison as a local
// batch does; exit 2 unless every run completed.
//
// Sweep folder (default results/sweeps/<UTC yyyymmdd-hhmmss>-<config stem>):
//   runs/ logs/ comparison.{csv,md} *.png   as described above
//   sweep.csv    one row per grid point: label, the grid values, runs, failed, and the
//                mean, std (sample standard deviation; nan below two values), ci95 (the
//                half-width of the 95 % interval, Student's t), min and max over the
//                point's completed runs of final_test_accuracy,
//                best_test_accuracy, wall_time_s, time_to_target_s, samples_per_s and
//                staleness_mean (nan values, e.g. a target never reached, are left out)
//   sweep.md     the same as a markdown table (mean ± ci95; † where the interval overlaps
//                the best point's, accuracies, times and samples/s), then the best point on each
//                metric by its mean (highest accuracies and samples/s, lowest times and
//                staleness)
//   sweep_<metric>_vs_<key>.png   (unless --no-plots) final accuracy, time to target,
//                samples/s and mean staleness against each grid key, drawn by
//                experiments/plots/asgd_plots.py
// Suite folder (default results/suites/<name>-<UTC yyyymmdd-hhmmss>):
//   suite.ini (a copy of the suite file), runs/ logs/ comparison.{csv,md} *.png
//   With --seeds N every [run] runs N times, experiment.seed + 0..N-1.
//
// `asgd tune` (with --points section.key=v1,v2 ... every point of their product, and a
// suite with a [tune] section — grid, metric, seeds, target, extend — every [run], is a
// point tuned on its own, all points' runs of a stage in one batch):
//   1. every grid value (--grid lists, log:LO:HI:N, lin:LO:HI:N; their product) runs once
//      with experiment.seed;
//   2. each run is scored (tune_score.h: the metric, the not-reached rule, the ranking);
//   3. edge rule: while the best value is the smallest or largest tried on an axis, the
//      next value beyond it runs (the other axes at their best), at most --extend rounds
//      (default 2), each printed and recorded;
//   4. the best value runs with experiment.seed + 1..N (--seeds, default 3), whose metric
//      and final accuracy give mean, std and the 95 % interval (seed_stats.h).
//   Bad input (no grid, a bad range, an unknown metric, a *_to_target metric with no
//   experiment.target_accuracy, bytes_to_target of a strategy that pushes nothing, any
//   run's config) is one line and exit 2 before any run. Exit 0 once every point has a
//   winner (failed runs are ranked, not errors); 2 if a point has no run with a summary
//   or the plots failed; 128 + the signal when stopped.
// Tune folder (default results/tunes/<UTC yyyymmdd-hhmmss>-<config stem>; a suite's as above):
//   plan.txt     what decides the runs (configs and their SHA-256, sets, grid, metric, seeds,
//                extend, runner): a later `asgd tune` (suite) with --out naming a folder
//                that holds an equal plan resumes it, reusing each run whose folder holds
//                the summary of a run that ended by itself (others move to interrupted/);
//                a different plan is refused (one line, exit 2)
//   tune.csv     every run that ended: point, stage (grid, edge K, seeds), label, the
//                value of each tuned key, seed, outcome (scored, not reached, failed, no
//                record), score, best and final test accuracy, rank (of its value within its
//                point), status, run_dir; rewritten after every stage and when stopped
//   best.csv     one row per point: the chosen values, metric, unit, seeds, n, mean, std,
//                ci95 (half-width), low, high, the same for the final accuracy, seed_list,
//                selection outcome and score, edge_runs, on_edge (axes whose best is still
//                the smallest or largest tried), separation (several points: best, not
//                separated, separated or no interval, against the best point)
//   tune.md      the chosen values per point, then every run ranked
//   tune_<metric>_vs_<key>.png, comparison.{csv,md} and its plots, runs/ logs/
// --backend slurm (tune): one array of every value x seed (experiment.seed + 0..N-1);
// `asgd tune collect DIR` (suite collect for a suite) scores each value by its seeds' mean,
// writes and submits each edge round as slurm-edge<k>/ (its values in slurm-edge<k>/values)
// and exits 2 until the tune is final, then writes the tables from the chosen value's seeds.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace asgd::experiments {

// Mean, sample standard deviation, min and max of the non-nan values; nan where there
// are too few (std: fewer than two).
struct SampleStats {
  int64_t n = 0;
  double mean = 0, std = 0, min = 0, max = 0;
};
SampleStats Describe(const std::vector<double>& values);

// The metrics sweep.csv aggregates, in column order.
const std::vector<std::string>& SweepMetrics();

// `asgd sweep CONFIG --grid section.key=v1,v2 ... [--seeds N] [--parallel P]
// [--set section.key=value ...] [--out DIR] [--gpus LIST | --backend slurm ...]` or
// `asgd sweep collect DIR`: args without the command name.
int SweepCommand(const std::vector<std::string>& args, std::ostream& out);

// `asgd suite FILE [--parallel P] [--out DIR] [--set section.key=value ...] [--gpus LIST |
// --backend slurm ...]` or `asgd suite collect DIR`.
int SuiteCommand(const std::vector<std::string>& args, std::ostream& out);

// `asgd tune CONFIG --grid section.key=SPEC ... --metric M [--target A] [--points ...] [--seeds N]
// [--extend K] [--parallel P] [--set ...] [--out DIR] [--launch | --gpus LIST | --backend
// slurm ...]` or `asgd tune collect DIR`.
int TuneCommand(const std::vector<std::string>& args, std::ostream& out);

}  // namespace asgd::experiments
