#include "experiments/analysis/compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>

#include <boost/program_options.hpp>
#include <poll.h>
#include <unistd.h>

#include "core/check.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/process.h"
#include "core/strings.h"
#include "experiments/analysis/seed_stats.h"
#include "experiments/config/command_line.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/exit_status.h"
#include "experiments/record/csv.h"

namespace asgd::experiments {
namespace po = boost::program_options;
namespace fs = std::filesystem;
namespace {

// The script exits with this status when matplotlib cannot be imported, so that the
// next python3 on the list can be tried.
constexpr int kPlotExitNoMatplotlib = 3;
constexpr auto kPlotTimeout = std::chrono::seconds(300);
// summary.csv's newest column; a run folder of before it ran on the wall clock.
const std::string kTimeModel = "time_model";

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot be read");
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  while (!lines.empty() && Trim(lines.back()).empty()) lines.pop_back();
  return lines;
}

// ---- Plotting ------------------------------------------------------------------

std::string PlotScript() {
  std::vector<std::string> candidates;
  try {
    candidates.push_back((fs::path(SelfExecutable()).parent_path() / "asgd_plots.py").string());
  } catch (const IoError&) {
    // No /proc: only the source tree is left.
  }
#ifdef ASGD_PLOT_SCRIPT_SOURCE
  candidates.emplace_back(ASGD_PLOT_SCRIPT_SOURCE);
#endif
  for (const auto& c : candidates) {
    if (FileExists(c)) return c;
  }
  throw InputError(
      "asgd compare: the plotting script asgd_plots.py is not next to the "
      "binary nor in the source tree (looked for " +
      Join(candidates, ", ") +
      "); comparison.csv and comparison.md were written, the plots were not");
}

// $ASGD_PYTHON alone if set; else python3 on PATH, then /usr/bin/python3 (Debian's, which
// has python3-matplotlib when another python3 comes first on PATH).
std::vector<std::string> PythonCandidates() {
  const char* env = std::getenv("ASGD_PYTHON");
  if (env != nullptr && *env != '\0') return {env};
  std::vector<std::string> found;
  const char* path = std::getenv("PATH");
  for (const auto& dir : Split(path != nullptr ? path : "", ':')) {
    if (dir.empty()) continue;
    const std::string p = JoinPath(dir, "python3");
    if (::access(p.c_str(), X_OK) == 0) {
      found.push_back(p);
      break;
    }
  }
  const std::string system = "/usr/bin/python3";
  if (::access(system.c_str(), X_OK) == 0 &&
      std::find(found.begin(), found.end(), system) == found.end()) {
    found.push_back(system);
  }
  return found;
}

// Runs one python3 on the script; returns its exit status and its output lines.
int RunPlotScript(const std::string& python, const std::string& script,
                  const std::string& comparison_csv, const std::string& out_dir,
                  std::vector<std::string>* lines) {
  ChildOptions o;
  o.argv = {python, script, "--out", out_dir, comparison_csv};
  o.env = {"MPLBACKEND=Agg"};
  auto child = ChildProcess::Start(o);
  const auto deadline = std::chrono::steady_clock::now() + kPlotTimeout;
  while (child->output_fd() >= 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      child->Terminate(std::chrono::milliseconds(2000));
      throw InputError("asgd compare: " + script + " did not finish within " +
                       std::to_string(kPlotTimeout.count()) + " s");
    }
    pollfd p{child->output_fd(), POLLIN, 0};
    ::poll(&p, 1, 200);
    if (!child->ReadLines([&](std::string_view l) { lines->emplace_back(l); })) break;
  }
  auto status = child->Wait(std::chrono::milliseconds(10000));
  if (!status) status = child->Terminate(std::chrono::milliseconds(2000));
  return *status;
}

