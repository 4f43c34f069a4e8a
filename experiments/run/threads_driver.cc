#include "experiments/run/threads_driver.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "core/aligned.h"
#include "core/clock.h"
#include "core/log.h"
#include "experiments/run/family_session.h"
#include "experiments/run/param_stores.h"
#include "experiments/run/problem.h"
#include "experiments/run/run_session.h"
#include "experiments/run/thread_workers.h"
#include "experiments/run/worker_loop.h"

namespace asgd::experiments {
namespace {

namespace col = ::asgd::collective;
using ::asgd::internal::StrCat;

// The peers of worker threads: the plan's store on the system clock (inproc shard servers
// named after the run), and gloo groups over TCP on 127.0.0.1 meeting through in-memory
// rendezvous, one for the strategy's traffic and one for the control group.
class ThreadFabric final : public Fabric {
 public:
  ThreadFabric(const Problem& problem, RunSession& session, const Clock* clock)
      : problem_(problem), session_(session), clock_(clock) {}

  std::unique_ptr<ps::ParamStore> NewStore(std::span<const float> initial) override {
    StoreParts parts;
    parts.initial = initial;
    parts.clock = clock_;
    parts.staleness = session_.staleness();
    parts.run_id = session_.run().id();
    return NewParamStore(problem_, parts);
  }
  std::unique_ptr<col::Collective> Payload(int w) override { return Connect(w, payload_); }
  std::unique_ptr<col::Collective> Control(int w) override { return Connect(w, control_); }
  double StepTime() const override { return std::chrono::duration<double>(clock_->Now()).count(); }
  std::string GroupTransport() const override {
    return StrCat("gloo-", col::AlgorithmName(problem_.plan.collective.algorithm));
  }
  std::string DescribeGroup() const override {
    return StrCat("gloo (", col::AlgorithmName(problem_.plan.collective.algorithm),
                  ", tcp over 127.0.0.1)");
  }

 private:
  std::unique_ptr<col::Collective> Connect(int w,
                                           const std::shared_ptr<col::Rendezvous>& rendezvous) {
    col::CollectiveOptions mine = problem_.plan.collective;
    mine.rank = w;
    return col::Connect(mine, rendezvous);
  }

  const Problem& problem_;
  RunSession& session_;
  const Clock* clock_;
  const std::shared_ptr<col::Rendezvous> payload_ = col::NewInMemoryRendezvous();
  const std::shared_ptr<col::Rendezvous> control_ = col::NewInMemoryRendezvous();
};

// One run of worker threads, the main thread evaluating and checkpointing: what the
// threads executor adds to the run session, the same for both families. A point is read
// either at once (a store's centre: the workers start no step meanwhile) or when every
// rank waits at the boundary it agreed on (a group's average).
class ThreadRun final : public Pace {
 public:
  ThreadRun(const Problem& problem, RunSession& session, FamilySession& family,
            ThreadFabric& fabric, Clock* clock, const WorkerDevices& devices)
      : problem_(problem),
        session_(session),
        family_(family),
        fabric_(fabric),
        workers_(problem.plan.workers),
        threads_(problem, clock) {
    for (int w = 0; w < workers_; ++w) {
      WorkerSetup ws = MakeWorkerSetup(problem, w);
      ws.model = devices.ModelOf(w, problem);
      family.SetUp(w, ws);
      threads_.Add(std::move(ws));
    }
  }

  // A convergence row of `point`. The caller holds the training clock.
  void Evaluate(const RunPoint& point, bool full) {
    const double t = session_.Seconds();
    EvalInput in = session_.CountersAt(point.samples);
    if (problem_.plan.ef_residual) in.ef_residual_norm = ResidualNorm(threads_.loops());
    family_.Annotate(point, in);
    if (session_.Evaluate(*problem_.model, point.params, in, t, full) &&
        session_.stop().stop_at_target()) {
      session_.counters().stop.store(true);
    }
    // The schedule by seconds counts training time (the evaluation is held time).
    session_.eval_schedule().Evaluated(point.samples, t, full);
  }

