#include "experiments/run/sim_workers.h"

#include <utility>

#include "core/check.h"
#include "core/rng.h"

namespace asgd::experiments {

using ::asgd::internal::StrCat;

SimWorkers::SimWorkers(const Problem& problem, sim::Scheduler& sched, sim::CorePool& cores)
    : sched_(sched),
      clock_(sched),
      delay_(problem.plan.sim.delay, problem.plan.workers, DeriveSeed(problem.plan.seed, "delay")),
      cores_(cores) {}

void SimWorkers::Add(WorkerSetup setup) {
  const int w = static_cast<int>(loops_.size());
  ASGD_CHECK_EQ(setup.worker, w, "simulated workers are added in order");
  setup.clock = &clock_;
  setup.after_gradient = [this, w](Duration cpu) {
    const Duration now = sched_.Now();
    sched_.Sleep(cores_.Run(now, delay_.StepTime(w, cpu)) - now);
  };
  loops_.push_back(std::make_unique<WorkerLoop>(std::move(setup)));
}

void SimWorkers::Spawn(std::function<WorkerOutcome(int worker, WorkerLoop& loop)> body,
                       std::function<void()> on_failure) {
  for (std::size_t i = 0; i < loops_.size(); ++i) {
    const int w = static_cast<int>(i);
    sched_.Spawn(StrCat("worker ", w), [this, w, i, body, on_failure] {
      const WorkerOutcome o = body(w, *loops_[i]);
      if (!o.failure.empty() && failure_.empty()) {
        failure_ = o.failure;
        on_failure();
      }
    });
  }
}

void SimWorkers::Run(const std::function<void()>& release) {
  sched_.Run();
  if (sched_.unfinished_tasks() > 0) {
    release();
    sched_.Run();
  }
  ASGD_CHECK_EQ(sched_.unfinished_tasks(), 0, "simulated workers still blocked after shutdown");
}

std::vector<WorkerMetrics> SimWorkers::Metrics() const {
  std::vector<WorkerMetrics> metrics;
  for (const auto& loop : loops_) metrics.push_back(loop->Snapshot());
  return metrics;
}

}  // namespace asgd::experiments