void DrawPlots(const std::string& comparison_csv, const std::string& out_dir, std::ostream& out) {
  const std::string kept = "; comparison.csv and comparison.md were written, the plots were not";
  const std::string script = PlotScript();
  const std::vector<std::string> pythons = PythonCandidates();
  if (pythons.empty()) {
    throw InputError(
        "asgd compare: python3 not found (searched PATH and /usr/bin/python3; "
        "install python3 and python3-matplotlib, or set ASGD_PYTHON)" +
        kept);
  }
  for (const auto& python : pythons) {
    std::vector<std::string> lines;
    const int status = RunPlotScript(python, script, comparison_csv, out_dir, &lines);
    if (status == kPlotExitNoMatplotlib) continue;
    if (status != 0) {
      const std::string last = lines.empty() ? "no output" : lines.back();
      throw InputError("asgd compare: plotting failed (" + python + " " + script +
                       " exited with status " + std::to_string(status) + "): " + last + kept);
    }
    for (const auto& l : lines) out << l << "\n";
    return;
  }
  throw InputError("asgd compare: matplotlib is not installed for " + Join(pythons, " or ") +
                   " (install python3-matplotlib, e.g. ./setup.sh deps, or set ASGD_PYTHON)" +
                   kept);
}

// ---- Tables --------------------------------------------------------------------

std::string Label(const RunSummary& s, const std::map<std::string, std::string>& config,
                  const std::string& label_key) {
  if (!label_key.empty()) {
    auto it = config.find(label_key);
    if (it == config.end()) {
      throw InputError(JoinPath(s.dir, "config.ini") + ": no key " + label_key +
                       " (asked for by --label)");
    }
    return it->second;
  }
  auto it = config.find("experiment.name");
  if (it != config.end() && !it->second.empty()) return it->second;
  return s.Get("run_id");
}

// A column of comparison.md: a summary.csv metric, how its cells are written, and which
// way is better (+1 higher, -1 lower, 0 neither: no "not separated" mark).
struct MetricColumn {
  std::string header;
  std::string column;
  int better = 0;
  std::string (*format)(double) = nullptr;
};

std::string Accuracy(double v) { return MarkdownNumber(v, 4); }
std::string Whole(double v) { return MarkdownNumber(v, 0); }
std::string Staleness(double v) { return MarkdownNumber(v, 2); }

std::vector<MetricColumn> MarkdownColumns(const std::string& target_header) {
  return {{"final test acc.", "final_test_accuracy", +1, Accuracy},
          {"best test acc.", "best_test_accuracy", +1, Accuracy},
          {target_header, "time_to_target_s", -1, MarkdownSeconds},
          {"wall time (s)", "wall_time_s", -1, MarkdownSeconds},
          {"samples/s", "samples_per_s", +1, Whole},
          {"staleness mean", "staleness_mean", 0, Staleness},
          {"staleness p99", "staleness_p99", 0, Whole},
          {"dropped pushes", "dropped_pushes", 0, Whole}};
}

// A cell: the value (one seed) or mean ± half-width; "(k of n)" when only k of the row's
// n runs have a value (e.g. reached the target); † when the seeds do not separate it from
// the best row's.
std::string GroupCell(const MetricColumn& c, const MeanInterval& m, std::size_t runs,
                      bool not_separated) {
  if (m.n == 0) return "—";
  std::string cell = c.format(m.mean);
  if (m.HasInterval()) cell += " ± " + c.format(m.half_width);
  if (static_cast<std::size_t>(m.n) < runs)
    cell += " (" + std::to_string(m.n) + " of " + std::to_string(runs) + ")";
  if (not_separated) cell += " †";
  return cell;
}

