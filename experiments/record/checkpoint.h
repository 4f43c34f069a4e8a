// A run's checkpoints (issue: checkpoints and resume). In the run folder:
//
//   checkpoints/step-000000012345/shard-0.ckpt ...   one file per shard (ps/checkpoint.h:
//                                                    values, version, the rule's state)
//   checkpoints/step-000000012345/manifest.json      written last
//
// The folder's number is what the run's `updates` count: a run on the parameter server's
// folder is step-<updates applied> (pushes, summed over the workers); a run on a
// collective's (allreduce_sgd, local_sgd, dpsgd) is round-<communication rounds> (each
// rank's pushes, the same number in every rank), e.g. checkpoints/round-000000000030/.
// Before collective checkpoints were named by rounds they were step-<pushes summed over
// the ranks> with the same content: such a folder still loads, and any round- folder is
// newer than every step- folder (a run folder holds both only when a run on a collective
// saved by pushes was resumed by a build that saves by rounds).
//
// The manifest names the step (updates applied), for a collective also the rounds, samples,
// training time, the CSV rows written up to then, the config hash, each shard file with its
// SHA-256 and version, the staleness histogram and the workers' counters. Every file goes
// through
// WriteFileAtomic (temporary name, fsync, rename, fsync of the folder): a crash mid-save
// leaves a folder without a manifest, which loading ignores and the next save removes,
// and the previous checkpoint intact.
//
// Loading takes the newest checkpoint whose manifest and shard files all verify; a newer
// one that does not is skipped with a warning naming it. A checkpoint of another
// configuration (the hash of the data, model, algorithm and cluster sections differs) is
// refused with one line.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "experiments/config/config.h"
#include "experiments/record/metrics.h"
#include "experiments/record/run_core.h"
#include "ps/checkpoint.h"
#include "ps/shard_core.h"

namespace asgd::experiments {

struct CheckpointManifest {
  int64_t step = 0;  // updates applied (pushes, summed over the workers) when it was taken
  // A run on a collective: the communication rounds when it was taken (each rank's pushes,
  // the same in every rank; step = rounds x workers), which name its folder. -1: a run on
  // the parameter server, or a collective's checkpoint of before the field (named by step).
  int64_t rounds = -1;
  int64_t steps = 0;    // worker steps
  int64_t samples = 0;  // training examples consumed
  double time_s = 0;    // training time (the runs' time_s) when it was taken
  int64_t convergence_rows = 0;
  int64_t staleness_rows = 0;
  double best_test_accuracy = 0;
  double time_to_target_s = -1;
  int resumes = 0;  // how many times the run was resumed before this checkpoint
  std::string config_hash;
  std::string algorithm;
  struct Shard {
    std::string file;    // relative to the checkpoint folder
    std::string sha256;  // of the file
    uint64_t version = 0;
    int64_t elements = 0;
  };
  std::vector<Shard> shards;
  std::map<uint32_t, std::map<int64_t, int64_t>> staleness_histogram;
  std::vector<WorkerMetrics> workers;
};

// A manifest naming the run (algorithm, config hash, resumes: how many times the run was
// resumed before it) with the recorder's account so far (convergence rows, best accuracy,
// time to target); the caller fills in the counters and the shards.
CheckpointManifest ManifestOfRun(const std::string& algorithm, const std::string& config_hash,
                                 int resumes, const RunRecorder& recorder);

// Sets the manifest's account from the recorder's so far: convergence rows, best
// accuracy, time to target (ManifestOfRun's; again when a checkpoint completes later).
void SetManifestAccount(CheckpointManifest& m, const RunRecorder& recorder);

// Where the run stands at a checkpoint, as its manifest counts it.
struct RunPosition {
  int64_t pushes = 0;   // the manifest's step: pushes (a collective's: every rank's, summed)
  int64_t steps = 0;    // worker steps, summed
  int64_t samples = 0;  // examples the workers trained on
  double time_s = 0;    // training time
};

// Fills a manifest's counters from `at` and the staleness account from `staleness`
// (null: none): the rows staleness.csv holds so far and its histogram. Every driver's
// checkpoint (threads, collective, the multi-process coordinator) fills them here; the
// caller flushes staleness before the file must hold those rows.
void SetManifestCounters(CheckpointManifest& m, const RunPosition& at,
                         const StalenessRecorder* staleness);

// Where a checkpoint was taken, in the unit its folder counts: "round 30" (a run on a
// collective) or "update 120".
std::string CheckpointPosition(const CheckpointManifest& manifest);

struct LoadedCheckpoint {
  std::string dir;  // the checkpoint's folder
  CheckpointManifest manifest;
  std::vector<ps::ShardSnapshot> shards;  // in shard order
};

// SHA-256 (hex) of the resolved keys of the sections that decide what a checkpoint holds
// and how training continues from it: [data], [model], [algorithm] and the cluster's
// shards, placement and transport. [experiment] (epochs, stop rules, out_dir) and
// [metrics] may change between a run and its resumption.
std::string TrainingConfigHash(const Config& config);

class Checkpointer {
 public:
  // run_path: the run folder; keep: how many complete checkpoints to keep (>= 1).
  Checkpointer(std::string run_path, int keep);

