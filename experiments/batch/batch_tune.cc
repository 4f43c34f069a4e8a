// `asgd tune` (batch.h): the command, the runs of the protocol and its local path. The
// pure rules are in tune_score.cc, the tables in batch_tune_report.cc, the SLURM path in
// batch_tune_slurm.cc.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>

#include <boost/program_options.hpp>

#include "algorithms/strategy.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/process.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "experiments/analysis/compare.h"
#include "experiments/batch/batch_internal.h"
#include "experiments/config/command_line.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/exit_status.h"
#include "experiments/record/csv.h"
#include "experiments/record/run_dir.h"

namespace asgd::experiments::batch {
namespace po = boost::program_options;
namespace fs = std::filesystem;
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr int kDefaultSeeds = 3;
constexpr int kDefaultExtend = 2;

// ---- Reading a run ---------------------------------------------------------------

// convergence.csv's evaluations (rows that do not parse are left out: a run cut short
// may end in half a line).
std::vector<EvalRow> ReadEvalRows(const std::string& run_dir) {
  std::ifstream in(JoinPath(run_dir, "convergence.csv"));
  std::string line;
  if (!std::getline(in, line)) return {};
  const std::vector<std::string> header = ParseCsvLine(line);
  auto column = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  const std::size_t epoch = column("epoch"), updates = column("updates"),
                    accuracy = column("test_accuracy");
  std::vector<EvalRow> rows;
  while (std::getline(in, line)) {
    const std::vector<std::string> cells = ParseCsvLine(line);
    if (cells.size() != header.size() || std::max({epoch, updates, accuracy}) >= cells.size()) {
      continue;
    }
    const auto e = ParseDouble(cells[epoch]), u = ParseDouble(cells[updates]),
               a = ParseDouble(cells[accuracy]);
    if (e && u && a) rows.push_back({*e, *u, *a});
  }
  return rows;
}

// What the score needs of a run that ended; has_summary false without a readable one.
RunRecord ReadRecord(const BatchRun& run, bool rows, RunSummary* summary) {
  RunRecord rec;
  rec.time_to_target_s = rec.best_accuracy = rec.final_accuracy = kNan;
  if (run.run_dir.empty() || !FileExists(JoinPath(run.run_dir, "summary.csv"))) return rec;
  try {
    *summary = ReadRunSummary(run.run_dir);
  } catch (const InputError&) {
    return rec;  // reported as the run's problem
  }
  rec.has_summary = true;
  rec.completed = run.exit_status == 0 && summary->Get("status") == "completed";
  rec.target = summary->Number("target_accuracy");
  rec.time_to_target_s = summary->Number("time_to_target_s");
  rec.best_accuracy = summary->Number("best_test_accuracy");
  rec.final_accuracy = summary->Number("final_test_accuracy");
  rec.bytes_pushed = summary->Number("bytes_pushed");
  rec.updates = summary->Number("updates");
  if (rows) rec.rows = ReadEvalRows(run.run_dir);
  return rec;
}

// ---- The plan and the folder -----------------------------------------------------

std::string AbsolutePath(const std::string& path) {
  return fs::absolute(path).lexically_normal().string();
}

// The lines of plan.txt: everything that decides which runs a tune makes and how.
std::string PlanText(const TuneSettings& s, const SlurmOptions& backend) {
  std::ostringstream p;
  p << "# asgd " << s.command
    << " plan: a rerun with --out naming this folder resumes when every line is the same\n";
  for (const auto& line : s.plan) p << line << "\n";
  for (const auto& point : s.points) {
    p << "point " << point.label << "\n  config " << AbsolutePath(point.config_path)
      << "\n  sha256 " << Sha256File(point.config_path) << "\n  set " << Join(point.sets, "; ")
      << "\n";
    for (const auto& a : point.axes) p << "  grid " << a.key << "=" << Join(a.values, ",") << "\n";
  }
  for (const auto& a : s.axes) p << "grid " << a.key << "=" << Join(a.values, ",") << "\n";
  p << "metric " << s.metric->name << "\nseeds " << s.seeds << "\nextend " << s.extend << "\n"
    << "runner " << (backend.launch ? "asgd launch" : "asgd run") << "\n";
  return p.str();
}

// The first line where two plans differ, for the refusal.
std::string FirstDifference(const std::string& a, const std::string& b) {
  const std::vector<std::string> x = Split(a, '\n'), y = Split(b, '\n');
  for (std::size_t i = 0; i < std::max(x.size(), y.size()); ++i) {
    const std::string l = i < x.size() ? x[i] : "", r = i < y.size() ? y[i] : "";
    if (l != r) return QuoteForMessage(Trim(l)) + " now " + QuoteForMessage(Trim(r));
  }
  return "";
}

// The local tune's folder: fresh, or the --out folder again when it holds plan.txt with
// this plan (then its finished runs are reused).
std::string OpenTuneDir(TuneState& st, const TuneExecution& ex) {
  const std::string& given = ex.given_out;
  const std::string plan = PlanText(st.settings, ex.backend);
  const std::string prefix = "asgd " + st.settings.command + ": --out " + given;
  if (!given.empty() && IsDirectory(given) && !fs::is_empty(given)) {
    const std::string plan_path = JoinPath(given, "plan.txt");
    if (!FileExists(plan_path)) {
      throw InputError(prefix +
                       " exists, is not empty and holds no plan.txt (not a folder of "
                       "asgd " +
                       st.settings.command + "; choose another folder)");
    }
    const std::string old = ReadFile(plan_path);
    if (old != plan) {
      throw InputError(prefix + " holds another tune (plan.txt: " + FirstDifference(old, plan) +
                       "); rerun with its options to resume it, or choose another folder");
    }
    st.resuming = true;
    MakeDirs(JoinPath(given, "runs"));
    MakeDirs(JoinPath(given, "logs"));
    return given;
  }
  const std::string dir = MakeBatchDir(given, ex.default_out, st.settings.command);
  WriteFileAtomic(JoinPath(dir, "plan.txt"), plan);
  return dir;
}

// ---- The local path ----------------------------------------------------------------

// Runs the runs at indices that have not ended (reusing, when resuming, those an earlier
// invocation finished); returns the stop signal that ended the stage, or 0.
int ExecuteStage(TuneState& st, const std::vector<std::size_t>& indices, const TuneExecution& ex,
                 std::ostream& out) {
  const std::string runs_dir = JoinPath(st.dir, "runs");
  std::vector<BatchRun> pending;
  std::vector<std::size_t> where;
  for (std::size_t i : indices) {
    BatchRun& run = st.runs[i].run;
    if (st.resuming) {
      const std::string found = FinishedRunDir(run, runs_dir, JoinPath(st.dir, "interrupted"));
      if (!found.empty()) {
        Reuse(run, found, out);
        continue;
      }
    }
    pending.push_back(run);
    where.push_back(i);
  }
  BatchOutcome outcome;
  if (!pending.empty()) {
    outcome = RunBatch(pending, SelfExecutable(), ex.parallel, runs_dir, st.settings.command, out,
                       ex.gpus);
  }
  for (std::size_t k = 0; k < pending.size(); ++k) st.runs[where[k]].run = pending[k];
  ScoreRuns(st);
  WriteTuneCsv(st, out);
  return outcome.signal;
}

// The seeds at each point's best value: experiment.seed + 1 .. + seeds (seed + 0 chose it).
std::vector<std::size_t> PlanSeeds(TuneState& st, const SlurmOptions& backend, std::ostream& out) {
  std::vector<std::size_t> added;
  const TuneSettings& s = st.settings;
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    const std::vector<ValueScore> ranked = RankedValues(st, p);
    const std::string who = s.prefix_labels ? s.points[p].label + ": " : "";
    if (ranked.empty() || ranked[0].score.outcome == Outcome::kNoRecord) {
      out << s.command << ": " << who << "no run left a record; no value to confirm\n";
      continue;
    }
    out << s.command << ": " << who << "best of the grid "
        << ValuesLabel(s.axes, ranked[0].values, "") << " (" << OutcomeName(ranked[0].score.outcome)
        << "); " << s.seeds << " more seed" << (s.seeds == 1 ? "" : "s")
        << " at it (experiment.seed + 1.." << s.seeds << ")\n";
    for (int k = 1; k <= s.seeds; ++k) {
      added.push_back(st.runs.size());
      st.runs.push_back(MakeTuneRun(st, p, ranked[0].values, k, "seeds", backend));
    }
  }
  return added;
}

