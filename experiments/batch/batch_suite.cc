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

// A suite file, read and checked.
struct SuiteFile {
  std::string name, out_dir;
  std::vector<std::string> sets;   // [suite] set: for every run, before its own
  std::vector<BatchRun> runs;      // [run LABEL]: label, name, config, its own set
  std::optional<IniSection> tune;  // [tune]
  // Per run: its own grid = (a tuned suite's values for that run), or null.
  std::vector<std::optional<IniEntry>> grids;
};

// A [run LABEL] section as a run: its label, config (relative to the suite's folder) and
// its own set.
BatchRun ReadRunSection(const std::string& path, const IniSection& s,
                        const std::vector<BatchRun>& before) {
  const std::string where = path + ":" + std::to_string(s.line);
  const std::string base_dir = fs::path(path).parent_path().string();
  BatchRun r;
  r.label = std::string(Trim(s.name.substr(4)));
  for (const auto& other : before) {
    if (other.label == r.label) throw InputError(where + ": [run " + r.label + "] is given twice");
  }
  CheckKeys(path, s, {"config", "set", "grid"});
  const std::string section = path + ": [run " + r.label + "]";
  const IniEntry* config = FindEntry(s, "config");
  if (config == nullptr || config->value.empty()) {
    throw InputError(section + " config: missing (expected config = PATH of an experiment config)");
  }
  r.config_path = fs::path(config->value).is_absolute() || base_dir.empty()
                      ? config->value
                      : (fs::path(base_dir) / config->value).string();
  if (!FileExists(r.config_path)) {
    throw InputError(section + " config: no such file " + QuoteForMessage(r.config_path, 200));
  }
  if (const IniEntry* set = FindEntry(s, "set")) r.overrides = SplitSets(set->value);
  for (const auto& o : r.overrides) {
    if (IsBatchKey(KeyOf(o))) {
      throw InputError(section + " set: " + KeyOf(o) + ": set by asgd suite for every run");
    }
  }
  r.name = SanitizeLabel(r.label);
  return r;
}

SuiteFile ReadSuite(const std::string& path) {
  SuiteFile f;
  bool have_suite = false;
  for (const auto& s : ParseSuiteFile(path)) {
    const std::string where = path + ":" + std::to_string(s.line);
    if (s.name == "suite") {
      if (have_suite) throw InputError(where + ": [suite] is given twice");
      have_suite = true;
      CheckKeys(path, s, {"name", "out_dir", "set"});
      if (const IniEntry* e = FindEntry(s, "name")) f.name = e->value;
      if (const IniEntry* e = FindEntry(s, "out_dir")) f.out_dir = e->value;
      if (const IniEntry* e = FindEntry(s, "set")) f.sets = SplitSets(e->value);
      if (f.name.empty())
        throw InputError(path + ": [suite] name: missing (expected name = LABEL)");
    } else if (s.name == "tune") {
      if (f.tune) throw InputError(where + ": [tune] is given twice");
      CheckKeys(path, s, {"grid", "metric", "seeds", "target", "extend"});
      f.tune = s;
    } else if (StartsWith(s.name, "run ") && !Trim(s.name.substr(4)).empty()) {
      f.runs.push_back(ReadRunSection(path, s, f.runs));
      const IniEntry* grid = FindEntry(s, "grid");
      f.grids.push_back(grid != nullptr ? std::optional<IniEntry>(*grid) : std::nullopt);
    } else {
      throw InputError(where + ": [" + s.name +
                       "]: unknown section (expected [suite], [tune] or [run LABEL])");
    }
  }
  if (!have_suite) {
    throw InputError(path + ": no [suite] section (expected [suite] with name = LABEL)");
  }
  if (f.runs.empty()) throw InputError(path + ": no [run LABEL] sections");
  for (std::size_t i = 0; i < f.runs.size(); ++i) {
    if (f.grids[i] && !f.tune) {
      throw InputError(path + ":" + std::to_string(f.grids[i]->line) + ": [run " +
                       f.runs[i].label +
                       "] grid: a run's own grid values need a [tune] section (which tunes "
                       "every run)");
    }
  }
  return f;
}

// [tune] grid: axes separated by ';'. A piece without '=' continues the axis before it
// (the ';' between values of a list-valued key: model.hidden=64,64;256,256).
std::vector<std::string> SplitGridAxes(const std::string& text) {
  std::vector<std::string> axes;
  for (const auto& piece : Split(text, ';')) {
    const std::string p(Trim(piece));
    if (p.empty()) continue;
    if (p.find('=') == std::string::npos && !axes.empty()) {
      axes.back() += ";" + p;
    } else {
      axes.push_back(p);
    }
  }
  return axes;
}