std::string ComparisonMarkdown(const std::vector<RunSummary>& runs, const SeedGrouping& groups) {
  std::set<std::string> targets;
  for (const auto& r : runs) targets.insert(r.Get("target_accuracy"));
  std::string target_header = "time to target (s)";
  if (targets.size() == 1) {
    const double t = runs.front().Number("target_accuracy");
    if (std::isfinite(t) && t > 0) target_header = "time to " + CsvCell(t) + " (s)";
  }
  const std::vector<MetricColumn> columns = MarkdownColumns(target_header);
  // stats[g][c]: the interval of column c over group g's runs.
  std::vector<std::vector<MeanInterval>> stats(groups.labels.size());
  for (std::size_t g = 0; g < groups.labels.size(); ++g) {
    for (const auto& c : columns) {
      std::vector<double> values;
      for (std::size_t i : groups.members[g]) values.push_back(runs[i].Number(c.column));
      stats[g].push_back(Interval95(values));
    }
  }
  std::ostringstream md;
  md << "# Comparison of " << runs.size() << (runs.size() == 1 ? " run" : " runs") << "\n\n"
     << "Written by `asgd compare`; comparison.csv beside this file has every column of\n"
     << "each run's summary.csv. A row is one configuration: runs that differ only in\n"
     << "experiment.seed are one row (seeds: how many); its cells are the mean ± the\n"
     << "half-width of the 95 % confidence interval (Student's t), or the value for one\n"
     << "seed. Accuracies are fractions of the test set, times are seconds of training wall\n"
     << "time, staleness is in updates (ssp: clocks); — means not applicable or not reached.\n\n";
  if (const std::string note = MixedTimesNote(runs); !note.empty()) md << note << ".\n\n";
  md << "| label | seeds | algorithm | workers |";
  for (const auto& c : columns) md << " " << c.header << " |";
  md << "\n| --- | ---: | --- | ---: |";
  for (std::size_t c = 0; c < columns.size(); ++c) md << " ---: |";
  md << "\n";
  bool marked = false;
  for (std::size_t g = 0; g < groups.labels.size(); ++g) {
    const RunSummary& first = runs[groups.members[g].front()];
    md << "| " << MarkdownCell(groups.labels[g]) << " | " << groups.members[g].size() << " | "
       << MarkdownCell(first.Get("algorithm")) << " | " << MarkdownCell(first.Get("workers"))
       << " |";
    for (std::size_t c = 0; c < columns.size(); ++c) {
      bool not_separated = false;
      if (columns[c].better != 0) {
        std::vector<MeanInterval> column;
        for (const auto& row : stats) column.push_back(row[c]);
        const std::ptrdiff_t best = BestRow(column, columns[c].better > 0);
        not_separated = best >= 0 && static_cast<std::size_t>(best) != g &&
                        NotSeparated(stats[g][c], column[static_cast<std::size_t>(best)]);
      }
      marked = marked || not_separated;
      md << " " << GroupCell(columns[c], stats[g][c], groups.members[g].size(), not_separated)
         << " |";
    }
    md << "\n";
  }
  if (marked) {
    md << "\n† its 95 % interval overlaps the interval of the best row in this column: these\n"
       << "seeds do not separate the two (a row of one seed has no interval and is never "
          "marked).\n";
  }
  return md.str();
}

}  // namespace

// SummaryColumns() is defined with the writer, in metrics.cc.

bool IsSimulated(const RunSummary& run) { return run.Get(kTimeModel).starts_with("virtual"); }

std::string MixedTimesNote(const std::vector<RunSummary>& runs) {
  std::size_t simulated = 0;
  for (const RunSummary& r : runs) simulated += IsSimulated(r) ? 1 : 0;
  if (simulated == 0 || simulated == runs.size()) return "";
  return ::asgd::internal::StrCat(
      "note: ", simulated, " of these ", runs.size(),
      " runs are simulated (transport sim: times in virtual seconds) and the others real "
      "(wall seconds); their times and rates are not comparable");
}

std::string RunSummary::Get(const std::string& column) const {
  auto it = values.find(column);
  return it == values.end() ? std::string() : it->second;
}

double RunSummary::Number(const std::string& column) const {
  auto v = ParseDouble(Get(column));
  return v ? *v : std::nan("");
}

