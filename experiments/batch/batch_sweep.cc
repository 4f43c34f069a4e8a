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
#include "experiments/analysis/seed_stats.h"
#include "experiments/batch/batch.h"
#include "experiments/batch/batch_internal.h"
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

// ---- Sweep -----------------------------------------------------------------------

// A metric's value rounded for sweep.md.
std::string MetricText(const std::string& metric, double v) {
  if (metric.find("accuracy") != std::string::npos) return MarkdownNumber(v, 4);
  if (metric == "samples_per_s") return MarkdownNumber(v, 0);
  if (metric == "staleness_mean") return MarkdownNumber(v, 2);
  return MarkdownSeconds(v);
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

// A grid point's runs: how many completed and failed, and each metric's values over the
// completed ones.
struct PointRuns {
  int64_t completed = 0, failed = 0;
  std::vector<std::vector<double>> values;  // per SweepMetrics() entry
};

std::vector<PointRuns> CollectPointRuns(const std::vector<std::string>& labels,
                                        const std::vector<BatchRun>& runs) {
  std::vector<PointRuns> points(labels.size());
  for (std::size_t p = 0; p < labels.size(); ++p) {
    points[p].values.resize(SweepMetrics().size());
    for (const auto& r : runs) {
      if (r.label != labels[p]) continue;
      if (!r.ok) {
        ++points[p].failed;
        continue;
      }
      ++points[p].completed;
      const RunSummary s = ReadRunSummary(r.run_dir);
      for (std::size_t m = 0; m < SweepMetrics().size(); ++m) {
        points[p].values[m].push_back(s.Number(SweepMetrics()[m]));
      }
    }
  }
  return points;
}

// mean ± the 95 % half-width; "(k of n)" when k of the n completed runs have a value; †
// when the interval overlaps the best point's.
std::string SweepCell(const std::string& metric, const MeanInterval& m, int64_t completed,
                      bool not_separated) {
  if (m.n == 0) return "—";
  std::string cell = MetricText(metric, m.mean);
  if (m.HasInterval()) cell += " ± " + MetricText(metric, m.half_width);
  if (m.n < completed)
    cell += " (" + std::to_string(m.n) + " of " + std::to_string(completed) + ")";
  return not_separated ? cell + " †" : cell;
}

// Writes sweep.csv and sweep.md.
void WriteSweepTables(const std::string& dir, const std::string& config_path,
                      const std::vector<GridAxis>& axes,
                      const std::vector<std::vector<std::size_t>>& points,
                      const std::vector<std::string>& labels, const std::vector<BatchRun>& runs,
                      int seeds, std::ostream& out) {
  const std::vector<std::string>& metrics = SweepMetrics();
  std::vector<std::string> columns = {"label"};
  for (const auto& a : axes) columns.push_back(a.key);
  columns.insert(columns.end(), {"runs", "failed"});
  for (const auto& m : metrics) {
    for (const char* s : {"_mean", "_std", "_ci95", "_min", "_max"}) columns.push_back(m + s);
  }
  const std::vector<PointRuns> values = CollectPointRuns(labels, runs);
  // intervals[m][p], and the best point on each metric by its mean (-1: none has a value).
  std::vector<std::vector<MeanInterval>> intervals(metrics.size());
  std::vector<std::ptrdiff_t> best;
  for (std::size_t m = 0; m < metrics.size(); ++m) {
    for (const auto& v : values) intervals[m].push_back(Interval95(v.values[m]));
    best.push_back(BestRow(intervals[m], HigherIsBetter(metrics[m])));
  }
  std::ostringstream csv, md;
  CsvWriter writer(csv, columns);
  md << "# Sweep of " << config_path << "\n\n";
  std::vector<std::string> grid_text;
  for (const auto& a : axes) grid_text.push_back(a.key + " in {" + Join(a.values, ", ") + "}");
  md << "Grid: " << (grid_text.empty() ? "none" : Join(grid_text, "; ")) << "; " << seeds
     << (seeds == 1 ? " seed" : " seeds") << " per point.\n\n"
     << "Cells are the mean over the point's completed runs (runs: how many) ± the half-width\n"
     << "of its 95 % confidence interval, t(0.975, n − 1) · s / √n (Student's t; one run: no\n"
     << "interval); sweep.csv adds the standard deviation, min and max. — means no value (e.g.\n"
     << "a target never reached; \"(k of n)\": only k runs have one); † marks an interval that\n"
     << "overlaps the best point's, which these seeds do not separate from it (not for\n"
     << "staleness, which is no goal). Accuracies are\n"
     << "fractions of the test set, times seconds of training wall time.\n\n";
  md << "| label | runs | failed |";
  for (const auto& m : metrics) md << " " << MetricHeader(m) << " |";
  md << "\n| --- | ---: | ---: |";
  for (std::size_t i = 0; i < metrics.size(); ++i) md << " ---: |";
  md << "\n";
  for (std::size_t p = 0; p < points.size(); ++p) {
    std::vector<std::string> cells = {CsvCell(labels[p])};
    for (std::size_t a = 0; a < axes.size(); ++a)
      cells.push_back(CsvCell(axes[a].values[points[p][a]]));
    cells.push_back(CsvCell(values[p].completed));
    cells.push_back(CsvCell(values[p].failed));
    md << "| " << MarkdownCell(labels[p]) << " | " << values[p].completed << " | "
       << values[p].failed << " |";
    for (std::size_t m = 0; m < metrics.size(); ++m) {
      const SampleStats s = Describe(values[p].values[m]);
      const MeanInterval& i = intervals[m][p];
      for (double v : {s.mean, s.std, i.half_width, s.min, s.max}) cells.push_back(CsvCell(v));
      // Staleness is a property, not a goal: its cells are not marked (as in comparison.md).
      const bool not_separated = metrics[m] != "staleness_mean" && best[m] >= 0 &&
                                 static_cast<std::size_t>(best[m]) != p &&
                                 NotSeparated(i, intervals[m][static_cast<std::size_t>(best[m])]);
      md << " " << SweepCell(metrics[m], i, values[p].completed, not_separated) << " |";
    }
    md << "\n";
    writer.WriteRow(cells);
  }
  md << "\nBest point on each metric (by its mean over seeds):\n\n";
  for (std::size_t m = 0; m < metrics.size(); ++m) {
    md << "- " << MetricHeader(metrics[m]) << " ("
       << (HigherIsBetter(metrics[m]) ? "highest" : "lowest") << "): ";
    if (best[m] < 0) {
      md << "— (no point has a value)\n";
    } else {
      const auto b = static_cast<std::size_t>(best[m]);
      md << MarkdownCell(labels[b]) << ", " << MetricText(metrics[m], intervals[m][b].mean) << "\n";
    }
  }
  WriteFileAtomic(JoinPath(dir, "sweep.csv"), csv.str());
  out << "wrote " << JoinPath(dir, "sweep.csv") << "\n";
  WriteFileAtomic(JoinPath(dir, "sweep.md"), md.str());
  out << "wrote " << JoinPath(dir, "sweep.md") << "\n";
}

po::options_description SweepOptions() {
  po::options_description desc("Options");
  desc.add_options()("help,h", "describe this command")(
      "grid", po::value<std::vector<std::string>>()->composing(),
      "an axis of the grid: --grid section.key=v1,v2[,...] (repeatable; values holding "
      "commas are separated by ';' instead), or section.key=log:LO:HI:N (N values, equal "
      "ratios) or section.key=lin:LO:HI:N (equal differences)")(
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
  return desc;
}

constexpr const char* kSweepUsage =
    "usage: asgd sweep CONFIG --grid section.key=v1,v2 [--grid ...] [--seeds N]\n"
    "                  [--parallel P] [--set section.key=value ...] [--out DIR]\n\n"
    "Runs CONFIG at every point of the grid (the cartesian product of the --grid axes)\n"
    "with N seeds each, as `asgd run` children, P at a time; then writes\n"
    "DIR/sweep.csv and sweep.md (mean, 95 % interval, std, min, max over seeds per point)\n"
    "and compares the runs (comparison.csv, comparison.md, plots). Logs: DIR/logs/.\n"
    "Exit 2 if a run failed; SIGINT/SIGTERM end every run by PID (exit 128 + the signal).\n\n"
    "With --backend slurm the runs become one SLURM job array instead: the script is\n"
    "written to DIR/slurm/array.sbatch and submitted with sbatch (the job id is printed);\n"
    "`asgd sweep collect DIR` then writes the tables once the tasks have ended.";

}  // namespace

int Sweep(const std::vector<std::string>& given_args, std::ostream& out) {
  // `collect DIR` replans the batch from what the submission wrote, then gathers.
  std::string collect_dir;
  const std::vector<std::string> args = ReplanIfCollect(given_args, "sweep", &collect_dir);
  const po::options_description desc = SweepOptions();
  po::positional_options_description pos;
  pos.add("config", 1);
  auto vm = ParseCommandLine(args, desc, pos, "sweep");
  if (vm.count("help")) {
    out << kSweepUsage << "\n" << desc;
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
      vm.count("grid") ? vm["grid"].as<std::vector<std::string>>() : std::vector<std::string>(),
      "sweep");
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
    labels.push_back(ValuesLabel(axes, PointValues(axes, point), fallback_label));
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
  if (backend.srun) PlanSrunRuns(runs);
  if (backend.launch) PlanLaunchRuns(runs);
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
  const std::string dir = StartBatchDir(runs, given_out, default_out, "sweep", backend, add_fixed);
  if (slurm) {
    std::vector<std::string> replan = {config_path, "--seeds", std::to_string(seeds)};
    for (const auto& g : vm.count("grid") ? vm["grid"].as<std::vector<std::string>>()
                                          : std::vector<std::string>()) {
      replan.insert(replan.end(), {"--grid", g});
    }
    for (const auto& st : sets) replan.insert(replan.end(), {"--set", st});
    if (vm.count("no-plots")) replan.emplace_back("--no-plots");
    if (backend.srun) replan.emplace_back("--srun");
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

}  // namespace asgd::experiments::batch
