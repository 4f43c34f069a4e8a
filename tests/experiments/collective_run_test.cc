// The strategies on a collective run end to end in one process: worker threads as the ranks
// of gloo groups over 127.0.0.1 (allreduce_sgd, local_sgd, dpsgd): bytes, rounds,
// boundaries, overlap, resume, checkpoints and their refusals.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "experiments/record/csv.h"
#include "tests/experiments/batch_test_util.h"
#include "tests/experiments/run_config_testing.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;
using batch_test::ReadCsvRecords;
using run_testing::kSynthetic;
using run_testing::Outcome;
using run_testing::RunConfig;

// ---- the strategies on a collective (gloo over 127.0.0.1) ------------------------------

std::string RunFolder(const testing::TempDir& dir) {
  for (const auto& e : fs::directory_iterator(dir.File("runs"))) return e.path().string();
  return "";
}

class CollectiveRingBytes : public ::testing::TestWithParam<int> {};

// A ring allreduce moves 2(N-1)/N x the vector's bytes per worker (Patarasuk & Yuan
// 2009): in workers.csv each worker's bytes over its allreduces (its steps and the start)
// is that, up to gloo's rounding of segments to whole floats (at most one float per
// segment, 2N segments per phase), and the workers' sum is exactly 2(N-1) x the vector.
TEST_P(CollectiveRingBytes, InWorkersCsv) {
  const int workers = GetParam();
  testing::TempDir dir;
  Outcome o =
      RunConfig(dir, std::string(kSynthetic) +
                         "[algorithm]\nname = allreduce_sgd\nworkers = " + std::to_string(workers) +
                         "\nlearning_rate = 0.1\n[collective]\nalgorithm = ring\n");
  ASSERT_EQ(o.status, 0) << o.err << o.out;
  // mlp 16-16-3: 16*16+16 + 16*3+3 parameters.
  const double vector = (16 * 16 + 16 + 16 * 3 + 3) * 4.0;
  int64_t sum_sent = 0, sum_received = 0;
  const auto rows = ReadCsvRecords(RunFolder(dir) + "/workers.csv");
  ASSERT_EQ(rows.size(), static_cast<std::size_t>(workers));
  for (const auto& row : rows) {
    const int64_t allreduces = std::stoll(row.at("steps")) + 1;  // + the start
    const double want = static_cast<double>(allreduces) * 2.0 * (workers - 1) / workers * vector;
    const double slack = static_cast<double>(allreduces) * 2 * workers * 4.0;
    EXPECT_NEAR(std::stod(row.at("bytes_pushed")), want, slack) << row.at("worker");
    EXPECT_NEAR(std::stod(row.at("bytes_pulled")), want, slack) << row.at("worker");
    EXPECT_EQ(row.at("steps"), rows[0].at("steps")) << "every worker takes the same steps";
    sum_sent += std::stoll(row.at("bytes_pushed"));
    sum_received += std::stoll(row.at("bytes_pulled"));
  }
  const int64_t allreduces = std::stoll(rows[0].at("steps")) + 1;
  EXPECT_EQ(sum_sent, static_cast<int64_t>(allreduces * 2 * (workers - 1) * vector));
  EXPECT_EQ(sum_received, sum_sent);
}

INSTANTIATE_TEST_SUITE_P(Workers, CollectiveRingBytes, ::testing::Values(2, 3, 4));