RunSummary ReadRunSummary(const std::string& dir) {
  const std::string path = JoinPath(dir, "summary.csv");
  if (!IsDirectory(dir)) throw InputError(dir + ": no such folder (expected a run folder)");
  if (!FileExists(path)) {
    throw InputError(path + ": no such file (expected a run folder holding summary.csv)");
  }
  const std::vector<std::string> lines = ReadLines(path);
  if (lines.empty()) throw InputError(path + ": empty (expected a header and one row)");
  RunSummary s;
  s.dir = dir;
  s.columns = ParseCsvLine(lines[0]);
  std::set<std::string> seen;
  for (const auto& c : s.columns) {
    if (!seen.insert(c).second) {
      throw InputError(path + ": column " + QuoteForMessage(c) + " appears twice in the header");
    }
  }
  for (const auto& c : SummaryColumns()) {
    if (!seen.count(c) && c == kTimeModel) continue;  // runs of before it: wall time
    if (!seen.count(c)) {
      throw InputError(path + ": the header lacks column " + QuoteForMessage(c) +
                       " (expected the summary.csv columns of results/README.md)");
    }
  }
  if (lines.size() != 2) {
    throw InputError(path + ": expected one row after the header, found " +
                     std::to_string(lines.size() - 1));
  }
  const std::vector<std::string> cells = ParseCsvLine(lines[1]);
  if (cells.size() != s.columns.size()) {
    throw InputError(::asgd::internal::StrCat(path, ":2: expected ", s.columns.size(),
                                              " cells as in the header, found ", cells.size()));
  }
  for (std::size_t i = 0; i < cells.size(); ++i) s.values[s.columns[i]] = cells[i];
  if (!seen.count(kTimeModel)) {
    s.columns.push_back(kTimeModel);
    s.values[kTimeModel] = "wall";
  }
  return s;
}

std::map<std::string, std::string> ReadRunConfig(const std::string& dir) {
  std::map<std::string, std::string> values;
  const std::string path = JoinPath(dir, "config.ini");
  if (!FileExists(path)) return values;
  std::string section;
  for (const auto& raw : ReadLines(path)) {
    const std::string_view line = Trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = std::string(Trim(line.substr(1, line.size() - 2)));
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string key(Trim(line.substr(0, eq)));
    values[section.empty() ? key : section + "." + key] = std::string(Trim(line.substr(eq + 1)));
  }
  return values;
}

std::vector<std::string> ExpandRunDirs(const std::vector<std::string>& args) {
  std::vector<std::string> dirs;
  std::set<std::string> seen;
  auto add = [&](const std::string& d) {
    if (seen.insert(fs::weakly_canonical(d).string()).second) dirs.push_back(d);
  };
  for (const auto& given : args) {
    const std::string arg = StripTrailingSlashes(given);
    if (!fs::exists(arg)) throw InputError(arg + ": no such folder (expected a run folder)");
    if (!IsDirectory(arg)) {
      throw InputError(arg +
                       ": not a folder (expected a run folder holding summary.csv, or "
                       "a sweep or suite folder)");
    }
    if (FileExists(JoinPath(arg, "summary.csv"))) {
      add(arg);
      continue;
    }
    const std::string root = IsDirectory(JoinPath(arg, "runs")) ? JoinPath(arg, "runs") : arg;
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(root)) {
      if (entry.is_directory() && FileExists((entry.path() / "summary.csv").string())) {
        found.push_back(entry.path().string());
      }
    }
    if (found.empty()) {
      throw InputError(arg +
                       ": no summary.csv (expected a run folder, or a sweep or suite "
                       "folder whose subfolders or runs/ subfolders are run folders)");
    }
    std::sort(found.begin(), found.end());
    for (const auto& f : found) add(f);
  }
  return dirs;
}