// An integer of [tune] (seeds, extend) at least min, or fallback.
int TuneInteger(const std::string& path, const IniSection& s, const std::string& key, int min,
                int fallback) {
  const IniEntry* e = FindEntry(s, key);
  if (e == nullptr) return fallback;
  const auto v = ParseInt64(e->value);
  if (!v || *v < min || *v > 1000) {
    throw InputError(path + ":" + std::to_string(e->line) + ": [tune] " + key + " = " +
                     QuoteForMessage(e->value) + ": expected an integer >= " + std::to_string(min));
  }
  return static_cast<int>(*v);
}

// A [run]'s grid = ...: the [tune] axes with this run's values for the axes it names (each
// must be one of [tune]'s, so that every point's table has the same columns).
std::vector<GridAxis> RunGrid(const std::string& path, const BatchRun& run, const IniEntry& grid,
                              const std::vector<GridAxis>& tune_axes) {
  const std::string where =
      path + ":" + std::to_string(grid.line) + ": [run " + run.label + "] grid: ";
  std::vector<GridAxis> own;
  try {
    own = ParseGrid(SplitGridAxes(grid.value), "suite");
  } catch (const InputError& e) {
    throw InputError(where + e.what());
  }
  if (own.empty()) throw InputError(where + "empty (expected grid = section.key=SPEC; ...)");
  std::vector<GridAxis> axes = tune_axes;
  for (const auto& a : own) {
    auto it = std::find_if(axes.begin(), axes.end(),
                           [&](const GridAxis& t) { return t.key == a.key; });
    if (it == axes.end()) {
      throw InputError(where + a.key +
                       " is not an axis of [tune] grid (a run's grid gives its own values of "
                       "[tune]'s axes)");
    }
    const std::string short_key = it->short_key;
    *it = a;
    it->short_key = short_key;
  }
  return axes;
}

// The [tune] section as the settings of a tune whose points are the suite's runs.
TuneSettings SuiteTuneSettings(const std::string& path, const SuiteFile& f,
                               const std::vector<std::string>& cli_sets) {
  const IniSection& t = *f.tune;
  TuneSettings s;
  s.command = "suite";
  s.where = path + ": ";
  s.prefix_labels = true;
  const IniEntry* grid = FindEntry(t, "grid");
  const IniEntry* metric = FindEntry(t, "metric");
  if (grid == nullptr || SplitGridAxes(grid->value).empty()) {
    throw InputError(path + ": [tune] grid: missing (expected grid = section.key=SPEC; ...)");
  }
  if (metric == nullptr) {
    throw InputError(path +
                     ": [tune] metric: missing (expected one of time_to_target, "
                     "epochs_to_target, bytes_to_target, best_accuracy, final_accuracy)");
  }
  try {
    s.metric = &FindTuneMetric(metric->value);
    s.axes = ParseGrid(SplitGridAxes(grid->value), "suite");
  } catch (const InputError& e) {
    throw InputError(path + ": [tune] " + e.what());
  }
  s.seeds = TuneInteger(path, t, "seeds", 1, 3);
  s.extend = TuneInteger(path, t, "extend", 0, 2);
  std::vector<std::string> extra;
  if (const IniEntry* target = FindEntry(t, "target")) {
    extra.push_back("experiment.target_accuracy=" + target->value);
  }
  extra.insert(extra.end(), cli_sets.begin(), cli_sets.end());
  for (std::size_t i = 0; i < f.runs.size(); ++i) {
    const BatchRun& r = f.runs[i];
    TunePoint p;
    p.label = r.label;
    if (f.grids[i]) p.axes = RunGrid(path, r, *f.grids[i], s.axes);
    p.config_path = r.config_path;
    p.sets = f.sets;
    p.sets.insert(p.sets.end(), r.overrides.begin(), r.overrides.end());
    p.sets.insert(p.sets.end(), extra.begin(), extra.end());
    for (const auto& o : p.sets) {
      for (const auto& a : s.axes) {
        if (KeyOf(o) == a.key) {
          throw InputError(path + ": [run " + r.label + "] " + a.key +
                           " is set for the run and tuned by [tune] grid");
        }
      }
    }
    try {
      p.base_seed =
          Config::FromFile(p.config_path, p.sets, ExperimentSchema()).Int("experiment.seed");
    } catch (const ConfigError& e) {
      throw InputError(path + ": [run " + r.label + "] " + e.what());
    }
    s.points.push_back(std::move(p));
  }
  s.plan = {"suite " + f.name};
  return s;
}

