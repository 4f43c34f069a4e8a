#include "experiments/batch/tune_score.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/strings.h"

namespace asgd::experiments::batch {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
// More values than any tune would run: a typo such as log:1e-3:1:70000 is refused.
constexpr int64_t kMaxRangeValues = 1000;

[[noreturn]] void BadSpec(const std::string& key, const std::string& spec, const std::string& why) {
  throw InputError("--grid " + key + "=" + spec + ": " + why);
}

// log:LO:HI:N and lin:LO:HI:N.
AxisValues ExpandRange(const std::string& key, const std::string& spec) {
  const std::vector<std::string> f = Split(spec, ':');
  const bool log = StartsWith(spec, "log:");
  const std::string form = log ? "log:LO:HI:N" : "lin:LO:HI:N";
  if (f.size() != 4) BadSpec(key, spec, "expected " + form);
  const auto lo = ParseDouble(f[1]), hi = ParseDouble(f[2]);
  const auto n = ParseInt64(f[3]);
  if (!lo || !hi) BadSpec(key, spec, "LO and HI must be numbers (" + form + ")");
  if (!n || *n < 2 || *n > kMaxRangeValues) {
    BadSpec(key, spec, "N must be an integer from 2 to " + std::to_string(kMaxRangeValues));
  }
  if (log && (*lo <= 0 || *hi <= 0)) {
    BadSpec(key, spec,
            "a log range needs both ends > 0 (" + std::string(*lo <= 0 ? "LO" : "HI") + " is " +
                GridNumber(*lo <= 0 ? *lo : *hi) + ")");
  }
  if (*lo >= *hi) BadSpec(key, spec, "expected LO < HI");
  AxisValues axis;
  axis.spacing = log ? Spacing::kLog : Spacing::kLinear;
  const double steps = static_cast<double>(*n - 1);
  axis.step = log ? std::pow(*hi / *lo, 1.0 / steps) : (*hi - *lo) / steps;
  for (int64_t i = 0; i < *n; ++i) {
    const double t = static_cast<double>(i) / steps;
    double v =
        log ? std::exp(std::log(*lo) + t * (std::log(*hi) - std::log(*lo))) : *lo + t * (*hi - *lo);
    if (i == 0) v = *lo;
    if (i == *n - 1) v = *hi;
    axis.values.push_back(GridNumber(v));
  }
  return axis;
}

// The numbers of values, or nullopt when one is not a number.
std::optional<std::vector<double>> Numbers(const std::vector<std::string>& values) {
  std::vector<double> out;
  for (const auto& v : values) {
    const auto d = ParseDouble(v);
    if (!d) return std::nullopt;
    out.push_back(*d);
  }
  return out;
}

int OutcomeOrder(Outcome o) { return static_cast<int>(o); }

}  // namespace

std::string GridNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

AxisValues ExpandGridSpec(const std::string& key, const std::string& spec) {
  AxisValues axis;
  if (StartsWith(spec, "log:") || StartsWith(spec, "lin:")) {
    axis = ExpandRange(key, spec);
  } else {
    // Values of list-valued keys hold commas: then ';' separates the values.
    const char sep = spec.find(';') != std::string::npos ? ';' : ',';
    for (const auto& v : Split(spec, sep)) {
      const std::string value(Trim(v));
      if (value.empty()) {
        BadSpec(key, spec, "an empty value (expected v1,v2[,...], log:LO:HI:N or lin:LO:HI:N)");
      }
      axis.values.push_back(value);
    }
  }
  for (std::size_t i = 0; i < axis.values.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (axis.values[i] == axis.values[j]) {
        BadSpec(key, spec, "value " + QuoteForMessage(axis.values[i]) + " is given twice");
      }
    }
  }
  return axis;
}

Edge EdgeOf(const std::vector<std::string>& tried, const std::string& value) {
  const auto numbers = Numbers(tried);
  const auto v = ParseDouble(value);
  if (!numbers || !v) return Edge::kNone;
  const auto [lo, hi] = std::minmax_element(numbers->begin(), numbers->end());
  if (*lo == *hi) return Edge::kNone;  // fewer than two distinct values
  if (*v <= *lo) return Edge::kLow;
  if (*v >= *hi) return Edge::kHigh;
  return Edge::kNone;
}