// The convergence rows evaluate the workers' average: allreduce_sgd's replicas are the
// same, and so are local_sgd's at its round boundaries, so the average is their bits and
// the consensus distance exactly 0; dpsgd's drift apart and the distance is reported; no
// update is stale.
TEST(CollectiveRun, ConsensusDistanceAndStaleness) {
  for (const std::string name : {"allreduce_sgd", "dpsgd", "local_sgd"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    Outcome o = RunConfig(dir,
                          std::string(kSynthetic) + "[algorithm]\nname = " + name +
                              "\nworkers = " + std::to_string(testing::RunTestWorkers(name)) +
                              "\nwindow = 4\nlearning_rate = 0.1\n",
                          {"algorithm.window=" + std::string(name == "local_sgd" ? "4" : "1")});
    ASSERT_EQ(o.status, 0) << o.err << o.out;
    EXPECT_GE(std::stod(o.provenance["final_test_accuracy"].get<std::string>()), 0.85) << o.out;
    EXPECT_EQ(o.provenance["max_staleness"], "0");
    const auto rows = ReadCsvRecords(RunFolder(dir) + "/convergence.csv");
    ASSERT_GE(rows.size(), 3u);
    const double last = std::stod(rows.back().at("consensus_distance"));
    if (name == "dpsgd") {
      EXPECT_GT(last, 0.0);
    } else {
      EXPECT_EQ(last, 0.0);
    }
    for (const auto& row : ReadCsvRecords(RunFolder(dir) + "/staleness_histogram.csv")) {
      EXPECT_EQ(row.at("staleness"), "0");
    }
  }
}

// collective.overlap: allreduce_sgd's gradient allreduced in buckets as backward produces
// the MLP's layers (bucket_kib = 1: 256 floats, so bucket 0 holds the last layer and part
// of the first, bucket 1 the rest of the first) follows the one-piece allreduce's run:
// bit for bit at 2 workers (two addends), within the rounding of the summation order at
// 4, row by row of convergence.csv.
TEST(CollectiveRun, OverlapFollowsTheOnePieceAllreduce) {
  for (const int workers : {2, 4}) {
    SCOPED_TRACE(workers);
    const std::string config =
        std::string(kSynthetic) +
        "[algorithm]\nname = allreduce_sgd\nworkers = " + std::to_string(workers) +
        "\nlearning_rate = 0.1\n" + "optimizer = momentum\nmomentum = 0.9\n";
    testing::TempDir off_dir, on_dir;
    Outcome off = RunConfig(off_dir, config, {"collective.overlap=false"});
    Outcome on = RunConfig(on_dir, config, {"collective.overlap=true", "collective.bucket_kib=1"});
    ASSERT_EQ(off.status, 0) << off.err;
    ASSERT_EQ(on.status, 0) << on.err;
    const auto a = ReadCsvRecords(RunFolder(off_dir) + "/convergence.csv");
    const auto b = ReadCsvRecords(RunFolder(on_dir) + "/convergence.csv");
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GE(a.size(), 3u);
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].at("samples"), b[i].at("samples")) << i;
      EXPECT_EQ(a[i].at("updates"), b[i].at("updates")) << i;
      EXPECT_EQ(b[i].at("consensus_distance"), "0") << i;
      for (const char* col : {"test_loss", "test_accuracy", "train_loss"}) {
        // Row 0 (before any step) has no training loss: "nan" in both.
        if (workers == 2 || a[i].at(col) == b[i].at(col)) {
          EXPECT_EQ(a[i].at(col), b[i].at(col)) << col << " in row " << i;
        } else {
          const double x = std::stod(a[i].at(col)), y = std::stod(b[i].at(col));
          EXPECT_NEAR(x, y, 1e-3 * std::max(1.0, std::abs(x))) << col << " in row " << i;
        }
      }
    }
    EXPECT_GE(std::stod(on.provenance["final_test_accuracy"].get<std::string>()), 0.85);
  }
}