int Interrupted(const TuneState& st, int signal, std::ostream& out) {
  std::size_t ended = 0;
  for (const auto& r : st.runs) ended += r.Ended() ? 1 : 0;
  out << st.settings.command << ": stopped; " << JoinPath(st.dir, "tune.csv") << " lists the "
      << ended << " finished runs; the same command with --out " << st.dir << " resumes the tune\n";
  out.flush();
  return 128 + signal;
}

std::vector<std::size_t> Indices(std::size_t from, std::size_t to) {
  std::vector<std::size_t> v;
  for (std::size_t i = from; i < to; ++i) v.push_back(i);
  return v;
}

int RunLocal(TuneState& st, const TuneExecution& ex, std::ostream& out) {
  const TuneSettings& s = st.settings;
  PlanGrid(st, 1, ex.backend);
  out << s.command << ": " << st.runs.size() << " grid runs (" << s.points.size()
      << (s.points.size() == 1 ? " point" : " points") << " x " << st.runs.size() / s.points.size()
      << " values, seed experiment.seed), then at most " << s.extend << " edge rounds and "
      << s.seeds << " seeds at each best value; " << ex.parallel << " at a time, into " << st.dir
      << (st.resuming ? " (resuming)" : "") << "\n";
  out.flush();
  if (int sig = ExecuteStage(st, Indices(0, st.runs.size()), ex, out)) {
    return Interrupted(st, sig, out);
  }
  for (int round = 1; round <= s.extend; ++round) {
    const std::vector<std::size_t> added = PlanEdges(st, round, 1, ex.backend, out);
    if (added.empty()) break;
    if (int sig = ExecuteStage(st, added, ex, out)) return Interrupted(st, sig, out);
  }
  const std::vector<std::size_t> seeds = PlanSeeds(st, ex.backend, out);
  if (int sig = ExecuteStage(st, seeds, ex, out)) return Interrupted(st, sig, out);
  return FinishTune(st, ex.plots, out);
}

