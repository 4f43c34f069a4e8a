// WorkAsRank (experiments/run/family_session.h): a group's rank outside a session, as a
// worker process runs it, its wishes and points through the executor's Pace.
#include "experiments/run/family_session.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "core/clock.h"
#include "core/rng.h"
#include "datasets/synthetic.h"
#include "experiments/config/setup.h"
#include "experiments/record/run_core.h"
#include "experiments/run/worker_loop.h"
#include "models/factory.h"

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
  bool MayStep() override { return true; }
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

TEST(WorkAsRank, TheCoordinatorsEvaluationIdReachesThePointAndTheRecordComesFirst) {
  datasets::SyntheticOptions so;
  so.num_train = 200;
  so.num_test = 10;
  so.num_features = 8;
  so.num_classes = 3;
  const datasets::TrainTest data = datasets::MakeSynthetic(so);
  models::ModelOptions mo;
  mo.name = "mlp";
  mo.hidden = {8};
  const std::unique_ptr<models::Model> model = models::NewModel(mo, InputSpecFor(data.train));
  std::vector<float> initial(static_cast<std::size_t>(model->layout().size()));
  model->Initialize(initial, DeriveSeed(7, "init"));

  CollectivePlan plan;
  plan.workers = 2;
  plan.batch_size = 10;
  plan.train_examples = so.num_train;
  plan.partition_sizes = {100, 100};
  StopPolicy::Limits limits;
  limits.epochs = 100;  // the pace stops the run
  plan.stop.emplace(limits, so.num_train);
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
      ws.model = model.get();
      ws.train = &data.train;
      for (int64_t i = w * 100; i < (w + 1) * 100; ++i) ws.examples.push_back(i);
      ws.batch_size = 10;
      ws.seed = 7;
      ws.clock = clock.get();
      WorkerLoop loop(std::move(ws));
      RankRecord record;
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

}  // namespace
}  // namespace asgd::experiments
