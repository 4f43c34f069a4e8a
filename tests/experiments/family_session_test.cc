// WorkAsRank and WorkAsStoreWorker (experiments/run/family_session.h): a group's rank and
// a store's worker outside a session, as a worker process runs them, their wishes,
// points, rates and recoveries through the executor's Pace.
#include "experiments/run/family_session.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/exchange.h"
#include "algorithms/memory_store.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "core/clock.h"
#include "core/rng.h"
#include "datasets/synthetic.h"
#include "experiments/config/setup.h"
#include "experiments/record/run_core.h"
#include "experiments/run/worker_loop.h"
#include "models/factory.h"
#include "ps/param_client_wrapper.h"
#include "ps/server_rule.h"

namespace asgd::experiments {
namespace {

namespace col = ::asgd::collective;

// Two ranks' groups over TCP on 127.0.0.1, meeting in memory. The rest of a fabric is
// not what a rank asks.
class LoopbackFabric final : public Fabric {
 public:
  std::unique_ptr<ps::ParamStore> NewStore(std::span<const float> /*initial*/) override {
    ADD_FAILURE() << "a rank built a store";
    return nullptr;
  }
  std::unique_ptr<col::Collective> Payload(int w) override { return Connect(w, payload_); }
  std::unique_ptr<col::Collective> Control(int w) override { return Connect(w, control_); }
  double StepTime() const override { return 0; }
  std::string GroupTransport() const override { return "gloo"; }
  std::string DescribeGroup() const override { return "gloo on 127.0.0.1"; }

 private:
  static std::unique_ptr<col::Collective> Connect(int w,
                                                  const std::shared_ptr<col::Rendezvous>& r) {
    col::CollectiveOptions o;
    o.rank = w;
    o.size = 2;
    return col::Connect(o, r);
  }
  const std::shared_ptr<col::Rendezvous> payload_ = col::NewInMemoryRendezvous();
  const std::shared_ptr<col::Rendezvous> control_ = col::NewInMemoryRendezvous();
};

// A coordinator's answers as a worker process hears them: evaluation 7 wanted until a
// point answered it, then a stop. Records what each point carried.
class OrdersPace final : public Pace {
 public:
  bool MayStep(double* /*lr_scale*/) override { return true; }
  void Stepped() override { steps_.fetch_add(1); }
  // Also after many steps, so that a point without the id fails the test, not hangs it.
  bool StopWanted() override { return answered_.load() || steps_.load() >= 400; }
  int64_t EvalWanted(int /*w*/) override { return answered_.load() ? 0 : 7; }
  bool CheckpointWanted() override { return false; }
  void AtPoint(const RunPoint& p) override {
    std::lock_guard<std::mutex> lock(mu_);
    points_.push_back(p);
    if (p.eval_id == 7) answered_.store(true);
  }

  std::vector<RunPoint> points() {
    std::lock_guard<std::mutex> lock(mu_);
    return points_;
  }
  int64_t steps() const { return steps_.load(); }

