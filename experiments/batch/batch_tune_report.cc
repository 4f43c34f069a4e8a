// What `asgd tune` writes (batch.h): tune.csv, best.csv, tune.md and the winner lines.
#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <sstream>

#include "core/error.h"
#include "core/file_util.h"
#include "core/strings.h"
#include "experiments/analysis/compare.h"
#include "experiments/analysis/seed_stats.h"
#include "experiments/batch/batch_internal.h"
#include "experiments/config/exit_status.h"
#include "experiments/record/csv.h"

namespace asgd::experiments::batch {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// A point's outcome: the chosen value and the interval its confirming seeds give.
struct PointResult {
  bool chosen = false;
  ValueScore best;                   // the chosen value and its selection score
  std::vector<std::size_t> confirm;  // the runs of the interval
  MeanInterval metric, final_accuracy;
  std::vector<std::string> on_edge;  // "learning_rate (largest tried)"
  bool simulated = false;
  int selection_runs = 0, edge_runs = 0, seed_runs = 0;
  std::string separation;  // several points: best, not separated, separated, no interval
};

std::string MetricText(const TuneMetric& m, double v) {
  if (m.unit.empty()) return MarkdownNumber(v, 4);
  if (m.unit == "bytes") return std::isnan(v) ? "—" : FormatBytes(v);
  return MarkdownSeconds(v);  // three significant digits
}

std::string UnitText(const TuneMetric& m, bool simulated) {
  if (m.unit == "s") return simulated ? "virtual s" : "s";
  return m.unit;
}

std::string IntervalText(const TuneMetric& m, const MeanInterval& i) {
  if (i.n == 0) return "—";
  std::string t = MetricText(m, i.mean);
  if (i.HasInterval()) t += " ± " + MetricText(m, i.half_width);
  return t;
}

const TuneMetric& FinalAccuracy() { return FindTuneMetric("final_accuracy"); }

PointResult Summarize(const TuneState& st, std::size_t p) {
  PointResult r;
  const std::vector<ValueScore> ranked = RankedValues(st, p);
  for (const auto& t : st.runs) {
    if (t.point != p || !t.Ended()) continue;
    if (t.stage == "grid") ++r.selection_runs;
    if (StartsWith(t.stage, "edge")) ++r.edge_runs;
    if (t.stage == "seeds") ++r.seed_runs;
  }
  if (ranked.empty() || ranked[0].score.outcome == Outcome::kNoRecord) return r;
  r.chosen = true;
  r.best = ranked[0];
  // Local tunes confirm with seeds of their own; a SLURM tune with the value's own seeds.
  for (std::size_t i = 0; i < st.runs.size(); ++i) {
    if (st.runs[i].point == p && st.runs[i].stage == "seeds") r.confirm.push_back(i);
  }
  if (r.confirm.empty()) r.confirm = r.best.runs;
  std::vector<double> metric, final_accuracy;
  for (std::size_t i : r.confirm) {
    const TuneRun& t = st.runs[i];
    if (!t.Ended()) continue;
    metric.push_back(t.score.outcome == Outcome::kScored ? t.score.value : kNan);
    final_accuracy.push_back(t.final_accuracy);
    r.simulated = r.simulated || t.simulated;
  }
  r.metric = Interval95(metric);
  r.final_accuracy = Interval95(final_accuracy);
  for (std::size_t a = 0; a < st.settings.axes.size(); ++a) {
    std::vector<std::string> tried;
    for (const auto& v : ranked) tried.push_back(v.values[a]);
    const Edge e = EdgeOf(tried, r.best.values[a]);
    if (e != Edge::kNone) {
      r.on_edge.push_back(st.settings.axes[a].short_key + " (" +
                          (e == Edge::kHigh ? "largest" : "smallest") + " tried)");
    }
  }
  return r;
}

// Several points: which chosen values the intervals separate from the best point's.
void MarkSeparation(const TuneSettings& s, std::vector<PointResult>& results) {
  if (results.size() < 2) return;
  std::ptrdiff_t best = -1;
  for (std::size_t p = 0; p < results.size(); ++p) {
    const MeanInterval& m = results[p].metric;
    if (m.n == 0) continue;
    const MeanInterval* b = best < 0 ? nullptr : &results[static_cast<std::size_t>(best)].metric;
    if (b == nullptr || (s.metric->lower_is_better ? m.mean < b->mean : m.mean > b->mean)) {
      best = static_cast<std::ptrdiff_t>(p);
    }
  }
  if (best < 0) return;
  const MeanInterval& b = results[static_cast<std::size_t>(best)].metric;
  for (std::size_t p = 0; p < results.size(); ++p) {
    const MeanInterval& m = results[p].metric;
    if (static_cast<std::ptrdiff_t>(p) == best) {
      results[p].separation = "best";
    } else if (!m.HasInterval() || !b.HasInterval()) {
      results[p].separation = "no interval";
    } else {
      results[p].separation = NotSeparated(m, b) ? "not separated" : "separated";
    }
  }
}

std::string Seeds(const TuneState& st, const std::vector<std::size_t>& runs) {
  std::vector<std::string> seeds;
  for (std::size_t i : runs) seeds.push_back(std::to_string(st.runs[i].run.seed));
  return Join(seeds, ";");
}

void WriteBestCsv(const TuneState& st, const std::vector<PointResult>& results, std::ostream& out) {
  const TuneSettings& s = st.settings;
  std::vector<std::string> columns = {"point"};
  for (const auto& a : s.axes) columns.push_back(a.key);
  for (const char* c :
       {"metric", "unit", "seeds", "n", "mean", "std", "ci95", "low", "high", "final_accuracy_n",
        "final_accuracy_mean", "final_accuracy_std", "final_accuracy_ci95", "seed_list",
        "selection_outcome", "selection_score", "edge_runs", "on_edge", "separation"}) {
    columns.emplace_back(c);
  }
  std::ostringstream csv;
  CsvWriter w(csv, columns);
  for (std::size_t p = 0; p < results.size(); ++p) {
    const PointResult& r = results[p];
    std::vector<std::string> cells = {CsvCell(s.points[p].label)};
    for (std::size_t a = 0; a < s.axes.size(); ++a) {
      cells.push_back(r.chosen ? CsvCell(r.best.values[a]) : "");
    }
    const MeanInterval &m = r.metric, &f = r.final_accuracy;
    for (const std::string& c :
         {CsvCell(s.metric->name), CsvCell(UnitText(*s.metric, r.simulated)),
          CsvCell(static_cast<int64_t>(r.confirm.size())), CsvCell(m.n), CsvCell(m.mean),
          CsvCell(m.std), CsvCell(m.half_width), CsvCell(m.Low()), CsvCell(m.High()), CsvCell(f.n),
          CsvCell(f.mean), CsvCell(f.std), CsvCell(f.half_width), CsvCell(Seeds(st, r.confirm)),
          CsvCell(r.chosen ? OutcomeName(r.best.score.outcome) : "no record"),
          CsvCell(r.chosen ? r.best.score.value : kNan), CsvCell(r.edge_runs),
          CsvCell(Join(r.on_edge, "; ")), CsvCell(r.separation)}) {
      cells.push_back(c);
    }
    w.WriteRow(cells);
  }
  WriteFileAtomic(JoinPath(st.dir, "best.csv"), csv.str());
  out << "wrote " << JoinPath(st.dir, "best.csv") << "\n";
}

// The table of the chosen values, one row per point.
void ChosenTable(const TuneState& st, const std::vector<PointResult>& results, std::ostream& md) {
  const TuneMetric& m = *st.settings.metric;
  const bool simulated =
      std::any_of(results.begin(), results.end(), [](const PointResult& r) { return r.simulated; });
  const std::string unit = UnitText(m, simulated);
  md << "| point | chosen | " << m.name << (unit.empty() ? "" : " (" + unit + ")")
     << " | n | final test acc. | runs (grid + edge + seeds) | edge |\n"
     << "| --- | --- | ---: | ---: | ---: | ---: | --- |\n";
  for (std::size_t p = 0; p < results.size(); ++p) {
    const PointResult& r = results[p];
    const std::string mark = r.separation == "not separated" ? " †" : "";
    md << "| " << MarkdownCell(st.settings.points[p].label) << " | "
       << (r.chosen ? MarkdownCell(ValuesLabel(st.settings.axes, r.best.values, "")) : "—") << " | "
       << IntervalText(m, r.metric) << mark << " | " << r.metric.n << " of " << r.confirm.size()
       << " | " << IntervalText(FinalAccuracy(), r.final_accuracy) << " | " << r.selection_runs
       << " + " << r.edge_runs << " + " << r.seed_runs << " | "
       << (r.on_edge.empty() ? "" : "on the edge: " + MarkdownCell(Join(r.on_edge, ", ")))
       << " |\n";
  }
}

// Every run of one point, in rank order, then its confirming seeds.
void RunsTable(const TuneState& st, std::size_t p, std::ostream& md) {
  const TuneMetric& m = *st.settings.metric;
  md << "| rank | values | stage | seed | outcome | " << m.name
     << " | best test acc. | final test acc. | status |\n"
     << "| ---: | --- | --- | ---: | --- | ---: | ---: | ---: | --- |\n";
  auto row = [&](const std::string& rank, const TuneRun& r) {
    md << "| " << rank << " | " << MarkdownCell(ValuesLabel(st.settings.axes, r.values, ""))
       << " | " << r.stage << " | " << r.run.seed << " | " << OutcomeName(r.score.outcome) << " | "
       << MetricText(m, r.score.value) << " | " << MarkdownNumber(r.score.best_accuracy, 4) << " | "
       << MarkdownNumber(r.final_accuracy, 4) << " | "
       << MarkdownCell(r.run.ok ? "completed" : r.run.problem) << " |\n";
  };
  int rank = 0;
  for (const auto& v : RankedValues(st, p)) {
    ++rank;
    for (std::size_t i : v.runs) {
      if (st.runs[i].Ended()) row(std::to_string(rank), st.runs[i]);
    }
  }
  for (const auto& r : st.runs) {
    if (r.point == p && !r.Selects() && r.Ended()) row("", r);
  }
}

void WriteTuneMarkdown(const TuneState& st, const std::vector<PointResult>& results,
                       std::ostream& out) {
  const TuneSettings& s = st.settings;
  std::ostringstream md;
  md << "# Tune: " << s.metric->name << "\n\n"
     << "Written by `asgd " << s.command << "`. Each point's grid value ran once (seed "
     << "experiment.seed) and was scored by " << s.metric->name << " ("
     << (s.metric->lower_is_better ? "lower" : "higher")
     << " is better; a run that did not reach the target, or failed, ranks after every run "
        "that was scored, by its best accuracy). A best value on the edge of the values tried "
        "added the next value beyond it, at most "
     << s.extend << " times. The chosen value then ran with " << s.seeds
     << " more seeds, whose values give the cells: mean ± the half-width of the 95 % "
        "confidence interval, t(0.975, n − 1) · s / √n (Student's t; with 3 seeds t = 4.303, "
        "a wide interval). n counts the seeds with a value (a seed that missed the target has "
        "none).\n\n";
  md << "Grid: ";
  std::vector<std::string> grid;
  for (const auto& a : s.axes) grid.push_back(a.key + " in {" + Join(a.values, ", ") + "}");
  md << Join(grid, "; ") << ".\n\n";
  for (const auto& p : s.points) {
    if (p.axes.empty()) continue;
    std::vector<std::string> own;
    for (const auto& a : p.axes) own.push_back(a.key + " in {" + Join(a.values, ", ") + "}");
    md << "Grid of " << MarkdownCell(p.label) << ": " << Join(own, "; ") << ".\n\n";
  }
  ChosenTable(st, results, md);
  if (std::any_of(results.begin(), results.end(),
                  [](const PointResult& r) { return r.separation == "not separated"; })) {
    md << "\n† its interval overlaps the best point's: these seeds do not separate the two.\n";
  }
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    md << "\n## " << MarkdownCell(s.points[p].label) << "\n\n";
    for (const auto& note : st.notes[p]) md << "- edge: " << MarkdownCell(note) << "\n";
    if (!st.notes[p].empty()) md << "\n";
    RunsTable(st, p, md);
  }
  WriteFileAtomic(JoinPath(st.dir, "tune.md"), md.str());
  out << "wrote " << JoinPath(st.dir, "tune.md") << "\n";
}

