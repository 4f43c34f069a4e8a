// The schema of every configuration key asgd understands (see config_keys.cc for the
// list with defaults and documentation; `asgd run --help-config` prints it).
#pragma once

#include <array>
#include <string_view>

#include "experiments/config/config.h"

namespace asgd::experiments {

const Schema& ExperimentSchema();

// algorithm.workers: at most kMaxSimWorkers simulated workers (cluster.transport = sim,
// which shares their scratch: experiments/run/worker_loop.h), at most kMaxRealWorkers
// threads or processes.
inline constexpr int kMaxSimWorkers = 10000;
inline constexpr int kMaxRealWorkers = 1024;

// What a checkpoint's training key (TrainingConfigHash, experiments/record/checkpoint.h)
// holds: the [data], [model] and [algorithm] sections, less the keys that say where rather
// than what (kWhereNotWhatKeys), plus the [cluster] keys that change what is trained (the
// parameters' split across shards, and whether time is simulated).
inline constexpr std::array<std::string_view, 3> kTrainingSections = {"data", "model", "algorithm"};
inline constexpr std::array<std::string_view, 2> kWhereNotWhatKeys = {"data.dir", "model.device"};
inline constexpr std::array<std::string_view, 3> kTrainingClusterKeys = {
    "cluster.shards", "cluster.placement", "cluster.transport"};

// Keys that only name, place or report a run (its folder, label, log, progress line, the
// ports of its roles under srun): runs that differ in these and the seed are seeds of one
// configuration (experiments/analysis/seed_stats.h).
inline constexpr std::array<std::string_view, 5> kSeedNeutralKeys = {
    "experiment.name", "experiment.out_dir", "experiment.progress", "experiment.log_level",
    "cluster.base_port"};

// Whether `list` holds `key`.
template <std::size_t N>
constexpr bool KeyIn(const std::array<std::string_view, N>& list, std::string_view key) {
  for (std::string_view k : list) {
    if (k == key) return true;
  }
  return false;
}

}  // namespace asgd::experiments