 private:
  std::atomic<bool> answered_{false};
  std::atomic<int64_t> steps_{0};
  std::mutex mu_;
  std::vector<RunPoint> points_;
};

// A small problem: `train` synthetic examples of 8 features in 3 classes, an MLP with one
// hidden layer of 8, and its initial parameters from seed 7.
struct SmallProblem {
  datasets::TrainTest data;
  std::unique_ptr<models::Model> model;
  std::vector<float> initial;
};

SmallProblem MakeSmallProblem(int64_t train) {
  datasets::SyntheticOptions so;
  so.num_train = train;
  so.num_test = 10;
  so.num_features = 8;
  so.num_classes = 3;
  SmallProblem p;
  p.data = datasets::MakeSynthetic(so);
  models::ModelOptions mo;
  mo.name = "mlp";
  mo.hidden = {8};
  p.model = models::NewModel(mo, InputSpecFor(p.data.train));
  p.initial.resize(static_cast<std::size_t>(p.model->layout().size()));
  p.model->Initialize(p.initial, DeriveSeed(7, "init"));
  return p;
}

TEST(WorkAsRank, TheCoordinatorsEvaluationIdReachesThePointAndTheRecordComesFirst) {
  const SmallProblem problem = MakeSmallProblem(200);
  const datasets::TrainTest& data = problem.data;
  const models::Model* model = problem.model.get();
  const std::vector<float>& initial = problem.initial;

  CollectivePlan plan;
  plan.workers = 2;
  plan.batch_size = 10;
  plan.train_examples = 200;
  plan.partition_sizes = {100, 100};
  StopPolicy::Limits limits;
  limits.epochs = 100;  // the pace stops the run
  plan.stop.emplace(limits, 200);
  plan.evals.emplace(1e12, 0, 0);  // none by epochs: the pace asks

  const algorithms::Strategy& strategy = algorithms::FindStrategy("allreduce_sgd");
  const std::unique_ptr<Clock> clock = NewSystemClock();
  LoopbackFabric fabric;
  OrdersPace pace;
  std::mutex mu;
  std::vector<int> recorded_points(2, 0);
  std::vector<int64_t> recorded_steps(2, 0);
  std::vector<WorkerOutcome> outcomes(2);
  std::vector<std::thread> ranks;
  for (int w = 0; w < 2; ++w) {
    ranks.emplace_back([&, w] {
      WorkerSetup ws;
      ws.worker = w;
      ws.num_workers = 2;
      ws.strategy = &strategy;
      ws.model = model;
      ws.train = &data.train;
      for (int64_t i = w * 100; i < (w + 1) * 100; ++i) ws.examples.push_back(i);
      ws.batch_size = 10;
      ws.seed = 7;
      ws.clock = clock.get();
      WorkerLoop loop(std::move(ws));
      WorkerRecord record;
      // Before the pace's AtPoint: the pace has not seen this rank's point yet.
      record.point = [&, w](const RunPoint& p) {
        int seen = 0;
        for (const RunPoint& q : pace.points()) seen += q.rank == w && q.step == p.step ? 1 : 0;
        EXPECT_EQ(seen, 0) << "rank " << w << " step " << p.step;
        std::lock_guard<std::mutex> lock(mu);
        ++recorded_points[static_cast<std::size_t>(w)];
      };
      record.step = [&, w](const algorithms::StepResult&, int64_t, int64_t step) {
        std::lock_guard<std::mutex> lock(mu);
        recorded_steps[static_cast<std::size_t>(w)] = step;
      };
      outcomes[static_cast<std::size_t>(w)] =
          WorkAsRank(plan, w, loop, fabric, pace, initial, record);
    });
  }
  for (auto& t : ranks) t.join();

  for (int w = 0; w < 2; ++w) EXPECT_EQ(outcomes[static_cast<std::size_t>(w)].failure, "");
  const std::vector<RunPoint> points = pace.points();
  // Both ranks reached the evaluation the coordinator asked for, by its id, and then the
  // final point of the stop it asked for.
  for (int w = 0; w < 2; ++w) {
    const auto evaluated = std::count_if(points.begin(), points.end(), [w](const RunPoint& p) {
      return p.rank == w && p.evaluate && p.eval_id == 7;
    });
    EXPECT_EQ(evaluated, 1) << "rank " << w;
    EXPECT_TRUE(std::any_of(points.begin(), points.end(),
                            [w](const RunPoint& p) { return p.rank == w && p.final; }))
        << "rank " << w;
    int at = 0;
    for (const RunPoint& p : points) at += p.rank == w ? 1 : 0;
    EXPECT_EQ(recorded_points[static_cast<std::size_t>(w)], at) << "rank " << w;
    EXPECT_GT(recorded_steps[static_cast<std::size_t>(w)], 0) << "rank " << w;
  }
  EXPECT_EQ(pace.steps(), recorded_steps[0] + recorded_steps[1]);
}

// A store worker's pace as a worker process's: `steps` steps allowed at one rate scale;
// a failed request recovered (true) or not, each recorded.
class BudgetPace final : public Pace {
 public:
  // learns_stop: Ended says the run ended, though StopWanted did not.
  BudgetPace(int64_t steps, double scale, bool recover, bool stopping = false,
             bool learns_stop = false)
      : budget_(steps),
        scale_(scale),
        recover_(recover),
        stopping_(stopping),
        learns_stop_(learns_stop) {}
  bool MayStep(double* lr_scale) override {
    if (asked_ == budget_) return false;
    ++asked_;
    *lr_scale = scale_;
    return true;
  }
  bool Recover(const ps::Status& st) override {
    recovered_.push_back(st.ToString());
    return recover_;
  }
  void Stepped() override { ++stepped_; }
  bool StopWanted() override { return stopping_; }
  // Learns of the stop when asked (as a worker process asks its coordinator).
  bool Ended() override {
    ++ended_asked_;
    return stopping_ || learns_stop_;
  }
  int64_t EvalWanted(int /*w*/) override { return 0; }
  bool CheckpointWanted() override { return false; }
  void AtPoint(const RunPoint& /*p*/) override {
    ADD_FAILURE() << "a store worker reached a point";
  }