// collective.bucket_kib: a bucket of 0 KiB, and one larger than the model when the config
// gives it (the MLP 16-16-3 holds 323 floats, 2 KiB rounded up), are refused in one line
// naming the key, exit status 2; a default larger than a small model is one bucket.
TEST(CollectiveRun, BadBucketSizesAreRefusedInOneLine) {
  const std::string config = std::string(kSynthetic) +
                             "[algorithm]\nname = allreduce_sgd\nworkers = 2\n"
                             "[collective]\noverlap = true\n";
  for (const std::string bad : {"0", "-1", "3", "inf", "nan"}) {
    SCOPED_TRACE(bad);
    testing::TempDir dir;
    Outcome o = RunConfig(dir, config, {"collective.bucket_kib=" + bad});
    EXPECT_EQ(o.status, 2);
    EXPECT_THAT(o.err, HasSubstr("collective.bucket_kib"));
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
  testing::TempDir dir;
  Outcome fits = RunConfig(dir, config, {"collective.bucket_kib=2", "experiment.epochs=1"});
  EXPECT_EQ(fits.status, 0) << fits.err;
  testing::TempDir default_dir;
  Outcome by_default = RunConfig(default_dir, config, {"experiment.epochs=1"});
  EXPECT_EQ(by_default.status, 0) << by_default.err;
}

// Every gloo algorithm carries a whole run with many round boundaries: each boundary
// allreduces vectors made fresh for it, at addresses that differ from rank to rank
// (ring_chunked and halving_doubling used to pick their cached gloo algorithm by that
// address, and the ranks then waited on different slots until the timeout).
TEST(CollectiveRun, EveryAlgorithmCarriesARunWithManyBoundaries) {
  for (const std::string algorithm : {"ring", "ring_chunked", "halving_doubling"}) {
    SCOPED_TRACE(algorithm);
    testing::TempDir dir;
    Outcome o = RunConfig(dir,
                          std::string(kSynthetic) +
                              "[algorithm]\nname = local_sgd\nworkers = 4\nwindow = 2\n"
                              "learning_rate = 0.1\n[collective]\nalgorithm = " +
                              algorithm + "\ntimeout_ms = 5000\n",
                          {"metrics.eval_every_epochs=0.25"});
    ASSERT_EQ(o.status, 0) << o.err << o.out;
    EXPECT_EQ(ReadCsvRecords(RunFolder(dir) + "/convergence.csv").size(), 13u);
    EXPECT_GE(std::stod(o.provenance["final_test_accuracy"].get<std::string>()), 0.85) << o.out;
  }
}

TEST(CollectiveRun, RefusesCurveInOneLine) {
  testing::TempDir dir;
  const std::string config = std::string(kSynthetic) + "[algorithm]\nname = dpsgd\nworkers = 4\n";
  Outcome curve = RunConfig(dir, config, {"cluster.curve=true"});
  EXPECT_EQ(curve.status, 2);
  EXPECT_THAT(curve.err, HasSubstr("cluster.curve"));
  EXPECT_THAT(curve.err, HasSubstr("gloo's TCP connections, which CURVE does not cover"));
  // As processes: refused by asgd launch before it starts any (one line, no pid).
  std::ostringstream out, err;
  EXPECT_EQ(Main({"launch", dir.File("run.ini"), "--set", "cluster.curve=true"}, out, err), 2);
  const std::string text = err.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_THAT(text, HasSubstr("CURVE does not cover"));
  EXPECT_THAT(out.str(), ::testing::Not(HasSubstr("pid")));
}

// dpsgd on a ring of 2 or 3 would average all the workers completely every step (not
// D-PSGD's partial mixing at N >= 4): refused in one line naming algorithm.workers, exit
// status 2, by `asgd run` and by `asgd launch` before it starts any process.
TEST(CollectiveRun, DpsgdRefusesTwoAndThreeWorkersInOneLine) {
  for (const std::string workers : {"2", "3"}) {
    SCOPED_TRACE(workers);
    testing::TempDir dir;
    const std::string config =
        std::string(kSynthetic) + "[algorithm]\nname = dpsgd\nworkers = " + workers + "\n";
    Outcome run = RunConfig(dir, config);
    EXPECT_EQ(run.status, 2);
    EXPECT_THAT(run.err, HasSubstr("algorithm.workers = '" + workers + "'"));
    EXPECT_THAT(run.err, HasSubstr("1 or at least 4 with dpsgd"));
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    std::ostringstream out, err;
    EXPECT_EQ(Main({"launch", dir.File("run.ini")}, out, err), 2);
    const std::string text = err.str();
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
    EXPECT_THAT(text, HasSubstr("algorithm.workers = '" + workers + "'"));
    EXPECT_THAT(out.str(), ::testing::Not(HasSubstr("pid")));
  }
}

// Checkpoints of a run on a collective hold the workers' average at a round boundary and
// the position (steps, samples); --resume broadcasts it and continues each worker's batch
// sequence. A finished run of 2 epochs resumed to 4 equals the uninterrupted run of 4
// bit for bit for allreduce_sgd and local_sgd with plain SGD (replicas identical at the
// boundary; no optimizer state): the same convergence rows but for their time, the same
// staleness rows. workers.csv differs by the resumed run's broadcast. dpsgd's replicas
// differ, and a resume starts them all from their average: it continues, not bit for bit.
TEST(CollectiveRun, ResumeContinuesBitForBit) {
  for (const std::string name : {"allreduce_sgd", "local_sgd", "dpsgd"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir, whole;
    const std::string config = std::string(kSynthetic) + "[algorithm]\nname = " + name +
                               "\nworkers = " + std::to_string(testing::RunTestWorkers(name)) +
                               "\nwindow = 4\nlearning_rate = 0.1\n";
    // A checkpoint every 2 communication rounds (taken at the next vote).
    Outcome first =
        RunConfig(dir, config, {"experiment.epochs=2", "experiment.checkpoint_every_steps=2"});
    ASSERT_EQ(first.status, 0) << first.err;
    const std::string run = RunFolder(dir);
    std::vector<fs::path> saved(fs::directory_iterator(run + "/checkpoints"), {});
    EXPECT_GE(saved.size(), 2u);  // one mid-run, the finished run's last
    const std::size_t before = ReadCsvRecords(run + "/convergence.csv").size();
    std::ostringstream out, err;
    ASSERT_EQ(Main({"run", dir.File("run.ini"), "--resume", run, "--set", "experiment.epochs=4"},
                   out, err),
              0)
        << err.str();
    Outcome uninterrupted = RunConfig(whole, config, {"experiment.epochs=4"});
    ASSERT_EQ(uninterrupted.status, 0) << uninterrupted.err;
    const auto a = ReadCsvRecords(run + "/convergence.csv");
    const auto b = ReadCsvRecords(RunFolder(whole) + "/convergence.csv");
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(a.back().at("epoch"), "4");
    for (std::size_t i = 0; i < a.size(); ++i) {
      for (const char* col : {"samples", "updates", "test_loss", "test_accuracy"}) {
        if (name == "dpsgd" && i >= before) continue;  // after the resume
        EXPECT_EQ(a[i].at(col), b[i].at(col)) << col << " in row " << i;
      }
    }
    if (name == "dpsgd") {
      EXPECT_GE(std::stod(a.back().at("test_accuracy")), 0.85);
      continue;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].at("train_loss"), b[i].at("train_loss")) << i;
      EXPECT_EQ(a[i].at("consensus_distance"), "0") << i;
    }
    auto sorted_rows = [](const std::string& path) {
      std::vector<std::string> rows;
      for (auto row : ReadCsvRecords(path)) {
        row.erase("time_s");
        std::string key;
        for (const auto& [k, v] : row) key += k + "=" + v + ";";
        rows.push_back(key);
      }
      std::sort(rows.begin(), rows.end());
      return rows;
    };
    EXPECT_EQ(sorted_rows(run + "/staleness.csv"),
              sorted_rows(RunFolder(whole) + "/staleness.csv"));
  }
}