void PrintTuneDryRun(const TuneState& st, std::ostream& out) {
  std::vector<BatchRun> runs;
  for (const auto& r : st.runs) runs.push_back(r.run);
  PrintDryRun(runs, st.dir, out);
  const TuneSettings& s = st.settings;
  std::size_t grid_runs = 0;
  for (std::size_t p = 0; p < s.points.size(); ++p) grid_runs += GridPoints(AxesOf(s, p)).size();
  if (st.runs.size() == grid_runs) {
    out << "then at most " << s.extend << " edge rounds (a run per extended value) and " << s.seeds
        << " seeds at each point's best value\n";
  }
}

// ---- The command ---------------------------------------------------------------------

po::options_description TuneOptions() {
  po::options_description desc("Options");
  desc.add_options()("help,h", "describe this command")(
      "grid", po::value<std::vector<std::string>>()->composing(),
      "an axis to tune: --grid section.key=v1,v2[,...] or section.key=log:LO:HI:N (N values, "
      "equal ratios) or section.key=lin:LO:HI:N (repeatable: the grid is their product)")(
      "metric", po::value<std::string>(),
      "what a run is scored by: time_to_target, epochs_to_target, bytes_to_target, "
      "best_accuracy or final_accuracy")(
      "points", po::value<std::vector<std::string>>()->composing(),
      "comparison points: --points section.key=v1,v2 (repeatable; their product), each "
      "tuned on its own as a point, e.g. --points algorithm.name=agn,downpour")(
      "target", po::value<double>(),
      "the target accuracy of the *_to_target metrics (sets experiment.target_accuracy)")(
      "seeds", po::value<int>(), "seeds at the best value (experiment.seed + 1..N; default 3)")(
      "extend", po::value<int>(),
      "rounds of the edge rule: a best value on the grid's edge adds the next value beyond "
      "it (default 2; 0: off)")("parallel", po::value<int>(), "runs at a time (default 1)")(
      "set", po::value<std::vector<std::string>>()->composing(),
      "override one key for every run: --set section.key=value (repeatable)")(
      "out", po::value<std::string>(),
      "the tune folder (default results/tunes/<UTC time>-<config stem>); a folder holding "
      "this tune's plan.txt resumes it")("no-plots", "write the tables without the PNGs")(
      "dry-run", "validate and list the grid's runs without starting them")(
      "config", po::value<std::string>(), "the experiment config (INI)");
  AddBackendOptions(desc);
  return desc;
}

