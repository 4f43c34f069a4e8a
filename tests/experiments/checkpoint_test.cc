// Checkpoints and `asgd run --resume` (experiments/record/checkpoint.h): a run saves checkpoints
// as it goes; a resumed run continues from the newest valid one, appends to the same
// CSVs (no row lost or duplicated: every applied push has exactly one staleness row), and
// refuses a corrupt, mismatched or missing checkpoint with one line and status 2.
#include "experiments/record/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct Outcome {
  int status;
  std::string out, err;
};

const char* kBase =
    "[experiment]\nname = ckpt\nprogress = off\nlog_level = warning\nepochs = 1\n"
    "checkpoint_every_steps = 15\ncheckpoint_keep = 3\n"
    "[data]\ndataset = synthetic\nsynthetic_train = 3000\nsynthetic_test = 600\n"
    "synthetic_classes = 3\nsynthetic_features = 16\n[model]\nname = mlp\nhidden = 16\n";

Outcome RunAsgd(const testing::TempDir& dir, const std::string& body,
                std::vector<std::string> extra = {}) {
  testing::WriteTestFile(dir.File("run.ini"), std::string(kBase) + body);
  std::vector<std::string> args = {"run", dir.File("run.ini"), "--set",
                                   "experiment.out_dir=" + dir.File("runs")};
  args.insert(args.end(), extra.begin(), extra.end());
  std::ostringstream out, err;
  Outcome o;
  o.status = Main(args, out, err);
  o.out = out.str();
  o.err = err.str();
  return o;
}

std::string RunFolder(const testing::TempDir& dir) {
  for (const auto& e : fs::directory_iterator(dir.File("runs"))) return e.path().string();
  return "";
}

int64_t Rows(const std::string& csv) {
  const std::string text = ReadFile(csv);
  return static_cast<int64_t>(std::count(text.begin(), text.end(), '\n')) - 1;
}

// summary.csv's value in `column`.
std::string Summary(const std::string& run, const std::string& column) {
  std::istringstream in(ReadFile(run + "/summary.csv"));
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  std::istringstream h(header), r(row);
  std::string name, value;
  while (std::getline(h, name, ',') && std::getline(r, value, ',')) {
    if (name == column) return value;
  }
  return "";
}

std::vector<fs::path> Checkpoints(const std::string& run) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints")) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The CSVs of a finished (possibly resumed) run account for every applied push once:
// staleness.csv has one row per push per shard, time and samples never go backwards in
// convergence.csv, and workers.csv's pushes add up to the summary's updates.
// Synchronous strategies (pending = workers): a worker's push in a round that the run's
// end (or a checkpoint) cut short has its row but did not count as an update.
void ExpectConsistent(const std::string& run, int shards, int pending = 0) {
  const int64_t updates = std::stoll(Summary(run, "updates"));
  EXPECT_GT(updates, 0);
  if (pending == 0) {
    EXPECT_EQ(Rows(run + "/staleness.csv"), updates * shards) << run;
  } else {
    EXPECT_GE(Rows(run + "/staleness.csv"), updates * shards) << run;
    EXPECT_LE(Rows(run + "/staleness.csv"), (updates + 2 * pending) * shards) << run;
  }
  std::istringstream conv(ReadFile(run + "/convergence.csv"));
  std::string line;
  std::getline(conv, line);
  double last_t = -1, last_samples = -1;
  while (std::getline(conv, line)) {
    std::istringstream cells(line);
    std::string t, epoch, samples;
    std::getline(cells, t, ',');
    std::getline(cells, epoch, ',');
    std::getline(cells, samples, ',');
    EXPECT_GE(std::stod(t), last_t) << line;
    EXPECT_GE(std::stod(samples), last_samples) << line;
    last_t = std::stod(t);
    last_samples = std::stod(samples);
  }
  std::istringstream workers(ReadFile(run + "/workers.csv"));
  std::getline(workers, line);
  int64_t pushes = 0;
  while (std::getline(workers, line)) {
    std::istringstream cells(line);
    std::string cell;
    for (int i = 0; i < 7; ++i) std::getline(cells, cell, ',');  // the 7th column: pushes
    pushes += std::stoll(cell);
  }
  EXPECT_EQ(pushes, updates) << run;
}