// A run on a collective names its checkpoints by communication rounds, the number the
// `updates` columns and each worker's `pushes` give, not by the pushes summed over the
// ranks: checkpoints/round-<rounds>/, whose manifest says rounds, step = rounds x N, and
// whose shard's version (each rank's steps) is rounds x H. A checkpoint every k rounds is
// taken at the first vote at or past each multiple of k. A checkpoint of before
// (step-<summed pushes>, no rounds in its manifest) still resumes; the resumed run's
// checkpoints are round- folders, newer than it (with checkpoint_keep = 1 it goes).
TEST(CollectiveRun, CheckpointFoldersCountRounds) {
  struct Case {
    std::string name;
    int64_t window;
  };
  constexpr int64_t kEvery = 5;
  for (const Case& c : {Case{"allreduce_sgd", 1}, Case{"local_sgd", 4}, Case{"dpsgd", 1}}) {
    SCOPED_TRACE(c.name);
    const int workers = testing::RunTestWorkers(c.name);
    testing::TempDir dir;
    const std::string config = std::string(kSynthetic) + "[algorithm]\nname = " + c.name +
                               "\nworkers = " + std::to_string(workers) +
                               "\nlearning_rate = 0.1\nwindow = " + std::to_string(c.window) + "\n";
    Outcome first = RunConfig(
        dir, config,
        {"experiment.epochs=4", "experiment.checkpoint_every_steps=" + std::to_string(kEvery),
         "experiment.checkpoint_keep=100"});
    ASSERT_EQ(first.status, 0) << first.err;
    const std::string run = RunFolder(dir);
    std::vector<int64_t> rounds;
    for (const auto& e : fs::directory_iterator(run + "/checkpoints")) {
      const std::string name = e.path().filename().string();
      ASSERT_EQ(name.rfind("round-", 0), 0u) << name;
      const int64_t n = std::stoll(name.substr(6));
      EXPECT_EQ(name.size(), 6u + 12u) << name;  // zero-padded to 12 digits
      const auto m = nlohmann::json::parse(ReadFile((e.path() / "manifest.json").string()));
      EXPECT_EQ(m.at("rounds").get<int64_t>(), n) << name;
      EXPECT_EQ(m.at("step").get<int64_t>(), workers * n) << name;
      EXPECT_EQ(m.at("shards").at(0).at("version").get<int64_t>(), n * c.window) << name;
      for (const auto& w : m.at("workers")) EXPECT_EQ(w.at("pushes").get<int64_t>(), n) << name;
      rounds.push_back(n);
    }
    std::sort(rounds.begin(), rounds.end());
    ASSERT_GE(rounds.size(), 2u);  // at least one mid-run, and the finished run's last
    EXPECT_GE(rounds.front(), kEvery);
    for (std::size_t i = 1; i + 1 < rounds.size(); ++i) {
      EXPECT_GT(rounds[i] / kEvery, rounds[i - 1] / kEvery) << rounds[i];  // a mark between
    }
    EXPECT_EQ(std::to_string(rounds.back()),
              ReadCsvRecords(run + "/summary.csv").at(0).at("updates"));

    // The newest as a checkpoint of before: step-<summed pushes>, no rounds.
    const int64_t last = rounds.back();
    char old_name[32], new_name[32];
    std::snprintf(old_name, sizeof(old_name), "step-%012lld",
                  static_cast<long long>(workers * last));
    std::snprintf(new_name, sizeof(new_name), "round-%012lld", static_cast<long long>(last));
    const fs::path checkpoints = fs::path(run) / "checkpoints";
    for (const auto& e : fs::directory_iterator(checkpoints)) {
      if (e.path().filename() != new_name) fs::remove_all(e.path());
    }
    fs::rename(checkpoints / new_name, checkpoints / old_name);
    auto manifest = nlohmann::json::parse(ReadFile((checkpoints / old_name / "manifest.json")));
    manifest.erase("rounds");
    testing::WriteTestFile((checkpoints / old_name / "manifest.json").string(), manifest.dump(1));
    std::ostringstream out, err;
    ASSERT_EQ(Main({"run", dir.File("run.ini"), "--resume", run, "--set", "experiment.epochs=6",
                    "--set", "experiment.checkpoint_every_steps=" + std::to_string(kEvery), "--set",
                    "experiment.checkpoint_keep=1"},
                   out, err),
              0)
        << err.str();
    const int64_t total = last / 4 * 6;  // the rounds of 6 epochs
    EXPECT_EQ(std::to_string(total), ReadCsvRecords(run + "/summary.csv").at(0).at("updates"));
    // Keep 1: the newest, the finished run's last, is a round- folder; the step- one went.
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(checkpoints)) {
      names.push_back(e.path().filename().string());
    }
    std::snprintf(new_name, sizeof(new_name), "round-%012lld", static_cast<long long>(total));
    EXPECT_EQ(names, std::vector<std::string>{new_name});
  }
}