constexpr const char* kTuneUsage =
    "usage: asgd tune CONFIG --grid section.key=SPEC [--grid ...] --metric M [--target A]\n"
    "                 [--points section.key=v1,v2 ...] [--seeds N] [--extend K]\n"
    "                 [--parallel P] [--set ...] [--out DIR]\n\n"
    "Tunes CONFIG as one comparison point: runs every grid value once (seed\n"
    "experiment.seed), scores each by M (a run that never reaches the target ranks after\n"
    "every run that does, by its best accuracy), adds the next value beyond the grid's edge\n"
    "when the best lies on it (at most K rounds), then runs the best value with N more\n"
    "seeds and reports the mean, standard deviation and 95 % confidence interval (Student's\n"
    "t) of M and of the final accuracy: DIR/tune.csv (every run), best.csv, tune.md, and\n"
    "tune_<M>_vs_<key>.png. With --points, every point of their product is tuned so,\n"
    "in one table. Runs: grid + edge runs + N per point. SIGINT leaves tune.csv\n"
    "of the finished runs; the same command with --out DIR resumes.\n\n"
    "With --backend slurm every value runs with every seed as one job array; then\n"
    "`asgd tune collect DIR` scores the values by the seeds' mean and submits the edge\n"
    "rule's values as another array when needed (collect again).";

int NonNegativeOption(const po::variables_map& vm, const std::string& name, int fallback) {
  if (!vm.count(name)) return fallback;
  const int v = vm[name].as<int>();
  if (v < 0) throw ConfigError("--" + name, std::to_string(v), "an integer >= 0");
  return v;
}

// --set, with --target as experiment.target_accuracy; checked against the schema and the
// grid.
std::vector<std::string> TuneSets(const po::variables_map& vm, const std::vector<GridAxis>& axes) {
  std::vector<std::string> sets;
  if (vm.count("set")) sets = vm["set"].as<std::vector<std::string>>();
  if (vm.count("target")) {
    for (const auto& s : sets) {
      if (KeyOf(s) == "experiment.target_accuracy") {
        throw InputError(
            "asgd tune: experiment.target_accuracy is given by both --set and --target");
      }
    }
    sets.push_back("experiment.target_accuracy=" + GridNumber(vm["target"].as<double>()));
  }
  ValidateSets(sets, "tune");
  for (const auto& s : sets) {
    for (const auto& a : axes) {
      if (KeyOf(s) == a.key) {
        throw InputError("asgd tune: " + a.key + " is given by both --set and --grid");
      }
    }
  }
  return sets;
}

// The comparison points: the config once (labelled by its experiment.name or stem), or
// with --points every point of their product, each with its values after the sets.
std::vector<TunePoint> TunePoints(const std::string& config, const std::vector<std::string>& sets,
                                  const std::vector<std::string>& point_specs,
                                  const std::vector<GridAxis>& grid) {
  const std::vector<GridAxis> axes = ParseGrid(point_specs, "tune");
  for (const auto& a : axes) {
    for (const auto& g : grid) {
      if (a.key == g.key) {
        throw InputError("asgd tune: " + a.key + " is given by both --points and --grid");
      }
    }
    for (const auto& st : sets) {
      if (KeyOf(st) == a.key) {
        throw InputError("asgd tune: " + a.key + " is given by both --set and --points");
      }
    }
  }
  std::vector<TunePoint> points;
  for (const auto& index : GridPoints(axes)) {
    TunePoint p;
    p.config_path = config;
    p.sets = sets;
    const std::vector<std::string> values = PointValues(axes, index);
    for (std::size_t a = 0; a < axes.size(); ++a) p.sets.push_back(axes[a].key + "=" + values[a]);
    const Config base = Config::FromFile(config, p.sets, ExperimentSchema());
    p.base_seed = base.Int("experiment.seed");
    const std::string name = base.String("experiment.name");
    p.label = ValuesLabel(axes, values, name.empty() ? ConfigStem(config) : name);
    points.push_back(std::move(p));
  }
  return points;
}

}  // namespace