// Every checkpoint's manifest counts each applied push once: its workers' pushes add up to
// its update count (asynchronous strategies; a resumed run's earlier pushes included once).
void ExpectManifestsCountPushesOnce(const std::string& run) {
  for (const fs::path& folder : Checkpoints(run)) {
    if (!fs::exists(folder / "manifest.json")) continue;
    const auto m = nlohmann::json::parse(ReadFile((folder / "manifest.json").string()));
    int64_t pushes = 0;
    for (const auto& w : m["workers"]) pushes += w["pushes"].get<int64_t>();
    EXPECT_EQ(pushes, m["step"].get<int64_t>()) << folder;
  }
}

class Resume : public ::testing::TestWithParam<std::string> {};

// A run of one epoch with checkpoints, resumed to two epochs: it continues from the last
// checkpoint (the final one of the first run), appends, and learns.
TEST_P(Resume, ContinuesAndAppends) {
  testing::TempDir dir;
  const std::string algorithm = GetParam();
  std::string body = "[algorithm]\nname = " + algorithm + "\nworkers = 3\n";
  int shards = 2;
  if (algorithm == "agn_memory") {
    body = "[algorithm]\nname = agn\nworkers = 3\n[cluster]\ntransport = memory\n";
    shards = 1;
  } else if (algorithm == "hogwild") {
    shards = 1;
  } else {
    body += "[cluster]\nshards = 2\n";
  }
  Outcome first = RunAsgd(dir, body);
  ASSERT_EQ(first.status, 0) << first.err;
  const std::string run = RunFolder(dir);
  ASSERT_FALSE(Checkpoints(run).empty());
  EXPECT_LE(Checkpoints(run).size(), 3u);  // checkpoint_keep
  const int64_t first_updates = std::stoll(Summary(run, "updates"));

  Outcome second = RunAsgd(dir, body, {"--set", "experiment.epochs=2", "--resume", run});
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_EQ(fs::directory_iterator(dir.File("runs"))->path().string(), run);  // the same folder
  EXPECT_GT(std::stoll(Summary(run, "updates")), first_updates);
  EXPECT_GE(std::stod(Summary(run, "epochs")), 2.0);
  EXPECT_GE(std::stod(Summary(run, "final_test_accuracy")), 0.8);
  ExpectConsistent(run, shards, algorithm == "sync_sgd" ? 3 : 0);
  if (algorithm != "sync_sgd") ExpectManifestsCountPushesOnce(run);
  const auto provenance = nlohmann::json::parse(ReadFile(run + "/provenance.json"));
  EXPECT_EQ(provenance["status"], "completed");
  EXPECT_EQ(provenance["resumed"].size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Strategies, Resume,
                         ::testing::Values("async_sgd", "downpour", "dc_asgd", "sync_sgd",
                                           "agn_memory", "hogwild"));

// A crash: the newest checkpoint was half written (no manifest) and the one before has a
// corrupt shard file. Resuming takes the newest valid one and says which it skipped; the
// rows written after that checkpoint are dropped, so nothing is counted twice.
TEST(Resume, SkipsIncompleteAndCorruptCheckpoints) {
  testing::TempDir dir;
  const std::string body = "[algorithm]\nname = async_sgd\nworkers = 2\n";
  // Two runs (the second resumes the first) leave at least two checkpoints: the first
  // run's final one and the second's.
  ASSERT_EQ(RunAsgd(dir, body).status, 0);
  const std::string run = RunFolder(dir);
  ASSERT_EQ(RunAsgd(dir, body, {"--set", "experiment.epochs=2", "--resume", run}).status, 0);
  auto folders = Checkpoints(run);
  ASSERT_GE(folders.size(), 2u);
  ExpectManifestsCountPushesOnce(run);
  // The newest: its shard file flipped. A newer one still: no manifest (crash mid-save).
  const fs::path newest = folders.back();
  std::string bytes = ReadFile((newest / "shard-0.ckpt").string());
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  WriteFileAtomic((newest / "shard-0.ckpt").string(), bytes);
  fs::create_directories(run + "/checkpoints/step-999999999999");
  WriteFileAtomic(run + "/checkpoints/step-999999999999/shard-0.ckpt", "partial");

  Outcome o = RunAsgd(dir, body, {"--set", "experiment.epochs=3", "--resume", run});
  ASSERT_EQ(o.status, 0) << o.err;
  ExpectConsistent(run, 1);
  EXPECT_GE(std::stod(Summary(run, "epochs")), 3.0);
}

TEST(Resume, RefusesWithOneLine) {
  testing::TempDir dir;
  const std::string body = "[algorithm]\nname = async_sgd\nworkers = 2\n";
  ASSERT_EQ(RunAsgd(dir, body).status, 0);
  const std::string run = RunFolder(dir);
  auto one_line = [](const Outcome& o) {
    return std::count(o.err.begin(), o.err.end(), '\n') == 1;
  };
  // Another configuration.
  Outcome other = RunAsgd(dir, body, {"--set", "model.hidden=32", "--resume", run});
  EXPECT_EQ(other.status, 2);
  EXPECT_THAT(other.err, HasSubstr("of another configuration"));
  EXPECT_TRUE(one_line(other)) << other.err;
  // No such folder.
  Outcome missing = RunAsgd(dir, body, {"--resume", dir.File("no-such-run")});
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.err, HasSubstr("--resume"));
  EXPECT_TRUE(one_line(missing)) << missing.err;
  // Every checkpoint corrupt: the error names the newest and its problem.
  for (const fs::path& f : Checkpoints(run)) {
    std::string bytes = ReadFile((f / "shard-0.ckpt").string());
    bytes.resize(bytes.size() / 2);
    WriteFileAtomic((f / "shard-0.ckpt").string(), bytes);
  }
  Outcome corrupt = RunAsgd(dir, body, {"--resume", run});
  EXPECT_EQ(corrupt.status, 2);
  EXPECT_THAT(corrupt.err, HasSubstr("no valid checkpoint"));
  EXPECT_THAT(corrupt.err, HasSubstr("shard-0.ckpt"));
  EXPECT_TRUE(one_line(corrupt)) << corrupt.err;
  // A run without checkpoints.
  testing::TempDir plain;
  Outcome none_run = RunAsgd(plain, body, {"--set", "experiment.checkpoint_every_steps=0"});
  ASSERT_EQ(none_run.status, 0);
  Outcome none = RunAsgd(plain, body, {"--resume", RunFolder(plain)});
  EXPECT_EQ(none.status, 2);
  EXPECT_THAT(none.err, HasSubstr("a run folder with a checkpoint"));
}