  // The first row, before any worker starts: the starting parameters.
  void EvaluateFirst(std::span<const float> initial) {
    hold_.store(true, std::memory_order_release);
    session_.training().Hold();
    if (auto p = family_.FirstPoint(initial, session_.counters().samples.load())) {
      Evaluate(*p, false);
    }
    session_.training().Release();
    hold_.store(false, std::memory_order_release);
  }

  void Start() {
    session_.eval_schedule().SetLastTime(session_.Seconds());
    session_.StartCheckpoints(family_.PushesPerStep());
    threads_.Start([this](int w, WorkerLoop& loop) {
      const WorkerOutcome o = family_.Work(w, loop, fabric_, *this);
      if (!o.failure.empty()) session_.counters().Fail(o.failure);
      std::lock_guard<std::mutex> lock(mu_);
      ++finished_;
      cv_.notify_all();
    });
  }

  // The main thread until a worker returns: the points where every rank waits, the
  // checkpoints, the limits, the scheduled evaluations. Then the workers are stopped and
  // joined. Returns the reason a limit gave (empty: the workers stopped for their own
  // reasons: the epochs, the target or a failure).
  std::string Supervise() {
    std::string reason;
    RunCounters& c = session_.counters();
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait_for(lock, std::chrono::milliseconds(5),
                   [&] { return parked_ == workers_ || finished_ > 0; });
      if (parked_ == workers_) {
        ServeParked(lock);
        continue;
      }
      if (finished_ > 0) break;
      lock.unlock();
      session_.staleness()->Flush();
      if (auto why =
              session_.stop().Check(c.samples.load(), c.steps.load(), session_.Seconds(), false);
          why && !c.stop.load()) {
        reason = *why;
        c.stop.store(true);
      }
      // Stopping: nothing more is read until the workers have ended (a group's ranks stop
      // at their next vote).
      if (c.stop.load()) {
        lock.lock();
        continue;
      }
      if (problem_.plan.checkpointing() && session_.CheckpointDue(c.pushes.load())) {
        checkpoint_.store(true);
        if (auto p = family_.ReadNow(c.samples.load())) {
          family_.SaveCheckpoint(&*p, threads_.loops());
          checkpoint_.store(false);
        }
      }
      if (family_.EvaluationDue(session_.eval_schedule(), c.samples.load(), session_.Seconds())) {
        // The workers start no step while it is read and evaluated (a worker in a step
        // finishes it; a synchronous one may wait in its round); a group's ranks are held
        // at their next vote.
        hold_.store(true, std::memory_order_release);
        session_.training().Hold();
        if (auto p = family_.ReadNow(c.samples.load())) {
          Evaluate(*p, false);
          hold_.store(false, std::memory_order_release);
        }
        session_.training().Release();
      }
      lock.lock();
    }
    // Workers still waiting at a point when a peer failed go on, into the failure.
    parked_ = 0;
    ++releases_;
    cv_.notify_all();
    lock.unlock();
    c.stop.store(true);
    family_.Release();
    threads_.Join();
    return reason;
  }

  // The last row (of the whole test set) and a finished run's last checkpoint: `--resume`
  // with more epochs extends it.
  void Finish(int64_t samples) {
    std::optional<RunPoint> p = family_.FinalPoint(samples);
    if (!p) return;
    session_.training().Hold();
    Evaluate(*p, true);
    session_.training().Release();
    if (problem_.plan.checkpointing()) family_.SaveCheckpoint(&*p, threads_.loops());
  }

  std::vector<WorkerMetrics> Metrics() const { return threads_.Metrics(); }

