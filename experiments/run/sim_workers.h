// The simulator as an executor, written once for both strategy families: a run's workers
// as tasks of one scheduler in virtual time, each a WorkerLoop whose gradients take the
// delay model's step time on the host's cores (sim/core_pool.h). The simulator's driver
// (sim_driver.cc, with its family session: a store's loop over its exchange, or a group's
// rank) gives the body each task runs and how blocked workers are released at the end.
//
// Thread safety: one scheduler thread, as everything in sim/.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "experiments/record/metrics.h"
#include "experiments/run/problem.h"
#include "experiments/run/worker_loop.h"
#include "sim/core_pool.h"
#include "sim/delay_model.h"
#include "sim/scheduler.h"

namespace asgd::experiments {

class SimWorkers {
 public:
  // The delay model is the plan's [delay], seeded with DeriveSeed(plan.seed, "delay").
  // sched and cores are not owned and outlive this.
  SimWorkers(const Problem& problem, sim::Scheduler& sched, sim::CorePool& cores);

  // Adds the next worker's loop (setup.worker = the workers added so far): on the virtual
  // clock, each gradient followed by its step time on the cores.
  void Add(WorkerSetup setup);

  // One task per worker, "worker w", in order, running body(w, its loop). The first
  // failure is kept (failure()) and on_failure is called once for it.
  void Spawn(std::function<WorkerOutcome(int worker, WorkerLoop& loop)> body,
             std::function<void()> on_failure);

  // Runs the scheduler until no task can go on. If workers are still blocked (a
  // synchronous rule whose peers stopped, a collective waiting for a failed rank),
  // release() unblocks them and the scheduler runs again; none may stay blocked (checked).
  void Run(const std::function<void()>& release);

  const sim::VirtualClock& clock() const { return clock_; }
  sim::Scheduler& scheduler() const { return sched_; }
  const sim::CorePool& cores() const { return cores_; }
  std::span<const std::unique_ptr<WorkerLoop>> loops() const { return loops_; }
  const std::string& failure() const { return failure_; }
  std::vector<WorkerMetrics> Metrics() const;

 private:
  sim::Scheduler& sched_;
  sim::VirtualClock clock_;
  sim::DelayModel delay_;
  sim::CorePool& cores_;
  std::vector<std::unique_ptr<WorkerLoop>> loops_;
  std::string failure_;  // the first worker failure
};

}  // namespace asgd::experiments