// A run on the parameter server's folders count updates (step-), a run on a collective's
// count rounds (round-, the manifest's rounds); a round- folder is newer than any step-
// folder, so a run on a collective checkpointed by summed pushes before folders counted
// rounds and then resumed loads its new checkpoints first, and the old ones are pruned
// as the older.
TEST(Checkpointer, NamesCollectiveCheckpointsByRoundsAndTheyAreTheNewest) {
  testing::TempDir dir;
  Checkpointer checkpointer(dir.path(), 2);
  ps::ShardSnapshot snapshot;
  snapshot.values = {1.0f, 2.0f};
  auto save = [&](int64_t step, int64_t rounds) {
    CheckpointManifest m;
    m.step = step;
    m.rounds = rounds;
    m.config_hash = "h";
    snapshot.version = static_cast<uint64_t>(rounds >= 0 ? rounds : step);
    return fs::path(checkpointer.Save(m, {snapshot})).filename().string();
  };
  EXPECT_EQ(save(900, -1), "step-000000000900");  // summed pushes: 300 rounds of 3 ranks
  EXPECT_EQ(save(15, 5), "round-000000000005");
  LoadedCheckpoint newest = LoadNewestCheckpoint(dir.path(), "h");
  EXPECT_EQ(fs::path(newest.dir).filename(), "round-000000000005");
  EXPECT_EQ(newest.manifest.rounds, 5);
  EXPECT_EQ(newest.manifest.step, 15);
  EXPECT_EQ(CheckpointPosition(newest.manifest), "round 5");
  EXPECT_EQ(save(18, 6), "round-000000000006");  // keep 2: the step- folder goes
  EXPECT_FALSE(fs::exists(dir.File("checkpoints/step-000000000900")));
  EXPECT_TRUE(fs::exists(dir.File("checkpoints/round-000000000005")));
  // A manifest without rounds (the parameter server's, or a collective's of before).
  fs::remove_all(dir.File("checkpoints"));
  EXPECT_EQ(save(900, -1), "step-000000000900");
  newest = LoadNewestCheckpoint(dir.path(), "h");
  EXPECT_EQ(newest.manifest.rounds, -1);
  EXPECT_EQ(CheckpointPosition(newest.manifest), "update 900");
  EXPECT_EQ(ReadFile(dir.File("checkpoints/step-000000000900/manifest.json")).find("rounds"),
            std::string::npos);
}