  int64_t stepped() const { return stepped_; }
  const std::vector<std::string>& recovered() const { return recovered_; }
  int ended_asked() const { return ended_asked_; }

 private:
  const int64_t budget_;
  const double scale_;
  const bool recover_;
  const bool stopping_;  // the run is stopping: StopWanted
  const bool learns_stop_;
  int ended_asked_ = 0;
  int64_t asked_ = 0;
  int64_t stepped_ = 0;
  std::vector<std::string> recovered_;
};

// A client whose third push (or push-pull) is answered with `third`, unapplied: by
// default a timeout, as one to a shard that died is.
class ThirdPushFails final : public ps::ParamClientWrapper {
 public:
  ThirdPushFails(ps::ParamClient* target, ps::Status third)
      : ParamClientWrapper(target), third_(std::move(third)) {}

 protected:
  ps::Status DoPush(std::span<const float> update, int64_t step) override {
    if (++pushes_ == 3) return third_;
    return ParamClientWrapper::DoPush(update, step);
  }
  ps::Status DoPushPull(std::span<const float> update, std::span<float> out,
                        int64_t step) override {
    if (++pushes_ == 3) return third_;
    return ParamClientWrapper::DoPushPull(update, out, step);
  }

 private:
  const ps::Status third_;
  int pushes_ = 0;
};

struct StoreWorkerRun {
  WorkerOutcome outcome;
  std::vector<float> initial, centre;
  int64_t recorded_steps = 0;
  int64_t last_step = 0;
};

// One async_sgd worker on a memory store through a client whose third push fails.
StoreWorkerRun RunStoreWorker(BudgetPace& pace,
                              ps::Status third = ps::Status::Timeout("shard 0 did not answer")) {
  const SmallProblem problem = MakeSmallProblem(100);
  StoreWorkerRun run;
  run.initial = problem.initial;
  algorithms::MemoryStore store(run.initial, ps::NewAddRule());
  algorithms::MemoryClient direct(&store, 0);
  ThirdPushFails client(&direct, std::move(third));

  const std::unique_ptr<Clock> clock = NewSystemClock();
  WorkerSetup ws;
  ws.worker = 0;
  ws.num_workers = 1;
  ws.strategy = &algorithms::FindStrategy("async_sgd");
  ws.model = problem.model.get();
  ws.train = &problem.data.train;
  for (int64_t i = 0; i < 100; ++i) ws.examples.push_back(i);
  ws.batch_size = 10;
  ws.learning_rate = 0.5;
  ws.seed = 7;
  ws.clock = clock.get();
  WorkerLoop loop(std::move(ws));
  WorkerRecord record;
  record.step = [&run](const algorithms::StepResult&, int64_t, int64_t step) {
    ++run.recorded_steps;
    run.last_step = step;
  };
  const std::unique_ptr<algorithms::Exchange> exchange = algorithms::NewStoreExchange(&client);
  run.outcome = WorkAsStoreWorker(loop, *exchange, pace, record);
  run.centre = store.values();
  return run;
}

TEST(WorkAsStoreWorker, ThePacesRateScaleReachesEveryStep) {
  // Scale 0: every push adds nothing, so the centre keeps its bits; scale 1 moves it.
  BudgetPace still(6, 0.0, true);
  const StoreWorkerRun zero = RunStoreWorker(still);
  EXPECT_EQ(zero.outcome.failure, "");
  EXPECT_EQ(zero.centre, zero.initial);
  BudgetPace moving(6, 1.0, true);
  const StoreWorkerRun one = RunStoreWorker(moving);
  EXPECT_EQ(one.outcome.failure, "");
  EXPECT_NE(one.centre, one.initial);
}

TEST(WorkAsStoreWorker, ARecoveredFailureGoesOnAndAnUnrecoveredOneEndsTheWorker) {
  // Recovered: the step whose push timed out is not counted; the worker goes on from a
  // fresh pull and takes the rest of its budget.
  BudgetPace recovering(6, 1.0, true);
  const StoreWorkerRun on = RunStoreWorker(recovering);
  EXPECT_EQ(on.outcome.failure, "");
  ASSERT_EQ(recovering.recovered().size(), 1u);
  EXPECT_NE(recovering.recovered()[0].find("shard 0 did not answer"), std::string::npos);
  EXPECT_EQ(on.recorded_steps, 5);
  EXPECT_EQ(on.last_step, 5);
  EXPECT_EQ(recovering.stepped(), 5);

  // Not recovered: the failure ends the loop after the two steps before it, naming the
  // worker and the status.
  BudgetPace failing(6, 1.0, false);
  const StoreWorkerRun ended = RunStoreWorker(failing);
  EXPECT_NE(ended.outcome.failure.find("worker 0"), std::string::npos) << ended.outcome.failure;
  EXPECT_NE(ended.outcome.failure.find("shard 0 did not answer"), std::string::npos);
  EXPECT_EQ(ended.recorded_steps, 2);
  EXPECT_EQ(failing.stepped(), 2);
}

// A worker process whose request to a dead shard times out after its coordinator stopped
// the run (the time limit passed while it waited): the run's end, not a failure.
// A shard's kShuttingDown answer that arrives before the coordinator's stop did: the
// worker asks (Pace::Ended), learns that the run ended and ends quietly; a store that
// closed while the run goes on is a failure.
TEST(WorkAsStoreWorker, AClosedStoreAsksWhetherTheRunEnded) {
  const ps::Status closed(ps::StatusCode::kRemoteError, "shard server closed: the run is over",
                          ps::ErrorCode::kShuttingDown);
  BudgetPace learning(6, 1.0, false, /*stopping=*/false, /*learns_stop=*/true);
  const StoreWorkerRun quiet = RunStoreWorker(learning, closed);
  EXPECT_EQ(quiet.outcome.failure, "");
  EXPECT_EQ(learning.ended_asked(), 1);
  EXPECT_EQ(quiet.recorded_steps, 2);

  BudgetPace going_on(6, 1.0, false);
  const StoreWorkerRun failed = RunStoreWorker(going_on, closed);
  EXPECT_NE(failed.outcome.failure.find("shutting"), std::string::npos) << failed.outcome.failure;
}

TEST(WorkAsStoreWorker, ATimeoutOnceTheRunIsStoppingEndsTheWorkerQuietly) {
  BudgetPace stopping(6, 1.0, false, /*stopping=*/true);
  const StoreWorkerRun ended = RunStoreWorker(stopping);
  EXPECT_EQ(ended.outcome.failure, "");
  EXPECT_TRUE(stopping.recovered().empty());
  EXPECT_EQ(ended.recorded_steps, 2);
}

}  // namespace
}  // namespace asgd::experiments
