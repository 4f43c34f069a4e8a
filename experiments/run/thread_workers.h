// The worker threads as an executor, written once for both strategy families: a run's
// workers as threads of this process, each a WorkerLoop on the run's clock, with the plan's
// [delay] model (if any) injected as sleeps after each gradient (InjectedDelay, seeded
// with DeriveSeed(plan.seed, "delay"): the same stragglers in every driver). The threads
// driver (threads_driver.cc) gives the body each thread runs: its family session's worker
// (family_session.h: a store's loop over its exchange, or a group's rank).
//
// Thread safety: Add, Start and Join on the driver's thread; Metrics and loops() from any
// thread (WorkerLoop::Snapshot and ResidualNorm are).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "experiments/record/metrics.h"
#include "experiments/run/problem.h"
#include "experiments/run/worker_loop.h"
#include "sim/delay_model.h"

namespace asgd::experiments {

class ThreadWorkers {
 public:
  // clock is not owned and outlives this.
  ThreadWorkers(const Problem& problem, Clock* clock);
  // Joins the threads if Join was not called.
  ~ThreadWorkers();
  ThreadWorkers(const ThreadWorkers&) = delete;
  ThreadWorkers& operator=(const ThreadWorkers&) = delete;

  // Adds the next worker's loop (setup.worker = the workers added so far), on the clock
  // and with the injected delay.
  void Add(WorkerSetup setup);
  // One thread per worker, in order, running body(w, its loop).
  void Start(const std::function<void(int worker, WorkerLoop& loop)>& body);
  // Waits for every thread.
  void Join();

  std::span<const std::unique_ptr<WorkerLoop>> loops() const { return loops_; }
  std::vector<WorkerMetrics> Metrics() const;

 private:
  Clock* const clock_;
  std::unique_ptr<sim::DelayModel> delay_;  // null without a [delay] model
  std::vector<std::unique_ptr<WorkerLoop>> loops_;
  std::vector<std::thread> threads_;
};

}  // namespace asgd::experiments