// What a plain suite's runs get besides their own set: --set, experiment.seed when there
// are several seeds, and the keys of the batch.
void FixSuiteRuns(std::vector<BatchRun>& runs, const std::vector<std::size_t>& own_sets,
                  const std::vector<std::string>& sets, int seeds, const std::string& dir) {
  for (std::size_t i = 0; i < runs.size(); ++i) {
    BatchRun& r = runs[i];
    r.overrides.resize(own_sets[i]);
    r.overrides.insert(r.overrides.end(), sets.begin(), sets.end());
    if (seeds > 1) r.overrides.push_back("experiment.seed=" + std::to_string(r.seed));
    r.overrides.push_back("experiment.out_dir=" + JoinPath(dir, "runs"));
    r.overrides.push_back("experiment.name=" + r.label);
    r.overrides.push_back("experiment.progress=off");
  }
}

// With seeds > 1, each run becomes seeds runs at experiment.seed + 0 .. seeds - 1 (the
// run's own seed first), as a sweep's points do.
void ExpandSeeds(std::vector<BatchRun>& runs, std::vector<std::size_t>& own_sets, int seeds) {
  if (seeds <= 1) return;
  std::vector<BatchRun> expanded;
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    for (int k = 0; k < seeds; ++k) {
      expanded.push_back(runs[i]);
      expanded.back().seed = runs[i].seed + k;
      sizes.push_back(own_sets[i]);
    }
  }
  runs = std::move(expanded);
  own_sets = std::move(sizes);
}

po::options_description SuiteOptions() {
  po::options_description desc("Options");
  desc.add_options()("help,h", "describe this command")("parallel", po::value<int>(),
                                                        "runs at a time (default 1)")(
      "seeds", po::value<int>(),
      "runs per [run], seeds experiment.seed + 0..N-1 (default 1; a [tune] section sets its "
      "own)")("out", po::value<std::string>(),
              "the suite folder (default: [suite] out_dir, else results/suites/<name>-<UTC "
              "time>)")(
      "set", po::value<std::vector<std::string>>()->composing(),
      "override one key for every run: --set section.key=value (repeatable; applied after "
      "the run's own set)")("no-plots", "compare without drawing the PNGs")(
      "dry-run", "validate and list the runs without starting them")(
      "file", po::value<std::string>(), "the suite file (INI)");
  AddBackendOptions(desc);
  return desc;
}

constexpr const char* kSuiteUsage =
    "usage: asgd suite FILE [--parallel P] [--seeds N] [--out DIR] [--set section.key=value "
    "...]\n\n"
    "FILE is an INI file: [suite] with name (and optionally out_dir), then one\n"
    "[run LABEL] section per run with config = PATH (relative to FILE's folder) and\n"
    "optionally set = section.key=value; section.key=value. Runs each as an `asgd run`\n"
    "child, P at a time, then compares them into the suite folder (comparison.csv,\n"
    "comparison.md, plots). Logs: DIR/logs/. Exit 2 if a run failed; SIGINT/SIGTERM\n"
    "end every run by PID (exit 128 + the signal).\n\n"
    "A [tune] section (grid, metric, seeds, target, extend: as `asgd tune` takes them)\n"
    "tunes every [run] as a point of its own instead and writes one table of them.\n\n"
    "With --backend slurm the runs become one SLURM job array instead (DIR/slurm/\n"
    "array.sbatch, submitted with sbatch); `asgd suite collect DIR` compares them after.";

}  // namespace