  // Pace: what the workers ask.
  bool MayStep(double* lr_scale) override {
    const RunCounters& c = session_.counters();
    while (hold_.load(std::memory_order_acquire)) {
      if (c.stop.load(std::memory_order_relaxed)) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return !c.stop.load(std::memory_order_relaxed) && session_.WorkerMayStep(lr_scale);
  }
  void Stepped() override {}
  bool StopWanted() override { return session_.counters().stop.load(); }
  int64_t EvalWanted(int /*w*/) override { return hold_.load() ? 1 : 0; }
  bool CheckpointWanted() override {
    return checkpoint_.load() || session_.CheckpointDueByPushes(session_.counters().pushes.load());
  }
  // Rank 0 brings the point; every rank then waits until the main thread has read it (not
  // after the final one).
  void AtPoint(const RunPoint& point) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (point.rank == 0) boundary_ = point;
    if (point.final) return;
    const int64_t releases = releases_;
    ++parked_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return releases_ != releases; });
  }

 private:
  // Every rank waits at rank 0's point: evaluate it (first: the checkpoint's rows include
  // it) and save it as they agreed, then let them go on.
  void ServeParked(std::unique_lock<std::mutex>& lock) {
    session_.training().Hold();
    RunPoint point = boundary_;
    lock.unlock();
    point.samples = session_.counters().samples.load();
    if (point.evaluate) Evaluate(point, false);
    if (point.checkpoint) {
      family_.SaveCheckpoint(&point, threads_.loops());
      checkpoint_.store(false);
    }
    lock.lock();
    if (point.evaluate) hold_.store(false);
    parked_ = 0;
    ++releases_;
    cv_.notify_all();
    session_.training().Release();
  }

  const Problem& problem_;
  RunSession& session_;
  FamilySession& family_;
  ThreadFabric& fabric_;
  const int workers_;
  // The driver wants an evaluation: a store's workers start no step (held training time), a
  // group's ranks are held at their next vote. And a checkpoint (a group's next vote).
  std::atomic<bool> hold_{false};
  std::atomic<bool> checkpoint_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  RunPoint boundary_;      // rank 0's last point
  int parked_ = 0;         // workers waiting at a point
  int64_t releases_ = 0;   // points served
  int finished_ = 0;       // worker threads that returned
  ThreadWorkers threads_;  // last: its threads end before the members they use go
};

}  // namespace

RunResult RunOnThreads(const Config& config, const RunRequest& request, std::ostream& out) {
  const Problem problem = LoadProblem(config, request);  // validated before the folder
  const RunPlan& plan = problem.plan;
  const WorkerDevices devices = MakeWorkerDevices(problem);
  auto clock = NewSystemClock();
  SessionOptions options;
  options.clock = clock.get();
  RunSession session(config, request, problem, options);
  const std::unique_ptr<FamilySession> family = NewFamilySession(problem, session);
  ThreadFabric fabric(problem, session, clock.get());

  AlignedVector<float> initial(static_cast<std::size_t>(problem.n_params));
  family->Open(fabric, initial);
  // time_s is training time (TrainingClock's rule): from here, with the evaluations, during
  // which workers start no step or wait at a boundary, taken out.
  session.training().Start();
  ASGD_LOG(kInfo, "run ", session.run().id(), ": ", plan.name, " with ", plan.workers,
           " workers on ", family->Describe(fabric), ", ", problem.model->Describe(),
           " (workers on ", devices.Describe(), "), ", problem.data.train.name, " (",
           problem.data.train.num_examples, " examples)");

  ThreadRun run(problem, session, *family, fabric, clock.get(), devices);
  run.EvaluateFirst(initial);
  run.Start();
  std::string reason = run.Supervise();
  const double wall = session.Seconds();
  const int64_t samples = session.counters().samples.load();
  const std::string failure = session.counters().failure();
  const bool failed = !failure.empty();
  if (failed) {
    reason = failure;
  } else {
    if (reason.empty()) {
      reason = session.stop()
                   .Check(samples, session.counters().steps.load(), wall,
                          session.recorder().time_to_target_s() >= 0)
                   .value_or(session.stop().TargetReason());
    }
    run.Finish(samples);
  }

  RunEnd end;
  end.time_s = wall;
  end.samples = samples;
  end.reason = reason;
  end.failed = failed;
  end.device = devices.Describe();
  family->Describe(end, fabric);
  std::vector<WorkerMetrics> metrics = run.Metrics();
  family->Close();
  return session.Finish(*problem.model, family->LastParams(), end, std::move(metrics), {}, out);
}

}  // namespace asgd::experiments