TEST(TruncateCsv, KeepsHeaderAndRows) {
  testing::TempDir dir;
  const std::string path = dir.File("a.csv");
  testing::WriteTestFile(path, "h\n1\n2\n3\n");
  TruncateCsv(path, 2);
  EXPECT_EQ(ReadFile(path), "h\n1\n2\n");
  TruncateCsv(path, 0);
  EXPECT_EQ(ReadFile(path), "h\n");
  EXPECT_THROW(TruncateCsv(path, 1), DataError);
}

}  // namespace
}  // namespace asgd::experiments

namespace asgd::experiments {
namespace {

constexpr const char* kStalenessHeader =
    "time_s,worker,shard,step,pulled_version,applied_version,staleness,outcome,"
    "oldest_version,oldest_staleness,dropped\n";

// The rows of pushes a saved shard holds (applied_version below its saved version) stay,
// in order, dropped pushes included; later ones and a last row cut short by a crash go;
// the kept histogram is exact and, as the recorder's, leaves the dropped pushes out.
TEST(FilterStalenessCsv, KeepsThePushesTheSavedShardsHold) {
  testing::TempDir dir;
  const std::string path = dir.File("staleness.csv");
  const std::string rows =
      "0.1,0,0,1,0,0,0,applied,0,0,0\n"
      "0.1,0,1,1,0,0,0,applied,0,0,0\n"
      "0.2,1,0,1,0,1,1,dropped,0,1,1\n"
      "0.2,2,0,1,0,1,1,applied,0,1,0\n"
      "0.2,1,1,1,0,1,1,applied,0,1,0\n"
      "0.3,0,0,2,1,2,1,applied,0,2,0\n";
  testing::WriteTestFile(path, std::string(kStalenessHeader) + rows + "0.3,0,1,2,1,2,1,app");
  const KeptStaleness kept = FilterStalenessCsv(path, {2, 1});
  EXPECT_EQ(kept.rows, 4);
  EXPECT_EQ(ReadFile(path), std::string(kStalenessHeader) +
                                "0.1,0,0,1,0,0,0,applied,0,0,0\n"
                                "0.1,0,1,1,0,0,0,applied,0,0,0\n"
                                "0.2,1,0,1,0,1,1,dropped,0,1,1\n"
                                "0.2,2,0,1,0,1,1,applied,0,1,0\n");
  EXPECT_EQ(kept.histogram.at(0).at(0), 2);
  EXPECT_EQ(kept.histogram.count(1), 0u);  // worker 1's kept push was dropped
  EXPECT_EQ(kept.histogram.at(2).at(1), 1);
  const std::string header(kStalenessHeader);
  testing::WriteTestFile(path, header + "0.1,0,5,1,0,0,0,applied,0,0,0\n");
  EXPECT_THROW(FilterStalenessCsv(path, {2, 1}), DataError);  // no shard 5
  testing::WriteTestFile(path, header + "0.1,x,0,1,0,0,0,applied,0,0,0\n");
  EXPECT_THROW(FilterStalenessCsv(path, {2, 1}), DataError);
  testing::WriteTestFile(path, header + "0.1,0,0,1,0,0,0,applied,0,0,2\n");
  EXPECT_THROW(FilterStalenessCsv(path, {2, 1}), DataError);  // dropped is 0 or 1
  testing::WriteTestFile(path, header + "0.1,0,0,1,0,0,0,applied\n");
  EXPECT_THROW(FilterStalenessCsv(path, {2, 1}), DataError);  // a row of the old width
  testing::WriteTestFile(path, "h\n0.1,0,0,1,0,0,0,applied\n");
  EXPECT_THROW(FilterStalenessCsv(path, {2, 1}), DataError);  // not staleness.csv
}

// A convergence.csv of before consensus_distance (a run resumed by a newer asgd) gains the
// column, `nan` in the old rows; the current schema is untouched; another header is refused.
TEST(UpgradeConvergenceCsv, AddsTheConsensusColumn) {
  testing::TempDir dir;
  const std::string path = dir.File("convergence.csv");
  const std::string old_header =
      "time_s,epoch,samples,updates,train_loss,test_loss,test_accuracy,eval_examples,"
      "learning_rate\n";
  testing::WriteTestFile(path, old_header + "0,0,0,0,nan,2.3,0.1,100,0.05\n1,1,9,3,0.5,0.4,0.9,1");
  UpgradeConvergenceCsv(path);
  const std::string upgraded = old_header.substr(0, old_header.size() - 1) +
                               ",consensus_distance\n0,0,0,0,nan,2.3,0.1,100,0.05,nan\n"
                               "1,1,9,3,0.5,0.4,0.9,1";
  EXPECT_EQ(ReadFile(path), upgraded);
  UpgradeConvergenceCsv(path);
  EXPECT_EQ(ReadFile(path), upgraded);
  testing::WriteTestFile(path, "a,b\n1,2\n");
  EXPECT_THROW(UpgradeConvergenceCsv(path), DataError);
}

// A staleness.csv of before the last three columns (a run resumed by a newer asgd) is
// rewritten with them, so the rows the resumed run appends sit under a header that names
// them; the old rows were single-version applied pushes. The current schema is untouched.
TEST(FilterStalenessCsv, UpgradesAFileOfTheOldSchema) {
  testing::TempDir dir;
  const std::string path = dir.File("staleness.csv");
  testing::WriteTestFile(
      path,
      "time_s,worker,shard,step,pulled_version,applied_version,staleness,outcome\n"
      "0.1,0,0,1,0,0,0,applied\n"
      "0.2,1,0,1,0,1,1,accepted\n"
      "0.3,0,0,2,1,2,1,applied\n"
      "0.3,0,1,2,1,2,1,app");
  UpgradeStalenessCsv(path);
  const std::string upgraded = std::string(kStalenessHeader) +
                               "0.1,0,0,1,0,0,0,applied,0,0,0\n"
                               "0.2,1,0,1,0,1,1,accepted,0,1,0\n"
                               "0.3,0,0,2,1,2,1,applied,1,1,0\n"
                               "0.3,0,1,2,1,2,1,app";
  EXPECT_EQ(ReadFile(path), upgraded);
  UpgradeStalenessCsv(path);
  EXPECT_EQ(ReadFile(path), upgraded);
  TruncateCsv(path, 2);  // what a resumed in-process run does next
  EXPECT_EQ(ReadFile(path), std::string(kStalenessHeader) +
                                "0.1,0,0,1,0,0,0,applied,0,0,0\n"
                                "0.2,1,0,1,0,1,1,accepted,0,1,0\n");
  // The filter of a multi-process resume upgrades too.
  testing::WriteTestFile(
      path,
      "time_s,worker,shard,step,pulled_version,applied_version,staleness,outcome\n"
      "0.1,0,0,1,0,0,0,applied\n"
      "0.2,1,0,1,0,1,1,applied\n");
  const KeptStaleness kept = FilterStalenessCsv(path, {1});
  EXPECT_EQ(kept.rows, 1);
  EXPECT_EQ(ReadFile(path), std::string(kStalenessHeader) + "0.1,0,0,1,0,0,0,applied,0,0,0\n");
}

// The header the filter and the upgrade read is the one the recorder writes.
TEST(FilterStalenessCsv, HeaderIsTheRecordersColumns) {
  std::string joined;
  for (const std::string& c : StalenessColumns()) joined += (joined.empty() ? "" : ",") + c;
  EXPECT_EQ(joined + "\n", kStalenessHeader);
}

}  // namespace
}  // namespace asgd::experiments