int Suite(const std::vector<std::string>& given_args, std::ostream& out) {
  // `collect DIR` replans the batch from what the submission wrote, then gathers.
  std::string collect_dir;
  const std::vector<std::string> args = ReplanIfCollect(given_args, "suite", &collect_dir);
  const po::options_description desc = SuiteOptions();
  po::positional_options_description pos;
  pos.add("file", 1);
  auto vm = ParseCommandLine(args, desc, pos, "suite");
  if (vm.count("help")) {
    out << kSuiteUsage << "\n" << desc;
    return kExitOk;
  }
  if (!vm.count("file")) throw InputError("asgd suite: missing FILE (see `asgd suite --help`)");
  const SlurmOptions backend = ReadBackendOptions(vm, "suite");
  const bool slurm = backend.backend == "slurm";
  std::vector<std::string> sets;
  if (vm.count("set")) sets = vm["set"].as<std::vector<std::string>>();
  const std::vector<int> gpus = ReadGpus(vm, sets, "suite", backend);
  const std::string path =
      slurm ? fs::absolute(vm["file"].as<std::string>()).string() : vm["file"].as<std::string>();
  const int parallel = PositiveOption(vm, "parallel", 1);
  const int seeds = PositiveOption(vm, "seeds", 1);
  ValidateSets(sets, "suite");
  if (!FileExists(path)) throw InputError(path + ": no such suite file");
  SuiteFile f = ReadSuite(path);
  const std::string given_out = vm.count("out") ? vm["out"].as<std::string>() : f.out_dir;
  const std::string default_out =
      "results/suites/" + SanitizeLabel(f.name) + "-" + WallTimeCompact();
  std::vector<std::string> replan = {path};
  for (const auto& st : sets) replan.insert(replan.end(), {"--set", st});
  if (vm.count("seeds")) replan.insert(replan.end(), {"--seeds", std::to_string(seeds)});
  if (f.tune) {
    if (vm.count("seeds")) {
      throw InputError("asgd suite: --seeds: " + path +
                       " has a [tune] section, whose seeds key sets the seeds of a tuned suite");
    }
    TuneExecution ex = TuneExecutionOf(vm, backend, gpus);
    ex.given_out = given_out;
    ex.default_out = default_out;
    ex.collect_dir = collect_dir;
    ex.replan.insert(ex.replan.begin(), replan.begin(), replan.end());
    ex.job_name = "asgd-suite-" + SanitizeLabel(f.name);
    return RunTune(SuiteTuneSettings(path, f, sets), ex, out);
  }
  std::vector<BatchRun>& runs = f.runs;
  for (auto& r : runs) r.overrides.insert(r.overrides.begin(), f.sets.begin(), f.sets.end());
  std::string planned = given_out.empty() ? default_out : given_out;
  if (!collect_dir.empty()) planned = collect_dir;
  if (slurm) planned = fs::absolute(planned).lexically_normal().string();
  std::vector<std::size_t> own_sets;  // how many overrides are the run's own set
  for (const auto& r : runs) own_sets.push_back(r.overrides.size());
  FixSuiteRuns(runs, own_sets, sets, 1, planned);
  for (auto& r : runs) {
    try {
      r.seed = LoadRunConfig(r.config_path, r.overrides).Int("experiment.seed");
    } catch (const ConfigError& e) {
      throw InputError(path + ": [run " + r.label + "] " + e.what());
    }
  }
  ExpandSeeds(runs, own_sets, seeds);
  auto add_fixed = [&](const std::string& dir) { FixSuiteRuns(runs, own_sets, sets, seeds, dir); };
  add_fixed(planned);
  if (backend.srun) PlanSrunRuns(runs);
  if (backend.launch) PlanLaunchRuns(runs);
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
  const std::string dir = StartBatchDir(runs, given_out, default_out, "suite", backend, add_fixed);
  WriteFileAtomic(JoinPath(dir, "suite.ini"), ReadFile(path));
  if (slurm) {
    if (vm.count("no-plots")) replan.emplace_back("--no-plots");
    if (backend.srun) replan.emplace_back("--srun");
    const std::string script = WriteSlurmFiles(
        runs, dir, replan, vm.count("parallel") ? std::optional<int>(parallel) : std::nullopt,
        backend, "asgd-suite-" + SanitizeLabel(f.name));
    out << "suite " << f.name << ": " << runs.size() << " runs as a SLURM job array into " << dir
        << "\n"
        << "wrote " << script << "\n";
    if (!backend.emit_only) SubmitSlurm(dir, script, "suite", out);
    return kExitOk;
  }
  out << "suite " << f.name << ": " << runs.size() << " runs, "
      << (gpus.empty() ? parallel : std::min<int>(parallel, static_cast<int>(gpus.size())))
      << " at a time" << (gpus.empty() ? "" : " (one per GPU of --gpus)") << ", into " << dir
      << "\n";
  out.flush();
  const BatchOutcome outcome =
      RunBatch(runs, SelfExecutable(), parallel, JoinPath(dir, "runs"), "suite", out, gpus);
  if (outcome.signal != 0) return 128 + outcome.signal;
  const std::string plot_error = CompareBatch(runs, dir, !vm.count("no-plots"), out);
  return BatchResult(outcome, runs.size(), plot_error, dir, "suite", out);
}

}  // namespace asgd::experiments::batch