  // Writes the shard files, then the manifest (filling its shards entries), then
  // removes older checkpoints beyond `keep` and incomplete ones. Returns the folder.
  // Throws IoError (the previous checkpoints are then intact).
  std::string Save(CheckpointManifest manifest, const std::vector<ps::ShardSnapshot>& shards);

  // The two halves of Save, for shards that save themselves (multi-process runs: each
  // ps writes its file with WriteShardFile into Folder(manifest), the coordinator then
  // writes the manifest with their entries).
  // Folder: round-<manifest.rounds> when rounds >= 0, else step-<manifest.step>.
  std::string Folder(const CheckpointManifest& manifest) const;
  std::string WriteManifest(const CheckpointManifest& manifest);

 private:
  std::string root_;
  int keep_;
};

// Writes shard `index`'s file into a checkpoint folder (creating it) and returns its
// manifest entry. Throws IoError.
CheckpointManifest::Shard WriteShardFile(const std::string& folder, std::size_t index,
                                         const ps::ShardSnapshot& snapshot,
                                         const std::string& rule_name);

// The newest valid checkpoint of a run folder. Throws ConfigError
// ("--resume", run_path, ...) when there is none, DataError when none verifies (naming
// the newest and its problem), ConfigError when the newest valid one is of another
// configuration.
LoadedCheckpoint LoadNewestCheckpoint(const std::string& run_path, const std::string& config_hash);

// staleness.csv written before its columns oldest_version, oldest_staleness and dropped
// (the first eight columns only): rewritten with them (oldest = pulled, dropped = 0: such
// rows were applied or accepted pushes of one version), so that a resumed run appends rows
// of the current schema under a header that names them. A file of the current schema is
// left untouched. Throws DataError for another header or a row of another width, IoError
// if the file cannot be rewritten. Call it before TruncateCsv on a resumed staleness.csv.
void UpgradeStalenessCsv(const std::string& path);

// convergence.csv written before its last column, consensus_distance: rewritten with it
// (`nan`: no strategy of before measured it), so that a resumed run appends rows of the
// current schema. As UpgradeStalenessCsv otherwise; call it before TruncateCsv on a resumed
// convergence.csv.
void UpgradeConvergenceCsv(const std::string& path);

// staleness.csv of a run resumed from a checkpoint whose shards were saved one by one
// (multi-process runs): upgrades it (UpgradeStalenessCsv), then keeps exactly the rows of
// the pushes the saved shards contain (applied_version < that shard's saved version, dropped
// pushes included), in their order, and drops the others (pushes after the save). Returns
// what was kept; the histogram counts the kept rows that were not dropped (as
// StalenessRecorder's). Throws DataError for a malformed row, IoError if the file cannot be
// rewritten.
struct KeptStaleness {
  int64_t rows = 0;
  std::map<uint32_t, std::map<int64_t, int64_t>> histogram;  // worker -> staleness -> count
};
KeptStaleness FilterStalenessCsv(const std::string& path,
                                 const std::vector<uint64_t>& shard_versions);

// Keeps the header and the first `rows` rows of a CSV file (a resumed run appends after
// them). Throws DataError if the file has fewer rows, IoError if it cannot be rewritten.
void TruncateCsv(const std::string& path, int64_t rows);

}  // namespace asgd::experiments