TuneRun MakeTuneRun(const TuneState& st, std::size_t point, const std::vector<std::string>& values,
                    int64_t seed_offset, const std::string& stage, const SlurmOptions& backend) {
  const TuneSettings& s = st.settings;
  const TunePoint& p = s.points[point];
  TuneRun r;
  r.point = point;
  r.values = values;
  r.stage = stage;
  r.final_accuracy = kNan;
  const std::string label = ValuesLabel(s.axes, values, p.label);
  r.run.label = s.prefix_labels ? p.label + " " + label : label;
  r.run.name = SanitizeLabel(r.run.label);
  r.run.config_path = p.config_path;
  r.run.seed = p.base_seed + seed_offset;
  r.run.overrides = p.sets;
  for (std::size_t a = 0; a < s.axes.size(); ++a) {
    r.run.overrides.push_back(s.axes[a].key + "=" + values[a]);
  }
  r.run.overrides.push_back("experiment.seed=" + std::to_string(r.run.seed));
  r.run.overrides.push_back("experiment.out_dir=" + JoinPath(st.dir, "runs"));
  r.run.overrides.push_back("experiment.name=" + r.run.label);
  r.run.overrides.push_back("experiment.progress=off");
  r.run.launch = backend.launch;
  r.run.log_path =
      JoinPath(JoinPath(st.dir, "logs"), r.run.name + "-s" + std::to_string(r.run.seed) + ".log");
  return r;
}

void CheckTuneRun(const TuneSettings& s, const TuneRun& r) {
  const std::string where =
      s.where + (s.prefix_labels ? "[run " + s.points[r.point].label + "] " : "");
  std::optional<Config> c;
  try {
    c.emplace(LoadRunConfig(r.run.config_path, r.run.overrides));
  } catch (const ConfigError& e) {
    throw InputError(where + e.what());
  }
  const std::string metric = "--metric " + s.metric->name;
  if (s.metric->needs_target && !(c->Double("experiment.target_accuracy") > 0)) {
    throw InputError(where + metric +
                     " needs a target accuracy, and no config sets one "
                     "(experiment.target_accuracy is 0; set it in the config or give --target A)");
  }
  const std::string algorithm = c->String("algorithm.name");
  const algorithms::Strategy& strategy = algorithms::FindStrategy(algorithm);
  if (s.metric->name == "bytes_to_target" &&
      (strategy.family == algorithms::Family::kSequential || strategy.shared_memory)) {
    throw InputError(where + metric + ": algorithm.name = " + algorithm +
                     " pushes no parameters, so its runs record no bytes (choose another metric)");
  }
}

const std::vector<GridAxis>& AxesOf(const TuneSettings& s, std::size_t p) {
  return s.points[p].axes.empty() ? s.axes : s.points[p].axes;
}

void PlanGrid(TuneState& st, int seeds, const SlurmOptions& backend) {
  for (std::size_t p = 0; p < st.settings.points.size(); ++p) {
    const std::vector<GridAxis>& axes = AxesOf(st.settings, p);
    for (const auto& point : GridPoints(axes)) {
      for (int k = 0; k < seeds; ++k) {
        st.runs.push_back(MakeTuneRun(st, p, PointValues(axes, point), k, "grid", backend));
      }
    }
  }
}

void ScoreRuns(TuneState& st) {
  const TuneMetric& metric = *st.settings.metric;
  const bool rows = metric.name == "epochs_to_target" || metric.name == "bytes_to_target";
  for (auto& r : st.runs) {
    if (!r.Ended()) continue;
    RunSummary summary;
    const RunRecord rec = ReadRecord(r.run, rows, &summary);
    r.score = ScoreRun(metric, rec);
    r.final_accuracy = rec.final_accuracy;
    r.simulated = rec.has_summary && IsSimulated(summary);
  }
}

std::vector<ValueScore> RankedValues(const TuneState& st, std::size_t point) {
  std::vector<ValueScore> values;
  for (std::size_t i = 0; i < st.runs.size(); ++i) {
    const TuneRun& r = st.runs[i];
    if (r.point != point || !r.Selects()) continue;
    auto it = std::find_if(values.begin(), values.end(),
                           [&](const ValueScore& v) { return v.values == r.values; });
    if (it == values.end()) {
      values.push_back({r.values, {}, {}});
      it = values.end() - 1;
    }
    it->runs.push_back(i);
  }
  std::vector<RunScore> scores;
  for (auto& v : values) {
    std::vector<RunScore> seeds;
    for (std::size_t i : v.runs) {
      if (st.runs[i].Ended()) seeds.push_back(st.runs[i].score);
    }
    v.score = MeanScore(seeds);
    scores.push_back(v.score);
  }
  std::vector<ValueScore> ranked;
  for (std::size_t i : RankScores(scores, st.settings.metric->lower_is_better)) {
    ranked.push_back(values[i]);
  }
  return ranked;
}