void PrintWinners(const TuneState& st, const std::vector<PointResult>& results, std::ostream& out) {
  const TuneSettings& s = st.settings;
  for (std::size_t p = 0; p < results.size(); ++p) {
    const PointResult& r = results[p];
    out << s.command << ": " << (s.prefix_labels ? s.points[p].label + ": " : "");
    if (!r.chosen) {
      out << "no run left a record (see " << JoinPath(st.dir, "tune.csv") << ")\n";
      continue;
    }
    const std::string unit = UnitText(*s.metric, r.simulated);
    out << "best " << ValuesLabel(s.axes, r.best.values, "") << ": " << s.metric->name << " "
        << IntervalText(*s.metric, r.metric) << (unit.empty() ? "" : " " + unit) << " ("
        << (r.metric.HasInterval() ? "95 % CI, " : "") << r.metric.n << " of " << r.confirm.size()
        << " seeds), final accuracy " << IntervalText(FinalAccuracy(), r.final_accuracy)
        << (r.on_edge.empty() ? "" : "; still on the edge: " + Join(r.on_edge, ", "))
        << (r.separation.empty() || r.separation == "best" ? "" : "; " + r.separation) << "\n";
  }
}

}  // namespace

void WriteTuneCsv(const TuneState& st, std::ostream& out) {
  const TuneSettings& s = st.settings;
  std::vector<std::string> columns = {"point", "stage", "label"};
  for (const auto& a : s.axes) columns.push_back(a.key);
  for (const char* c : {"seed", "outcome", "score", "best_test_accuracy", "final_test_accuracy",
                        "rank", "status", "run_dir"}) {
    columns.emplace_back(c);
  }
  std::ostringstream csv;
  CsvWriter w(csv, columns);
  std::size_t rows = 0;
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    // Rank of each value, for the runs that chose it.
    std::vector<std::string> rank(st.runs.size());
    int n = 0;
    for (const auto& v : RankedValues(st, p)) {
      ++n;
      for (std::size_t i : v.runs) rank[i] = std::to_string(n);
    }
    for (std::size_t i = 0; i < st.runs.size(); ++i) {
      const TuneRun& r = st.runs[i];
      if (r.point != p || !r.Ended()) continue;
      std::vector<std::string> cells = {CsvCell(s.points[p].label), CsvCell(r.stage),
                                        CsvCell(r.run.label)};
      for (const auto& v : r.values) cells.push_back(CsvCell(v));
      for (const std::string& c :
           {CsvCell(r.run.seed), CsvCell(OutcomeName(r.score.outcome)), CsvCell(r.score.value),
            CsvCell(r.score.best_accuracy), CsvCell(r.final_accuracy),
            CsvCell(r.Selects() ? rank[i] : ""),
            CsvCell(r.run.ok ? std::string("completed") : r.run.problem), CsvCell(r.run.run_dir)}) {
        cells.push_back(c);
      }
      w.WriteRow(cells);
      ++rows;
    }
  }
  WriteFileAtomic(JoinPath(st.dir, "tune.csv"), csv.str());
  out << "wrote " << JoinPath(st.dir, "tune.csv") << " (" << rows << " runs)\n";
  out.flush();
}

int FinishTune(const TuneState& st, bool plots, std::ostream& out) {
  std::vector<PointResult> results;
  for (std::size_t p = 0; p < st.settings.points.size(); ++p) results.push_back(Summarize(st, p));
  MarkSeparation(st.settings, results);
  WriteBestCsv(st, results, out);
  WriteTuneMarkdown(st, results, out);
  std::vector<BatchRun> runs;
  for (const auto& r : st.runs) {
    if (r.Ended()) runs.push_back(r.run);
  }
  const std::string plot_error = CompareBatch(runs, st.dir, plots, out);
  PrintWinners(st, results, out);
  out.flush();
  for (std::size_t p = 0; p < results.size(); ++p) {
    if (!results[p].chosen) {
      throw InputError("asgd " + st.settings.command + ": no run of " +
                       st.settings.points[p].label + " left a record (see " +
                       JoinPath(st.dir, "tune.csv") + ")");
    }
  }
  if (!plot_error.empty()) throw InputError(plot_error);
  return kExitOk;
}

}  // namespace asgd::experiments::batch
