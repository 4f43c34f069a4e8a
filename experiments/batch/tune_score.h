// The pure parts of `asgd tune` (batch.h describes the command): grid value specs, the
// metrics a tune scores runs by, the ranking with its not-reached rule, and the edge rule.
// No file, process or config access here; batch_tune.cc reads the runs and calls these.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace asgd::experiments::batch {

// ---- Grid values ------------------------------------------------------------------

// How a grid axis was given, which sets the step the edge rule takes beyond it.
enum class Spacing {
  kList,    // v1,v2,... as given (';' between values when values hold commas)
  kLog,     // log:LO:HI:N: N values from LO to HI, equal ratios (LO, HI > 0, N >= 2)
  kLinear,  // lin:LO:HI:N: N values from LO to HI, equal differences (N >= 2)
};

struct AxisValues {
  std::vector<std::string> values;  // in the order given; ranges from LO to HI
  Spacing spacing = Spacing::kList;
  double step = 0;  // kLog: the ratio of neighbours; kLinear: their difference
};

// The values of one --grid axis: "log:1e-3:1:7", "lin:0:0.9:4" or a list ("0.1,0.2";
// "64,64;256,256" for a list-valued key). Range values are written with 6 significant
// digits ("0.00316228"), the ends exactly as LO and HI would be. Throws InputError naming
// key and spec for: an empty list or value, a value given twice, a range that is not
// KIND:LO:HI:N, N < 2, LO >= HI, a log range with an end <= 0.
AxisValues ExpandGridSpec(const std::string& key, const std::string& spec);

// A number as grid values and labels write it: 6 significant digits, no trailing zeros.
std::string GridNumber(double v);

// ---- The edge rule ----------------------------------------------------------------

enum class Edge { kNone, kLow, kHigh };

// Where value lies among the values of its axis tried so far: kLow / kHigh when it is
// their smallest / largest number, kNone when it is inside, when fewer than two values
// were tried, or when a tried value is not a number (a choice such as an optimizer).
Edge EdgeOf(const std::vector<std::string>& tried, const std::string& value);

// The value one grid step beyond `edge` of the tried values: a log axis multiplies (or
// divides) the edge by its ratio, a linear axis adds (or subtracts) its difference, a list
// continues the spacing of its two values nearest the edge, by their ratio when both are
// positive and by their difference otherwise. With integer, the value is rounded away
// from the edge (and moves by at least 1). nullopt for kNone.
std::optional<std::string> StepBeyond(const AxisValues& axis, const std::vector<std::string>& tried,
                                      Edge edge, bool integer);

// ---- Metrics and scores -------------------------------------------------------------

struct TuneMetric {
  std::string name;           // as given to --metric
  std::string column;         // what it reads (summary.csv column or convergence.csv)
  std::string unit;           // for tables: "s", "epochs", "bytes", "" (a fraction)
  bool needs_target = false;  // a *_to_target metric: experiment.target_accuracy > 0
  bool lower_is_better = false;
};

// time_to_target, epochs_to_target, bytes_to_target, best_accuracy, final_accuracy.
const std::vector<TuneMetric>& TuneMetrics();
// Throws InputError naming the metric and the ones there are.
const TuneMetric& FindTuneMetric(const std::string& name);

// One evaluation of a run (a convergence.csv row).
struct EvalRow {
  double epoch = 0;
  double updates = 0;
  double test_accuracy = 0;
};

// What a tune reads of a run.
struct RunRecord {
  bool has_summary = false;  // summary.csv was left and read
  bool completed = false;    // it exited 0 and its summary says completed
  double target = 0;         // experiment.target_accuracy
  double time_to_target_s = 0, best_accuracy = 0, final_accuracy = 0;  // nan when absent
  double bytes_pushed = 0, updates = 0;                                // summary.csv
  std::vector<EvalRow> rows;                                           // convergence.csv
};

enum class Outcome {
  kScored,      // completed, with a value of the metric (for *_to_target: reached it)
  kNotReached,  // completed without reaching the target
  kFailed,      // left a summary but did not complete (e.g. diverged)
  kNoRecord,    // left no summary (crashed, killed, never ran)
};
const char* OutcomeName(Outcome o);  // "scored", "not reached", "failed", "no record"

struct RunScore {
  Outcome outcome = Outcome::kNoRecord;
  double value = 0;          // the metric (nan unless kScored)
  double best_accuracy = 0;  // what ranks runs that were not scored (nan without a record)
};

// The metric of one run. *_to_target read the first evaluation at or above the target:
// time_to_target_s of summary.csv (the run's own clock: virtual seconds in the simulator,
// training time otherwise), that row's epoch, and that row's updates × the run's bytes
// per update (bytes_pushed / updates: every push of a run has one size).
RunScore ScoreRun(const TuneMetric& metric, const RunRecord& record);

// Several seeds of one value as one score (a SLURM tune, which runs every value with
// every seed): scored when every seed that left a record is, with the mean of their
// values; otherwise the worst outcome among those seeds (no record only when none left
// one); best_accuracy the mean over the seeds that have one.
RunScore MeanScore(const std::vector<RunScore>& seeds);

// Indices of scores, best first: scored runs by their value (ties: the higher best
// accuracy, then the earlier index), then runs not reached and failed ones together, by
// their best accuracy, then runs without a record, in index order. A run that never
// reached the target thus ranks after every run that did, whatever its accuracy.
std::vector<std::size_t> RankScores(const std::vector<RunScore>& scores, bool lower_is_better);

}  // namespace asgd::experiments::batch
