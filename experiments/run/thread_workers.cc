#include "experiments/run/thread_workers.h"

#include <utility>

#include "core/check.h"
#include "core/rng.h"

namespace asgd::experiments {

ThreadWorkers::ThreadWorkers(const Problem& problem, Clock* clock) : clock_(clock) {
  const RunPlan& plan = problem.plan;
  if (plan.delay) {
    delay_ = std::make_unique<sim::DelayModel>(plan.sim.delay, plan.workers,
                                               DeriveSeed(plan.seed, "delay"));
  }
}

ThreadWorkers::~ThreadWorkers() { Join(); }

void ThreadWorkers::Add(WorkerSetup setup) {
  const int w = static_cast<int>(loops_.size());
  ASGD_CHECK_EQ(setup.worker, w, "worker threads are added in order");
  setup.clock = clock_;
  if (delay_) setup.after_gradient = InjectedDelay(delay_.get(), clock_, w);
  loops_.push_back(std::make_unique<WorkerLoop>(std::move(setup)));
}

void ThreadWorkers::Start(const std::function<void(int worker, WorkerLoop& loop)>& body) {
  for (std::size_t i = 0; i < loops_.size(); ++i) {
    threads_.emplace_back([this, i, body] { body(static_cast<int>(i), *loops_[i]); });
  }
}

void ThreadWorkers::Join() {
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

std::vector<WorkerMetrics> ThreadWorkers::Metrics() const {
  std::vector<WorkerMetrics> metrics;
  for (const auto& loop : loops_) metrics.push_back(loop->Snapshot());
  return metrics;
}

}  // namespace asgd::experiments
