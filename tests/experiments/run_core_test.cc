// The run core: stop reasons and their order, the evaluation schedule (by samples, by
// seconds, the final full evaluation), the training clock, and the recorder's schemas
// against results/README.md.
#include "experiments/record/run_core.h"

#include <cmath>
#include <csignal>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/file_util.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

// GCC 12 reports a false -Wrestrict in the inlined short-string assignments below at -O2
// with -march=native (GCC bug 105329); nothing here overlaps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
StopPolicy::Limits Limits() {
  StopPolicy::Limits l;
  l.epochs = 2;
  l.epochs_text = "2";
  l.max_steps = 50;
  l.max_time_s = 10;
  l.max_time_text = "10";
  l.target_accuracy = 0.9;
  l.target_text = "0.9";
  l.stop_at_target = true;
  l.learning_rate_text = "0.5";
  return l;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

TEST(StopPolicy, GoesOnBelowEveryLimit) {
  StopPolicy p(Limits(), 100);  // 200 samples
  EXPECT_EQ(p.total_samples(), 200.0);
  EXPECT_EQ(p.Check(199, 49, 9.9, false), std::nullopt);
  EXPECT_TRUE(p.WorkMayContinue(199, 49));
}

TEST(StopPolicy, EachLimitHasItsReason) {
  StopPolicy p(Limits(), 100);
  EXPECT_EQ(p.Check(200, 0, 0, false), "reached 2 epochs");
  EXPECT_EQ(p.Check(0, 50, 0, false), "reached max_steps 50");
  EXPECT_EQ(p.Check(0, 0, 10, false), "reached max_time_s 10");
  EXPECT_EQ(p.Check(0, 0, 0, true), "reached target accuracy 0.9");
  EXPECT_FALSE(p.WorkMayContinue(200, 0));
  EXPECT_FALSE(p.WorkMayContinue(0, 50));
  // Time and target are the evaluating thread's to decide.
  EXPECT_TRUE(p.WorkMayContinue(0, 0));
}

TEST(StopPolicy, ReportsTheFirstLimitInOrder) {
  StopPolicy p(Limits(), 100);
  EXPECT_EQ(p.Check(200, 50, 10, true), "reached 2 epochs");
  EXPECT_EQ(p.Check(0, 50, 10, true), "reached max_steps 50");
  EXPECT_EQ(p.Check(0, 0, 10, true), "reached max_time_s 10");
}

TEST(StopPolicy, ZeroLimitsAreOffAndTargetStopsOnlyWhenAsked) {
  StopPolicy::Limits l = Limits();
  l.max_steps = 0;
  l.max_time_s = 0;
  l.stop_at_target = false;
  StopPolicy p(l, 100);
  EXPECT_EQ(p.Check(0, 1'000'000, 1e9, true), std::nullopt);
}

TEST(StopPolicy, StopAtTargetWithoutATargetIsAConfigError) {
  StopPolicy::Limits l = Limits();
  l.target_accuracy = 0;
  EXPECT_THROW(StopPolicy(l, 100), ConfigError);
}

TEST(StopPolicy, FailureReasons) {
  StopPolicy p(Limits(), 100);
  EXPECT_EQ(p.NonFiniteLossReason(std::nan(""), 7),
            "training loss is NaN at update 7; lower algorithm.learning_rate (now 0.5)");
  EXPECT_EQ(p.NonFiniteLossReason(INFINITY, 3),
            "training loss is infinite at update 3; lower algorithm.learning_rate (now 0.5)");
  EXPECT_EQ(StopPolicy::SignalReason(SIGINT), "interrupted (SIGINT)");
  EXPECT_EQ(StopPolicy::SignalReason(SIGTERM), "terminated (SIGTERM)");
  // At the first step, before any update: the model, not the rate.
  EXPECT_EQ(NonFiniteFirstLossReason(INFINITY, " on worker 3", "model.file = net.pt"),
            "training loss is infinite on worker 3 at the first step, before any update: the "
            "model (model.file = net.pt) produced it from the initial parameters on the first "
            "batch, so the learning rate played no part; check the model's forward (and the "
            "data)");
}

TEST(EvalSchedule, BySamples) {
  EvalSchedule e(100, 0, 50);
  e.Evaluated(0, 0, false);  // the first row
  EXPECT_FALSE(e.Due(99, 1e9));
  EXPECT_TRUE(e.Due(100, 0));
  // A late evaluation skips the marks it passed: the next is the first above it.
  e.Evaluated(250, 1, false);
  EXPECT_EQ(e.next_samples(), 300.0);
  EXPECT_FALSE(e.Due(299, 2));
  EXPECT_TRUE(e.Due(300, 2));
  EXPECT_FALSE(e.ScheduledIsFull());
}

TEST(EvalSchedule, BySeconds) {
  EvalSchedule e(1e9, 2.5, 0);
  e.Evaluated(0, 1.0, true);
  EXPECT_FALSE(e.Due(10, 3.4));
  EXPECT_TRUE(e.Due(10, 3.5));
  e.SetLastTime(4.0);
  EXPECT_FALSE(e.Due(10, 6.4));
  EXPECT_TRUE(e.Due(10, 6.5));
  EXPECT_TRUE(e.ScheduledIsFull());
}

TEST(EvalSchedule, FinalFullEvaluationUnlessTheLastRowIsIt) {
  EvalSchedule partial(100, 0, 50);
  partial.Evaluated(0, 0, false);
  EXPECT_FALSE(partial.FinalNeeded(0));  // no training since the first row
  partial.Evaluated(100, 1, false);
  EXPECT_TRUE(partial.FinalNeeded(100));  // the last row saw part of the test set
  EXPECT_TRUE(partial.FinalNeeded(130));

  EvalSchedule full(100, 0, 0);
  full.Evaluated(0, 0, true);
  full.Evaluated(100, 1, true);
  EXPECT_FALSE(full.FinalNeeded(100));
  EXPECT_TRUE(full.FinalNeeded(101));
}

TEST(RunRecorder, WritesTheConvergenceSchemaAndKeepsTheAccount) {
  std::ostringstream out;
  RunRecorder r(&out, 0.8);
  ConvergenceRow row;
  row.epoch = 0.5;
  row.samples = 50;
  row.updates = 5;
  row.train_loss = std::nan("");
  row.test_loss = 1.5;
  row.test_accuracy = 0.5;
  row.eval_examples = 20;
  row.learning_rate = 0.1;
  EXPECT_FALSE(r.Convergence(row));
  row.time_s = 2;
  row.test_accuracy = 0.85;
  EXPECT_TRUE(r.Convergence(row));  // first to reach the target
  row.time_s = 3;
  row.test_accuracy = 0.7;
  row.test_loss = 0.9;
  EXPECT_FALSE(r.Convergence(row));
  EXPECT_EQ(r.convergence_rows(), 3);
  EXPECT_EQ(r.best_test_accuracy(), 0.85);
  EXPECT_EQ(r.final_test_accuracy(), 0.7);
  EXPECT_EQ(r.final_test_loss(), 0.9);
  EXPECT_EQ(r.time_to_target_s(), 2);
  const SummaryRow s = r.Summary();
  EXPECT_EQ(s.best_test_accuracy, 0.85);
  EXPECT_EQ(s.target_accuracy, 0.8);
  EXPECT_EQ(s.time_to_target_s, 2);

  std::istringstream in(out.str());
  std::string header, first;
  std::getline(in, header);
  std::getline(in, first);
  EXPECT_EQ(ParseCsvLine(header), ConvergenceColumns());
  EXPECT_EQ(ParseCsvLine(first), (std::vector<std::string>{"0", "0.5", "50", "5", "nan", "1.5",
                                                           "0.5", "20", "0.1", "nan"}));
}

TEST(RunRecorder, AppendingWritesNoHeaderAndCountsTheExistingRows) {
  std::ostringstream out;
  RunRecorder r(&out, 0, 4);
  r.RestoreAccount(0.6, 12);
  EXPECT_EQ(out.str(), "");
  ConvergenceRow row;
  row.test_accuracy = 0.5;
  r.Convergence(row);
  EXPECT_EQ(r.convergence_rows(), 5);
  EXPECT_EQ(r.best_test_accuracy(), 0.6);
  EXPECT_EQ(r.time_to_target_s(), 12);
  EXPECT_EQ(ParseCsvLine(out.str().substr(0, out.str().find('\n'))).size(),
            ConvergenceColumns().size());
}

// The first cells (`name`) of the markdown table after `heading` in results/README.md.
std::vector<std::string> Documented(const std::string& heading) {
  return testing::MarkdownTableNames(ReadFile(std::string(ASGD_SOURCE_DIR) + "/results/README.md"),
                                     heading);
}

TEST(RunRecorder, SchemasAreTheDocumentedOnes) {
  // ef_residual_norm, documented last, is written only with error feedback on.
  std::vector<std::string> convergence = Documented("### convergence.csv");
  EXPECT_EQ(ConvergenceColumns(/*ef_residual=*/true), convergence);
  ASSERT_FALSE(convergence.empty());
  EXPECT_EQ(convergence.back(), "ef_residual_norm");
  convergence.pop_back();
  EXPECT_EQ(ConvergenceColumns(), convergence);
  EXPECT_EQ(StalenessColumns(), Documented("### staleness.csv"));
  EXPECT_EQ(StalenessHistogramColumns(), Documented("### staleness_histogram.csv"));
  EXPECT_EQ(WorkersColumns(), Documented("### workers.csv"));
  EXPECT_EQ(SummaryColumns(), Documented("### summary.csv"));
}

ps::StalenessRecord Rec(uint32_t worker, int64_t step, int64_t staleness) {
  ps::StalenessRecord r;
  r.wall_time_s = 0.25 * static_cast<double>(step);
  r.worker = worker;
  r.shard = 1;
  r.step = step;
  r.pulled_version = static_cast<uint64_t>(step);
  r.applied_version = static_cast<uint64_t>(step + staleness);
  r.staleness = staleness;
  return r;
}

// Buffered rows are the unbuffered ones, in the same order, once flushed; they count
// towards rows_written (and max_rows) as soon as they are recorded.
TEST(StalenessRecorder, BufferedRowsMatchUnbufferedOnesAfterFlush) {
  std::ostringstream direct_out, buffered_out;
  StalenessRecorder direct(&direct_out, 5, 1.0);
  StalenessRecorder buffered(&buffered_out, 5, 1.0, -1, /*buffered=*/true);
  for (int64_t i = 0; i < 8; ++i) {
    direct.Record(Rec(static_cast<uint32_t>(i % 3), i, i % 2));
    buffered.Record(Rec(static_cast<uint32_t>(i % 3), i, i % 2));
  }
  EXPECT_EQ(buffered.rows_written(), 5);
  // Only the header until the owner flushes.
  EXPECT_EQ(buffered_out.str(), direct_out.str().substr(0, direct_out.str().find('\n') + 1));
  buffered.Flush();
  EXPECT_EQ(buffered_out.str(), direct_out.str());
  EXPECT_EQ(buffered.histogram(), direct.histogram());
  EXPECT_EQ(buffered.stats().count, 8);
}

TEST(StalenessRecorder, DestructionFlushesAndAppendingCountsExistingRows) {
  std::ostringstream out;
  {
    StalenessRecorder r(&out, 3, 0.0, /*existing_rows=*/2, /*buffered=*/true);
    r.Record(Rec(0, 1, 0));
    r.Record(Rec(0, 2, 0));  // beyond max_rows: counted, not written
    EXPECT_EQ(r.rows_written(), 3);
  }
  EXPECT_EQ(out.str(), "0.25,0,1,1,1,1,0,applied,1,0,0\n");
}

// A dropped push gets its row (dropped = 1) but stays out of the histogram and the
// statistics; a windowed push's row names its oldest version and the staleness from it,
// while the statistics use the staleness from the newest.
TEST(StalenessRecorder, DroppedAndWindowedPushes) {
  std::ostringstream out;
  StalenessRecorder r(&out, 10);
  ps::StalenessRecord dropped = Rec(1, 4, 3);
  dropped.outcome = ps::PushOutcome::kDropped;
  r.Record(dropped);
  ps::StalenessRecord windowed = Rec(0, 6, 1);         // pulled 6, applied 7
  windowed.oldest_lag = 4;                             // oldest 2
  r.Record(windowed);
  EXPECT_EQ(out.str(),
            "time_s,worker,shard,step,pulled_version,applied_version,staleness,outcome,"
            "oldest_version,oldest_staleness,dropped\n"
            "1,1,1,4,4,7,3,dropped,4,3,1\n"
            "1.5,0,1,6,6,7,1,applied,2,5,0\n");
  EXPECT_EQ(r.rows_written(), 2);
  const auto histogram = r.histogram();
  ASSERT_EQ(histogram.size(), 1u);
  EXPECT_EQ(histogram.at(0).at(1), 1);
  const StalenessRecorder::Stats st = r.stats();
  EXPECT_EQ(st.count, 1);
  EXPECT_EQ(st.max, 1);
  EXPECT_EQ(st.p99, 1);
}

// Records from several threads: every row comes out once, whole, however flushes interleave.
TEST(StalenessRecorder, ConcurrentRecordsAndFlushesKeepEveryRow) {
  std::ostringstream out;
  StalenessRecorder r(&out, 1'000'000, 0.0, -1, /*buffered=*/true);
  std::vector<std::thread> threads;
  for (uint32_t w = 0; w < 4; ++w) {
    threads.emplace_back([&r, w] {
      for (int64_t i = 0; i < 500; ++i) r.Record(Rec(w, i, 0));
    });
  }
  std::thread flusher([&r] {
    for (int i = 0; i < 50; ++i) r.Flush();
  });
  for (auto& t : threads) t.join();
  flusher.join();
  r.Flush();
  std::istringstream in(out.str());
  std::string line;
  std::getline(in, line);
  std::map<uint32_t, int64_t> next_step;  // each worker's rows in its own order
  int64_t rows = 0;
  while (std::getline(in, line)) {
    const auto cells = ParseCsvLine(line);
    ASSERT_EQ(cells.size(), StalenessColumns().size()) << line;
    const auto w = static_cast<uint32_t>(std::stoul(cells[1]));
    EXPECT_EQ(std::stoll(cells[3]), next_step[w]++);
    ++rows;
  }
  EXPECT_EQ(rows, 2000);
}

// The rule of time_s for every driver: time since Start plus the resumed base, minus the
// held periods (evaluations with the workers held); a driver that evaluates more often
// reports the same training time.
TEST(TrainingClock, HeldTimeIsNotTrainingTime) {
  ManualClock clock(std::chrono::seconds(100));
  TrainingClock t(&clock, /*base_s=*/5);
  clock.Advance(std::chrono::seconds(3));  // before training: not counted
  EXPECT_DOUBLE_EQ(t.Seconds(), 5);
  t.Start();
  clock.Advance(std::chrono::seconds(2));
  EXPECT_DOUBLE_EQ(t.Seconds(), 7);
  t.Hold();
  clock.Advance(std::chrono::seconds(4));
  EXPECT_DOUBLE_EQ(t.Seconds(), 7);  // constant while held
  EXPECT_DOUBLE_EQ(t.held_s(), 4);
  t.Release();
  clock.Advance(std::chrono::seconds(1));
  EXPECT_DOUBLE_EQ(t.Seconds(), 8);
  EXPECT_DOUBLE_EQ(t.held_s(), 4);
}

TEST(TrainingClock, AHoldBeforeTrainingCountsFromTheStart) {
  ManualClock clock;
  TrainingClock t(&clock);
  t.Hold();  // the initial evaluation
  clock.Advance(std::chrono::seconds(2));
  t.Start();
  clock.Advance(std::chrono::seconds(3));
  EXPECT_DOUBLE_EQ(t.Seconds(), 0);
  t.Release();
  clock.Advance(std::chrono::seconds(1));
  EXPECT_DOUBLE_EQ(t.Seconds(), 1);
  EXPECT_DOUBLE_EQ(t.held_s(), 3);
}

// The same training (10 s of steps) with 2 and with 20 evaluations of 0.5 s each: the same
// time_s at the end, and each evaluation row carries the time its training had taken.
TEST(TrainingClock, EvaluatingTenTimesAsOftenGivesTheSameTrainingTime) {
  auto run = [](int evaluations) {
    ManualClock clock;
    TrainingClock t(&clock);
    t.Start();
    std::vector<double> rows;
    const int steps = 1000;
    for (int step = 1; step <= steps; ++step) {
      clock.Advance(std::chrono::milliseconds(10));
      if (step % (steps / evaluations) == 0) {
        t.Hold();
        rows.push_back(t.Seconds());
        clock.Advance(std::chrono::milliseconds(500));
        t.Release();
      }
    }
    return std::make_pair(t.Seconds(), rows);
  };
  const auto [rare_s, rare_rows] = run(2);
  const auto [often_s, often_rows] = run(20);
  EXPECT_DOUBLE_EQ(rare_s, 10);
  EXPECT_DOUBLE_EQ(often_s, 10);
  ASSERT_EQ(often_rows.size(), 20u);
  EXPECT_DOUBLE_EQ(often_rows[9], rare_rows[0]);  // both after 500 steps
  EXPECT_DOUBLE_EQ(often_rows[19], rare_rows[1]);
}

}  // namespace
}  // namespace asgd::experiments