std::vector<std::size_t> PlanEdges(TuneState& st, int round, int seeds, const SlurmOptions& backend,
                                   std::ostream& out) {
  std::vector<std::size_t> added;
  const TuneSettings& s = st.settings;
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    const std::vector<ValueScore> ranked = RankedValues(st, p);
    if (ranked.empty() || ranked[0].score.outcome == Outcome::kNoRecord) continue;
    const std::vector<std::string>& best = ranked[0].values;
    for (std::size_t a = 0; a < s.axes.size(); ++a) {
      std::vector<std::string> tried;
      for (const auto& v : ranked) {
        if (std::find(tried.begin(), tried.end(), v.values[a]) == tried.end()) {
          tried.push_back(v.values[a]);
        }
      }
      const GridAxis& axis = AxesOf(s, p)[a];
      const Edge edge = EdgeOf(tried, best[a]);
      const auto next =
          StepBeyond({axis.values, axis.spacing, axis.step}, tried, edge, axis.integer);
      if (!next) continue;
      std::vector<std::string> values = best;
      values[a] = *next;
      const std::string who = s.prefix_labels ? s.points[p].label + ": " : "";
      const std::string what = who + "the best " + axis.key + " = " + best[a] + " is the " +
                               (edge == Edge::kHigh ? "largest" : "smallest") + " value tried; ";
      std::vector<TuneRun> runs;
      for (int k = 0; k < seeds; ++k) {
        runs.push_back(MakeTuneRun(st, p, values, k, "edge " + std::to_string(round), backend));
      }
      std::string note = what + "edge round " + std::to_string(round) + " of " +
                         std::to_string(s.extend) + " adds " + axis.key + " = " + *next;
      try {
        CheckTuneRun(s, runs[0]);
      } catch (const InputError& e) {
        note = what + "not extended to " + *next + ": " + e.what();
        runs.clear();
      }
      out << s.command << ": edge: " << note << "\n";
      st.notes[p].push_back(note);
      for (auto& r : runs) {
        added.push_back(st.runs.size());
        st.runs.push_back(std::move(r));
      }
    }
  }
  out.flush();
  return added;
}

TuneExecution TuneExecutionOf(const po::variables_map& vm, const SlurmOptions& backend,
                              const std::vector<int>& gpus) {
  TuneExecution ex;
  ex.backend = backend;
  ex.gpus = gpus;
  ex.parallel = PositiveOption(vm, "parallel", 1);
  if (vm.count("parallel")) ex.given_parallel = ex.parallel;
  ex.plots = !vm.count("no-plots");
  ex.dry_run = vm.count("dry-run") > 0;
  ex.replan = BackendReplanArgs(vm);
  return ex;
}

int RunTune(const TuneSettings& settings, const TuneExecution& ex, std::ostream& out) {
  TuneState st;
  st.settings = settings;
  st.notes.resize(settings.points.size());
  const bool slurm = ex.backend.backend == "slurm";
  std::string planned = ex.given_out.empty() ? ex.default_out : ex.given_out;
  if (!ex.collect_dir.empty()) planned = ex.collect_dir;
  st.dir = slurm ? AbsolutePath(planned) : planned;
  // Everything is checked before anything runs: every grid run's config and metric.
  PlanGrid(st, slurm ? settings.seeds : 1, ex.backend);
  std::vector<BatchRun> runs;
  for (const auto& r : st.runs) {
    CheckTuneRun(settings, r);
    runs.push_back(r.run);
  }
  if (ex.backend.srun) PlanSrunRuns(runs);
  if (ex.backend.launch) PlanLaunchRuns(runs);
  AssignLogs(runs, st.dir);  // two labels that give one file name
  if (ex.dry_run) {
    PrintTuneDryRun(st, out);
    return kExitOk;
  }
  if (!ex.collect_dir.empty()) {
    if (!IsDirectory(ex.collect_dir)) {
      throw InputError("asgd " + settings.command + " collect: no folder " + ex.collect_dir);
    }
    const std::string plan_path = JoinPath(ex.collect_dir, "plan.txt");
    const std::string plan = FileExists(plan_path) ? ReadFile(plan_path) : std::string();
    const std::string now = PlanText(settings, ex.backend);
    if (plan != now) {
      throw InputError("asgd " + settings.command + " collect: " + ex.collect_dir +
                       " was planned otherwise (plan.txt: " + FirstDifference(plan, now) +
                       "); the config or suite changed since it was submitted");
    }
    return CollectTune(st, ex, out);
  }
  st.runs.clear();
  if (slurm) {
    RequireSbatch(ex.backend, settings.command);
    st.dir = AbsolutePath(MakeBatchDir(ex.given_out, ex.default_out, settings.command));
    WriteFileAtomic(JoinPath(st.dir, "plan.txt"), PlanText(settings, ex.backend));
    return SubmitTune(st, ex, out);
  }
  st.dir = OpenTuneDir(st, ex);
  return RunLocal(st, ex, out);
}

