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

}  // namespace

int Suite(const std::vector<std::string>& given_args, std::ostream& out) {
  // `collect DIR` replans the batch from what the submission wrote, then gathers.
  std::string collect_dir;
  const std::vector<std::string> args = ReplanIfCollect(given_args, "suite", &collect_dir);
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
  if (backend.srun) PlanSrunRuns(runs);
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
    std::vector<std::string> replan = {path};
    for (const auto& st : sets) replan.insert(replan.end(), {"--set", st});
    if (vm.count("no-plots")) replan.emplace_back("--no-plots");
    if (backend.srun) replan.emplace_back("--srun");
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

}  // namespace asgd::experiments::batch
