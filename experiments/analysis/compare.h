// `asgd compare`: one table and a few plots over many run folders.
//
// A run folder (results/README.md) is read only through what its schema promises:
// summary.csv (required: a header holding every documented column, then exactly one
// row), config.ini (optional: the label), convergence.csv and staleness_histogram.csv
// (optional: plots; a run without them is left out of the plots that need them).
//
// CompareRuns writes, into the output folder:
//   comparison.csv   one row per run: label, run_dir, group (the label of its row in
//                    comparison.md), then every summary.csv column
//   comparison.md    a markdown table of the columns a paper reports, one row per
//                    configuration: runs whose config.ini differ only in experiment.seed
//                    (and keys that only name or place a run, seed_stats.h) are one row,
//                    with their count ("seeds") and each metric as mean ± the half-width
//                    of its 95 % confidence interval (one seed: the value; "(k of n)" when
//                    only k runs have a value, e.g. reached the target). In the accuracy,
//                    time and throughput columns, a cell whose interval overlaps the best
//                    row's is marked † (not separated by these seeds).
//   accuracy.png, accuracy_samples.png, accuracy_bytes.png, staleness.png, throughput.png
//                    drawn by experiments/plots/asgd_plots.py (matplotlib, Agg backend,
//                    800 x 500 pixels: 8 x 5 inches at 100 dpi). The accuracy plots draw a
//                    line per group: one run's curve, or for several seeds their mean
//                    (evaluations matched by their order) with a band from the lowest to
//                    the highest seed. staleness.png is skipped
//                    when no run has staleness_histogram.csv, throughput.png unless some
//                    algorithm was run at two worker counts or more.
// The script is the copy beside the asgd binary, else the source tree's; the interpreter
// $ASGD_PYTHON, else the first of python3 on PATH and /usr/bin/python3 that has
// matplotlib.
// The CSV and the markdown are written first; if plotting then fails (no python3, no
// matplotlib, the script failed) CompareRuns throws InputError naming the problem, so
// the tables are kept and the command exits 2.
//
// Errors are InputErrors naming the folder or file: a missing folder, a folder that is
// neither a run folder nor holds run folders, a summary.csv without a documented column,
// with a row of the wrong width or with other than one row.
#pragma once

#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "experiments/record/metrics.h"

namespace asgd::experiments {

// SummaryColumns(), the columns of summary.csv, comes from experiments/record/metrics.h.

// One run folder's summary.
struct RunSummary {
  std::string dir;                            // the run folder, as found
  std::vector<std::string> columns;           // summary.csv's header, in order
  std::map<std::string, std::string> values;  // column -> cell
  // Returns the cell of a column ("" if absent) and the cell as a number (nan if absent
  // or not a number).
  std::string Get(const std::string& column) const;
  double Number(const std::string& column) const;
};

// True when the run's time_model is virtual seconds (a simulated cluster, transport sim).
bool IsSimulated(const RunSummary& run);
// "" unless `runs` mix simulated and real runs; then one line saying so and that their
// times are not comparable (CompareRuns prints it and writes it into comparison.md).
std::string MixedTimesNote(const std::vector<RunSummary>& runs);

// Reads dir/summary.csv (one of before the time_model column reads as time_model =
// "wall"). Throws InputError (see above).
RunSummary ReadRunSummary(const std::string& dir);

// The key = value pairs of a run's config.ini as "section.key" -> value (comments and
// "(default)" markers dropped); empty when the file does not exist.
std::map<std::string, std::string> ReadRunConfig(const std::string& dir);

// Expands the arguments of `asgd compare` into run folders: an argument holding
// summary.csv is a run folder; otherwise its runs/ subfolder (a sweep or suite folder)
// or else the folder itself is searched for immediate subfolders holding summary.csv
// (sorted by name). Throws InputError for a missing folder or one with no run in it.
std::vector<std::string> ExpandRunDirs(const std::vector<std::string>& args);

struct CompareOptions {
  // Run folders (already expanded).
  std::vector<std::string> run_dirs;
  // Folder to write into (created).
  std::string out_dir;
  // Label of each run, by position in run_dirs; when empty, each run's label is the
  // value of label_key in its config.ini ("" = experiment.name, falling back to the
  // run_id of summary.csv).
  std::vector<std::string> labels;
  std::string label_key;
  // Draw the PNGs (with python3 and matplotlib).
  bool plots = true;
};

// Writes the comparison (see above) and prints each path written to out.
// Returns the summaries read, in run_dirs order.
std::vector<RunSummary> CompareRuns(const CompareOptions& options, std::ostream& out);

// `asgd compare RUN_DIR... --out DIR [--label KEY]`: args without the command name.
int CompareCommand(const std::vector<std::string>& args, std::ostream& out);

// Formatting shared with the sweep tables: a number rounded for a markdown table
// (digits after the point; "—" for nan).
std::string MarkdownNumber(double v, int digits);
// Seconds for a markdown table: three significant digits below 100 s, whole seconds
// above ("0.0123", "4.56", "45.6", "456"); "—" for nan.
std::string MarkdownSeconds(double seconds);
// A markdown table cell: '|' escaped, newlines removed.
std::string MarkdownCell(const std::string& text);

}  // namespace asgd::experiments
