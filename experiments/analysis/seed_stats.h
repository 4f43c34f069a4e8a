// Runs that differ only in their seed, and what their values say: the mean, the sample
// standard deviation and a 95 % confidence interval of the mean (Student's t), and
// whether two such intervals separate two means. Pure functions; the comparison tables
// (compare.h), the sweep tables and `asgd tune` (experiments/batch) use them.
//
// The interval is mean ± t(0.975, n − 1) · s / √n, with s the sample standard deviation
// (n − 1 in its denominator): Student's t interval for the mean of n independent runs.
// With 3 seeds t = 4.303 and the half-width is about 2.5 s: wide, on purpose.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace asgd::experiments {

// The 0.975 quantile of Student's t distribution with df degrees of freedom (df >= 1):
// 12.706 for 1, 4.303 for 2, 3.182 for 3, tending to 1.960. Exact for every df (the
// inverse of the t distribution function, not a table lookup).
double StudentT975(int64_t df);

// The mean of n values with its 95 % interval. Fields are nan where undefined: every
// one when n = 0; std and half_width when n = 1 (one seed has no interval).
struct MeanInterval {
  int64_t n = 0;
  double mean = 0, std = 0, half_width = 0;
  bool HasInterval() const;  // n >= 2
  double Low() const { return mean - half_width; }
  double High() const { return mean + half_width; }
};
// Over the values that are not nan.
MeanInterval Interval95(const std::vector<double>& values);

// True when both have an interval and the intervals share a point: the seeds do not
// separate the two means. Non-overlap of two 95 % intervals is the stricter of the two
// tests (for equal standard errors it means a difference of at least 2.77 standard errors
// of the difference, p ~ 0.006 for normal values), so "not separated" does not mean
// "equal": it means these seeds cannot tell.
bool NotSeparated(const MeanInterval& a, const MeanInterval& b);

// Config keys that name or place a run without changing what it computes; runs that
// differ only in these and experiment.seed are seeds of one configuration.
bool IsSeedNeutralKey(const std::string& key);

// Groups runs by their resolved config (section.key -> value, as read from config.ini)
// without experiment.seed and the seed-neutral keys; model.device = cuda:N counts as
// cuda, so seeds placed on different GPUs stay one group. A run with an empty config (no
// config.ini) is a group of its own. Returns each run's group number, numbered by first
// appearance from 0.
std::vector<std::size_t> SeedGroups(const std::vector<std::map<std::string, std::string>>& configs);

// Runs grouped by SeedGroups, with a label per group: its runs' distinct labels joined by
// ", " (seeds of a sweep point share one), made unique with " #2", " #3", ...
struct SeedGrouping {
  std::vector<std::size_t> group;                 // per run: its group
  std::vector<std::vector<std::size_t>> members;  // per group: its runs, in order
  std::vector<std::string> labels;                // per group
};
SeedGrouping GroupSeeds(const std::vector<std::string>& labels,
                        const std::vector<std::map<std::string, std::string>>& configs);

// The row with the best mean (the highest, or the lowest) among rows with a value; -1
// when none has one. Ties: the first.
std::ptrdiff_t BestRow(const std::vector<MeanInterval>& rows, bool higher);

}  // namespace asgd::experiments