// The final line, convergence.csv's and summary.csv's `updates` count communication
// rounds: the allreduces of allreduce_sgd, dpsgd's gossip steps (one exchange with the
// neighbours a step), local_sgd's averagings (one every H steps), not the pushes summed
// over the workers (which counted 24 for 8 allreduces of 3 workers). 8 steps per worker
// (3 workers, dpsgd 4).
TEST(CollectiveRun, CountsCommunicationRounds) {
  struct Case {
    std::string name;
    int64_t window, rounds;
  };
  for (const Case& c :
       {Case{"allreduce_sgd", 1, 8}, Case{"dpsgd", 1, 8}, Case{"local_sgd", 4, 2}}) {
    SCOPED_TRACE(c.name);
    testing::TempDir dir;
    const int workers = testing::RunTestWorkers(c.name);
    Outcome o = RunConfig(dir,
                          std::string(kSynthetic) + "[algorithm]\nname = " + c.name +
                              "\nworkers = " + std::to_string(workers) +
                              "\nlearning_rate = 0.1\nwindow = " + std::to_string(c.window) + "\n",
                          {"experiment.max_steps=" + std::to_string(8 * workers)});
    ASSERT_EQ(o.status, 0) << o.err << o.out;
    const std::string rounds = std::to_string(c.rounds);
    EXPECT_THAT(o.out, HasSubstr(", " + rounds + " communication rounds, ")) << o.out;
    const auto summary = ReadCsvRecords(RunFolder(dir) + "/summary.csv");
    ASSERT_EQ(summary.size(), 1u);
    EXPECT_EQ(summary[0].at("steps"), std::to_string(8 * workers));
    EXPECT_EQ(summary[0].at("updates"), rounds);
    EXPECT_EQ(ReadCsvRecords(RunFolder(dir) + "/convergence.csv").back().at("updates"), rounds);
    EXPECT_EQ(o.provenance["updates"], rounds);
    // Each worker took part in every round.
    for (const auto& row : ReadCsvRecords(RunFolder(dir) + "/workers.csv")) {
      EXPECT_EQ(row.at("pushes"), rounds) << row.at("worker");
    }
  }
}