std::optional<std::string> StepBeyond(const AxisValues& axis, const std::vector<std::string>& tried,
                                      Edge edge, bool integer) {
  auto numbers = Numbers(tried);
  if (edge == Edge::kNone || !numbers || numbers->size() < 2) return std::nullopt;
  std::sort(numbers->begin(), numbers->end());
  numbers->erase(std::unique(numbers->begin(), numbers->end()), numbers->end());
  if (numbers->size() < 2) return std::nullopt;
  const bool high = edge == Edge::kHigh;
  const double e = high ? numbers->back() : numbers->front();
  const double next = high ? (*numbers)[numbers->size() - 2] : (*numbers)[1];
  double v = 0;
  if (axis.spacing == Spacing::kLog) {
    v = high ? e * axis.step : e / axis.step;
  } else if (axis.spacing == Spacing::kLinear) {
    v = high ? e + axis.step : e - axis.step;
  } else if (e > 0 && next > 0) {
    v = e * (e / next);  // continue the ratio of the two values at the edge
  } else {
    v = e + (e - next);
  }
  if (integer) {
    v = high ? std::max(std::ceil(v), e + 1) : std::min(std::floor(v), e - 1);
  }
  return GridNumber(v);
}

const std::vector<TuneMetric>& TuneMetrics() {
  static const std::vector<TuneMetric> kMetrics = {
      {"time_to_target", "time_to_target_s", "s", true, true},
      {"epochs_to_target", "epoch", "epochs", true, true},
      {"bytes_to_target", "bytes_pushed", "bytes", true, true},
      {"best_accuracy", "best_test_accuracy", "", false, false},
      {"final_accuracy", "final_test_accuracy", "", false, false},
  };
  return kMetrics;
}

const TuneMetric& FindTuneMetric(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& m : TuneMetrics()) {
    if (m.name == name) return m;
    names.push_back(m.name);
  }
  const std::string guess = ClosestMatch(name, names);
  throw InputError("--metric " + QuoteForMessage(name) + ": not a metric tune scores by (" +
                   (guess.empty() ? "" : "did you mean " + guess + "? ") + "expected one of " +
                   Join(names, ", ") + ")");
}

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kScored:
      return "scored";
    case Outcome::kNotReached:
      return "not reached";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kNoRecord:
      return "no record";
  }
  return "?";
}

RunScore ScoreRun(const TuneMetric& metric, const RunRecord& record) {
  RunScore s;
  s.value = kNan;
  s.best_accuracy = record.has_summary ? record.best_accuracy : kNan;
  if (!record.has_summary) return s;
  s.outcome = Outcome::kFailed;
  if (!record.completed) return s;
  double value = kNan;
  if (metric.name == "best_accuracy") {
    value = record.best_accuracy;
  } else if (metric.name == "final_accuracy") {
    value = record.final_accuracy;
  } else if (metric.name == "time_to_target") {
    value = record.time_to_target_s;
  } else {
    const auto row = std::find_if(record.rows.begin(), record.rows.end(), [&](const EvalRow& r) {
      return record.target > 0 && r.test_accuracy >= record.target;
    });
    if (row != record.rows.end()) {
      const double per_update = record.updates > 0 ? record.bytes_pushed / record.updates : 0.0;
      value = metric.name == "epochs_to_target" ? row->epoch : row->updates * per_update;
    }
  }
  s.outcome = std::isnan(value) ? Outcome::kNotReached : Outcome::kScored;
  s.value = value;
  return s;
}

RunScore MeanScore(const std::vector<RunScore>& seeds) {
  RunScore s;
  s.value = s.best_accuracy = kNan;
  double value_sum = 0, best_sum = 0;
  int recorded = 0, with_best = 0;
  for (const auto& seed : seeds) {
    if (seed.outcome == Outcome::kNoRecord) continue;
    if (recorded++ == 0 || OutcomeOrder(seed.outcome) > OutcomeOrder(s.outcome)) {
      s.outcome = seed.outcome;
    }
    value_sum += seed.value;
    if (!std::isnan(seed.best_accuracy)) {
      best_sum += seed.best_accuracy;
      ++with_best;
    }
  }
  if (recorded == 0) s.outcome = Outcome::kNoRecord;
  if (s.outcome == Outcome::kScored) s.value = value_sum / recorded;
  if (with_best > 0) s.best_accuracy = best_sum / with_best;
  return s;
}

std::vector<std::size_t> RankScores(const std::vector<RunScore>& scores, bool lower_is_better) {
  // Three classes: scored, then not reached or failed, then no record.
  auto cls = [](const RunScore& s) {
    return s.outcome == Outcome::kScored ? 0 : s.outcome == Outcome::kNoRecord ? 2 : 1;
  };
  // nan accuracies after numbers; higher accuracy first.
  auto better_accuracy = [](double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return !std::isnan(a) && std::isnan(b);
    return a > b;
  };
  std::vector<std::size_t> order(scores.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t i, std::size_t j) {
    const RunScore &a = scores[i], &b = scores[j];
    if (cls(a) != cls(b)) return cls(a) < cls(b);
    if (cls(a) == 0 && a.value != b.value) {
      return lower_is_better ? a.value < b.value : a.value > b.value;
    }
    if (cls(a) == 2) return false;
    return better_accuracy(a.best_accuracy, b.best_accuracy);
  });
  return order;
}

}  // namespace asgd::experiments::batch