int Tune(const std::vector<std::string>& given_args, std::ostream& out) {
  std::string collect_dir;
  const std::vector<std::string> args = ReplanIfCollect(given_args, "tune", &collect_dir);
  const po::options_description desc = TuneOptions();
  po::positional_options_description pos;
  pos.add("config", 1);
  auto vm = ParseCommandLine(args, desc, pos, "tune");
  if (vm.count("help")) {
    out << kTuneUsage << "\n" << desc;
    return kExitOk;
  }
  if (!vm.count("config")) throw InputError("asgd tune: missing CONFIG (see `asgd tune --help`)");
  const std::vector<std::string> grid =
      vm.count("grid") ? vm["grid"].as<std::vector<std::string>>() : std::vector<std::string>();
  if (grid.empty()) {
    throw InputError(
        "asgd tune: no --grid (expected at least one axis to tune, e.g. --grid "
        "algorithm.learning_rate=log:1e-3:1:7)");
  }
  if (!vm.count("metric")) {
    throw InputError(
        "asgd tune: missing --metric (one of time_to_target, epochs_to_target, "
        "bytes_to_target, best_accuracy, final_accuracy)");
  }
  TuneSettings s;
  s.command = "tune";
  s.where = "asgd tune: ";
  try {
    s.metric = &FindTuneMetric(vm["metric"].as<std::string>());
  } catch (const InputError& e) {
    throw InputError(s.where + e.what());
  }
  s.axes = ParseGrid(grid, "tune");
  s.seeds = PositiveOption(vm, "seeds", kDefaultSeeds);
  s.extend = NonNegativeOption(vm, "extend", kDefaultExtend);
  const SlurmOptions backend = ReadBackendOptions(vm, "tune");
  const std::string config = backend.backend == "slurm"
                                 ? AbsolutePath(vm["config"].as<std::string>())
                                 : vm["config"].as<std::string>();
  const std::vector<std::string> points =
      vm.count("points") ? vm["points"].as<std::vector<std::string>>() : std::vector<std::string>();
  const std::vector<std::string> sets = TuneSets(vm, s.axes);
  s.points = TunePoints(config, sets, points, s.axes);
  s.prefix_labels = !points.empty();
  std::vector<std::string> with_grid = sets;
  with_grid.insert(with_grid.end(), grid.begin(), grid.end());
  with_grid.insert(with_grid.end(), points.begin(), points.end());
  TuneExecution ex = TuneExecutionOf(vm, backend, ReadGpus(vm, with_grid, "tune", backend));
  const std::string stem = ConfigStem(config);
  ex.given_out = vm.count("out") ? vm["out"].as<std::string>() : "";
  ex.default_out = "results/tunes/" + WallTimeCompact() + "-" + stem;
  ex.collect_dir = collect_dir;
  ex.job_name = "asgd-tune-" + SanitizeLabel(stem);
  std::vector<std::string> replan = {config,
                                     "--metric",
                                     s.metric->name,
                                     "--seeds",
                                     std::to_string(s.seeds),
                                     "--extend",
                                     std::to_string(s.extend)};
  for (const auto& g : grid) replan.insert(replan.end(), {"--grid", g});
  for (const auto& p : points) replan.insert(replan.end(), {"--points", p});
  for (const auto& st : sets) replan.insert(replan.end(), {"--set", st});
  ex.replan.insert(ex.replan.begin(), replan.begin(), replan.end());
  return RunTune(s, ex, out);
}

}  // namespace asgd::experiments::batch