// The [delay] model applies to the strategies on a collective as to the others: with a
// constant step time of 50 ms every gradient takes at least 50 ms, so 8 steps per worker
// cannot take less than 0.4 s of compute nor of training time (lower bounds: a slow
// machine only adds to them). Without the model the run took a few milliseconds.
TEST(CollectiveRun, ConstantDelaySetsTheStepTime) {
  constexpr int64_t kStepsPerWorker = 8;
  constexpr double kStepS = 0.050;
  for (const std::string name : {"allreduce_sgd", "dpsgd", "local_sgd"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    const int n = testing::RunTestWorkers(name);
    Outcome o = RunConfig(
        dir,
        std::string(kSynthetic) + "[algorithm]\nname = " + name +
            "\nworkers = " + std::to_string(n) +
            "\nlearning_rate = 0.1\nwindow = 2\n[delay]\ncompute = constant\nmean_ms = 50\n",
        {"experiment.max_steps=" + std::to_string(n * kStepsPerWorker)});
    ASSERT_EQ(o.status, 0) << o.err << o.out;
    const auto workers = ReadCsvRecords(RunFolder(dir) + "/workers.csv");
    ASSERT_EQ(workers.size(), static_cast<std::size_t>(n));
    for (const auto& row : workers) {
      EXPECT_EQ(row.at("steps"), std::to_string(kStepsPerWorker));
      EXPECT_GE(std::stod(row.at("compute_time_s")), kStepsPerWorker * kStepS) << row.at("worker");
    }
    const auto summary = ReadCsvRecords(RunFolder(dir) + "/summary.csv");
    ASSERT_EQ(summary.size(), 1u);
    EXPECT_GE(std::stod(summary[0].at("wall_time_s")), kStepsPerWorker * kStepS);
  }
}

// A worker whose loss is NaN stops the run: its peers fail on the collective (or on their
// own NaN, the mean gradient being NaN too) and the run ends with one line and status 2.
TEST(CollectiveRun, NanLossStopsTheRunWithStatusTwo) {
  testing::TempDir dir;
  Outcome o = RunConfig(dir, std::string(kSynthetic) +
                                 "[algorithm]\nname = allreduce_sgd\nworkers = 3\n"
                                 "learning_rate = 1e30\n[collective]\ntimeout_ms = 3000\n");
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_THAT(o.out, HasSubstr("run stopped: "));
  EXPECT_THAT(o.out, HasSubstr("training loss is"));
  EXPECT_EQ(o.provenance["status"], "failed");
}

}  // namespace
}  // namespace asgd::experiments