std::vector<RunSummary> CompareRuns(const CompareOptions& options, std::ostream& out) {
  ASGD_CHECK(options.labels.empty() || options.labels.size() == options.run_dirs.size());
  if (options.run_dirs.empty()) throw InputError("asgd compare: no run folders to compare");
  std::vector<RunSummary> runs;
  std::vector<std::string> labels;
  std::vector<std::map<std::string, std::string>> configs;
  for (std::size_t i = 0; i < options.run_dirs.size(); ++i) {
    runs.push_back(ReadRunSummary(options.run_dirs[i]));
    configs.push_back(ReadRunConfig(options.run_dirs[i]));
    labels.push_back(options.labels.empty() ? Label(runs.back(), configs.back(), options.label_key)
                                            : options.labels[i]);
  }
  const SeedGrouping groups = GroupSeeds(labels, configs);
  // Every column of every summary, documented ones first, in order of appearance.
  std::vector<std::string> columns = {"label", "run_dir", "group"};
  for (const auto& r : runs) {
    for (const auto& c : r.columns) {
      if (std::find(columns.begin(), columns.end(), c) == columns.end()) columns.push_back(c);
    }
  }
  std::ostringstream csv;
  CsvWriter writer(csv, columns);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::vector<std::string> cells = {CsvCell(labels[i]), CsvCell(runs[i].dir),
                                      CsvCell(groups.labels[groups.group[i]])};
    for (std::size_t c = 3; c < columns.size(); ++c) {
      auto it = runs[i].values.find(columns[c]);
      cells.push_back(it == runs[i].values.end() ? "nan" : CsvCell(it->second));
    }
    writer.WriteRow(cells);
  }
  MakeDirs(options.out_dir);
  const std::string csv_path = JoinPath(options.out_dir, "comparison.csv");
  const std::string md_path = JoinPath(options.out_dir, "comparison.md");
  WriteFileAtomic(csv_path, csv.str());
  out << "wrote " << csv_path << "\n";
  WriteFileAtomic(md_path, ComparisonMarkdown(runs, groups));
  out << "wrote " << md_path << "\n";
  if (const std::string note = MixedTimesNote(runs); !note.empty()) out << note << "\n";
  out.flush();
  if (options.plots) DrawPlots(csv_path, options.out_dir, out);
  return runs;
}

std::string MarkdownNumber(double v, int digits) {
  if (std::isnan(v)) return "—";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string MarkdownSeconds(double seconds) {
  if (!std::isfinite(seconds) || seconds == 0) return MarkdownNumber(seconds, 0);
  const double a = std::abs(seconds);
  if (a >= 100) return MarkdownNumber(seconds, 0);
  // Digits after the point for three significant ones.
  const int digits = std::max(0, 2 - static_cast<int>(std::floor(std::log10(a))));
  return MarkdownNumber(seconds, digits);
}

std::string MarkdownCell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

int CompareCommand(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description desc("Options");
  desc.add_options()("help,h", "describe this command")(
      "out", po::value<std::string>(), "folder to write the comparison into (created)")(
      "label", po::value<std::string>(),
      "label each run by this config key of its config.ini, e.g. algorithm.name "
      "(default: experiment.name)")("no-plots", "write comparison.csv and comparison.md only")(
      "run", po::value<std::vector<std::string>>(), "run folders");
  po::positional_options_description pos;
  pos.add("run", -1);
  auto vm = ParseCommandLine(args, desc, pos, "compare");
  const std::string usage =
      "usage: asgd compare RUN_DIR... --out DIR [--label section.key] [--no-plots]\n\n"
      "Compares run folders (or sweep and suite folders, whose runs are taken) and writes\n"
      "DIR/comparison.csv (every summary.csv column, plus label and run_dir), comparison.md\n"
      "(a table for a paper) and the plots accuracy.png, accuracy_samples.png,\n"
      "accuracy_bytes.png, staleness.png and throughput.png (python3 with matplotlib;\n"
      "800x500 pixels).";
  if (vm.count("help")) {
    out << usage << "\n" << desc;
    return kExitOk;
  }
  if (!vm.count("run"))
    throw InputError("asgd compare: missing RUN_DIR (see `asgd compare --help`)");
  if (!vm.count("out"))
    throw InputError("asgd compare: missing --out DIR (see `asgd compare --help`)");
  CompareOptions options;
  options.out_dir = vm["out"].as<std::string>();
  if (vm.count("label")) {
    options.label_key = vm["label"].as<std::string>();
    ExperimentSchema().Get(options.label_key);  // an unknown key, with a suggestion
  }
  options.plots = !vm.count("no-plots");
  options.run_dirs = ExpandRunDirs(vm["run"].as<std::vector<std::string>>());
  CompareRuns(options, out);
  return kExitOk;
}

}  // namespace asgd::experiments
