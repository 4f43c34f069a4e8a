#include "experiments/run/worker_loop.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "algorithms/param_client_wrapper.h"
#include "collective/collective.h"
#include "core/aligned.h"
#include "core/check.h"
#include "core/rng.h"
#include "datasets/sampler.h"
#include "ps/status.h"
#include "sim/delay_model.h"

namespace asgd::experiments {

namespace alg = ::asgd::algorithms;
using ::asgd::internal::StrCat;

WorkerLoop::WorkerLoop(WorkerSetup setup) : setup_(std::move(setup)) {
  ASGD_CHECK(setup_.strategy != nullptr && setup_.model != nullptr && setup_.train != nullptr &&
                 setup_.clock != nullptr,
             "incomplete WorkerSetup");
}

WorkerMetrics WorkerLoop::Snapshot() const {
  WorkerMetrics m;
  m.worker = setup_.worker;
  m.steps = live_.steps.load(std::memory_order_relaxed);
  m.samples = live_.samples.load(std::memory_order_relaxed);
  m.pushes = live_.pushes.load(std::memory_order_relaxed);
  m.bytes_pushed = live_.bytes_pushed.load(std::memory_order_relaxed);
  m.dense_bytes_pushed = live_.dense_bytes_pushed.load(std::memory_order_relaxed);
  m.bytes_pulled = live_.bytes_pulled.load(std::memory_order_relaxed);
  m.dropped_pushes = live_.dropped.load(std::memory_order_relaxed);
  m.active_s = static_cast<double>(live_.active_ns.load(std::memory_order_relaxed)) * 1e-9;
  m.compute_s = static_cast<double>(live_.compute_ns.load(std::memory_order_relaxed)) * 1e-9;
  m.wait_s = static_cast<double>(live_.wait_ns.load(std::memory_order_relaxed)) * 1e-9;
  m.comm_s = static_cast<double>(live_.comm_ns.load(std::memory_order_relaxed)) * 1e-9;
  return m;
}

namespace {

// Times every call of the worker's client on the worker's clock (workers.csv's
// comm_time_s): two clock reads per call.
// `before_call` (optional) runs before each call, outside the timing: the simulated
// worker's deferred compute time (WorkerSetup::shared).
class TimedClient final : public alg::ParamClientWrapper {
 public:
  TimedClient(alg::ParamClient* target, const Clock& clock, Duration* total,
              std::function<void()> before_call)
      : ParamClientWrapper(target),
        clock_(clock),
        total_(total),
        before_call_(std::move(before_call)) {}

 protected:
  alg::Status DoPull(std::span<float> out) override {
    return Timed([&] { return ParamClientWrapper::DoPull(out); });
  }
  alg::Status DoPush(std::span<const float> update, int64_t step) override {
    return Timed([&] { return ParamClientWrapper::DoPush(update, step); });
  }
  alg::Status DoPushPull(std::span<const float> update, std::span<float> out,
                         int64_t step) override {
    return Timed([&] { return ParamClientWrapper::DoPushPull(update, out, step); });
  }
  alg::Status DoSendClock(int64_t clock) override {
    return Timed([&] { return ParamClientWrapper::DoSendClock(clock); });
  }
  alg::Status DoPushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                            int64_t step) override {
    return Timed([&] { return ParamClientWrapper::DoPushEncoded(parts, out, step); });
  }
  alg::Status DoPullSparse(std::span<const int64_t> indices, std::span<float> out) override {
    return Timed([&] { return ParamClientWrapper::DoPullSparse(indices, out); });
  }
  alg::Status DoPushSparse(std::span<const int64_t> indices, std::span<const float> values,
                           int64_t step) override {
    return Timed([&] { return ParamClientWrapper::DoPushSparse(indices, values, step); });
  }

 private:
  template <typename F>
  alg::Status Timed(F&& call) {
    if (before_call_) before_call_();
    const Duration t0 = clock_.Now();
    alg::Status st = call();
    *total_ += clock_.Now() - t0;
    return st;
  }
  const Clock& clock_;
  Duration* total_;
  std::function<void()> before_call_;
};

// The first element of v that is NaN or infinite, or -1.
int64_t FirstNonFinite(std::span<const float> v) {
  const auto it = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
  return it == v.end() ? -1 : static_cast<int64_t>(it - v.begin());
}

}  // namespace

std::function<void(Duration)> InjectedDelay(sim::DelayModel* delay, Clock* clock, int worker) {
  return [delay, clock, worker](Duration cpu) {
    const Duration extra = delay->ExtraDelay(worker, cpu);
    if (extra > Duration::zero()) clock->SleepFor(extra);
  };
}

std::string DescribeNonFiniteLoss(const NonFiniteLoss& f) {
  const std::string what = std::isnan(f.loss) ? "NaN" : "infinite";
  const std::string head = StrCat("training loss is ", what, " on worker ", f.worker);
  if (f.worker_element < 0) {
    // Finite parameters, non-finite loss: the step itself overflowed.
    return StrCat(head,
                  ", computed on finite parameters: the model diverged; lower "
                  "algorithm.learning_rate (now ",
                  f.learning_rate, ")");
  }
  if (f.shared_memory) {
    return StrCat(head, ": the shared parameters hold a non-finite value at element ",
                  f.worker_element,
                  ", written by the workers' updates; lower "
                  "algorithm.learning_rate (now ",
                  f.learning_rate, ")");
  }
  if (f.server_element >= 0) {
    // Shards refuse pushes holding NaN or Inf, so the server's arithmetic made it.
    return StrCat(head, ": the server's parameters hold a non-finite value at element ",
                  f.server_element, ", made by ", f.strategy,
                  "'s server rule (shards refuse "
                  "non-finite pushes, so no worker sent it); lower the rates and factors that "
                  "rule uses (algorithm.* keys of ",
                  f.strategy, ")");
  }
  return StrCat(head, ": its own parameters hold a non-finite value at element ", f.worker_element,
                " after its local update (the server's are finite); lower "
                "algorithm.learning_rate (now ",
                f.learning_rate, ")");
}

std::unique_ptr<alg::ParamClient> CompressPushes(std::unique_ptr<alg::ParamClient> client,
                                                 const compression::CompressionOptions& options,
                                                 uint64_t seed, int worker,
                                                 const alg::CompressingClient** compressing) {
  if (compressing != nullptr) *compressing = nullptr;
  std::shared_ptr<const compression::Compressor> compressor = compression::NewCompressor(options);
  if (compressor == nullptr) return client;
  auto wrapped = std::make_unique<alg::CompressingClient>(
      std::move(client), std::move(compressor), options.error_feedback,
      DeriveSeed(seed, "compression", static_cast<uint64_t>(worker)));
  if (compressing != nullptr) *compressing = wrapped.get();
  return wrapped;
}

double ResidualNorm(std::span<const alg::CompressingClient* const> clients) {
  double sq = 0;
  for (const alg::CompressingClient* c : clients) {
    if (c != nullptr) sq += c->ResidualNorm() * c->ResidualNorm();
  }
  return std::sqrt(sq);
}

WorkerOutcome WorkerLoop::Run(alg::ParamClient& client, const WorkerHooks& hooks) {
  return RunRule(&client, nullptr, {}, hooks);
}

WorkerOutcome WorkerLoop::Run(collective::Collective& collective, std::span<const float> initial,
                              const WorkerHooks& hooks) {
  return RunRule(nullptr, &collective, initial, hooks);
}

WorkerOutcome WorkerLoop::RunRule(alg::ParamClient* client, collective::Collective* collective,
                                  std::span<const float> initial, const WorkerHooks& hooks) {
  const WorkerSetup& s = setup_;
  const Clock& clock = *s.clock;
  const int w = s.worker;
  WorkerOutcome outcome;
  Duration compute{0};   // in gradient evaluations (the model)
  Duration in_steps{0};  // in Step calls (compute, communication, waiting)
  Duration comm{0};      // in the client's calls
  auto ending = [&](const alg::Status& st) {
    return hooks.ending && hooks.ending() && st.error_code() == transport::ErrorCode::kShuttingDown;
  };
  auto publish = [&] {
    live_.compute_ns.store(compute.count(), std::memory_order_relaxed);
    live_.wait_ns.store(std::max<int64_t>(0, (in_steps - compute).count()),
                        std::memory_order_relaxed);
    live_.comm_ns.store(comm.count(), std::memory_order_relaxed);
    if (client != nullptr) {
      // What reached the store: a compressing wrapper's encoded bytes, not its input.
      live_.bytes_pushed.store(client->wire_traffic().bytes_pushed, std::memory_order_relaxed);
      live_.dense_bytes_pushed.store(client->wire_traffic().dense_bytes_pushed,
                                     std::memory_order_relaxed);
      live_.bytes_pulled.store(client->traffic().bytes_pulled, std::memory_order_relaxed);
      live_.dropped.store(client->dropped_pushes(), std::memory_order_relaxed);
    } else {
      const collective::CollectiveCounters c = collective->Counters();
      live_.bytes_pushed.store(static_cast<int64_t>(c.bytes_sent), std::memory_order_relaxed);
      live_.dense_bytes_pushed.store(static_cast<int64_t>(c.bytes_sent), std::memory_order_relaxed);
      live_.bytes_pulled.store(static_cast<int64_t>(c.bytes_received), std::memory_order_relaxed);
    }
  };
  // Simulated workers share the scratch (WorkerSetup::shared); a collective's do not.
  SharedWorkerScratch* const shared = client != nullptr ? s.shared : nullptr;
  // The CPU time of the last gradient whose after_gradient is deferred (shared only).
  std::optional<Duration> deferred_cpu;
  auto run_deferred = [&] {
    if (!deferred_cpu) return;
    const Duration cpu = *deferred_cpu;
    deferred_cpu.reset();
    const Duration t0 = clock.Now();
    s.after_gradient(cpu);
    compute += clock.Now() - t0;
  };
  try {
    std::unique_ptr<models::Model> own_model = shared != nullptr ? nullptr : s.model->Clone();
    models::Model* const local = shared != nullptr ? shared->model.get() : own_model.get();
    const int64_t n_params = local->layout().size();
    datasets::SamplerOptions sopt;
    sopt.batch_size = s.batch_size;
    sopt.seed = DeriveSeed(s.seed, "sampler", static_cast<uint64_t>(w));
    sopt.augment = s.augment;
    sopt.augment.seed = DeriveSeed(s.seed, "augment", static_cast<uint64_t>(w));
    datasets::BatchSampler sampler(*s.train, s.examples, sopt);
    for (int64_t i = 0; i < s.skip_batches; ++i) (void)sampler.Next();
    auto optimizer = alg::NewOptimizer(s.optimizer, n_params);
    int64_t last_batch = 0;
    alg::WorkerEnv env;
    env.worker = w;
    env.num_workers = s.num_workers;
    // The client's calls timed as communication (a collective strategy has no client).
    std::optional<TimedClient> timed;
    if (client != nullptr) {
      timed.emplace(client, clock, &comm,
                    shared != nullptr ? std::function<void()>(run_deferred) : nullptr);
    }
    env.ps = timed ? &*timed : nullptr;
    env.collective = collective;
    env.initial = initial;
    env.optimizer = optimizer.get();
    env.clock = &clock;
    env.options = s.options.worker;
    env.options.learning_rate = s.learning_rate;
    if (shared != nullptr) {
      ASGD_CHECK_EQ(static_cast<int64_t>(shared->gradient.size()), n_params,
                    "shared gradient size");
      env.scratch_gradient = shared->gradient;
      env.push_pull_in_place = true;
    }
    // Where a non-finite loss came from: the first non-finite parameter it was computed
    // on (-1: none), looked up only when the loss is not finite.
    int64_t non_finite_param = -1;
    env.gradient = [&](std::span<const float> params, std::span<float> grad) {
      run_deferred();
      datasets::BatchView batch = sampler.Next();
      last_batch = batch.size;
      const Duration t0 = clock.Now();
      const Duration cpu0 = s.after_gradient ? sim::ThreadCpuTime() : Duration::zero();
      const float loss = local->LossAndGradient(params, batch, grad);
      if (s.after_gradient) {
        const Duration cpu = sim::ThreadCpuTime() - cpu0;
        if (shared != nullptr) {
          deferred_cpu = cpu;
        } else {
          s.after_gradient(cpu);
        }
      }
      compute += clock.Now() - t0;
      if (!std::isfinite(loss)) non_finite_param = FirstNonFinite(params);
      return loss;
    };
    AlignedVector<float> sparse_params;
    models::SparseGradient sparse_grad;
    std::vector<int64_t> touched;
    if (s.sparse) {
      sparse_params.assign(static_cast<std::size_t>(n_params), 0.0f);
      env.sparse_gradient = [&](const alg::SparseReader& read, alg::SparseUpdate* grad,
                                alg::Status* status) -> float {
        run_deferred();
        datasets::BatchView batch = sampler.Next();
        last_batch = batch.size;
        local->SparseCoordinates(batch, &touched);
        *status = read(touched, sparse_params);
        if (!status->ok()) return std::nanf("");
        const Duration t0 = clock.Now();
        const Duration cpu0 = s.after_gradient ? sim::ThreadCpuTime() : Duration::zero();
        const float loss = local->LossAndSparseGradient(sparse_params, batch, &sparse_grad);
        if (s.after_gradient) s.after_gradient(sim::ThreadCpuTime() - cpu0);
        compute += clock.Now() - t0;
        grad->indices.swap(sparse_grad.indices);
        grad->values.swap(sparse_grad.values);
        return loss;
      };
    }
    auto rule = s.strategy->worker_rule(s.options);
    alg::Status st = rule->Start(env);
    run_deferred();
    if (!st.ok()) {
      if (!ending(st)) outcome.failure = StrCat("worker ", w, ": first pull: ", st.ToString());
      publish();
      return outcome;
    }
    if (hooks.started) hooks.started(*rule);
    const Duration first_step = clock.Now();
    for (;;) {
      double lr_scale = 1.0;
      if (!hooks.before_step(&lr_scale)) break;
      env.learning_rate_scale = lr_scale;
      const Duration step_start = clock.Now();
      alg::StepResult r = rule->Step(env);
      run_deferred();
      const Duration step_end = clock.Now();
      in_steps += step_end - step_start;
      live_.active_ns.store((step_end - first_step).count(), std::memory_order_relaxed);
      if (ending(r.status)) break;
      if (!r.status.ok() && hooks.recover && hooks.recover(r.status)) {
        st = rule->Start(env);
        run_deferred();
        if (!st.ok()) {
          if (!ending(st))
            outcome.failure = StrCat("worker ", w, ": pull after recovery: ", st.ToString());
          break;
        }
        continue;
      }
      if (!std::isfinite(r.loss)) {
        outcome.nan_loss = true;
        NonFiniteLoss f;
        f.worker = w;
        f.loss = r.loss;
        f.learning_rate = s.learning_rate;
        f.strategy = s.strategy->name;
        f.shared_memory = s.strategy->shared_memory;
        f.worker_element = non_finite_param;
        if (f.worker_element >= 0 && !f.shared_memory && client != nullptr) {
          // Were the server's parameters already non-finite? One pull, on this failure
          // path only (it fails harmlessly if the store is shutting down).
          std::vector<float> server(static_cast<std::size_t>(client->size()));
          if (client->Pull(server).ok()) f.server_element = FirstNonFinite(server);
        }
        outcome.failure = DescribeNonFiniteLoss(f);
        break;
      }
      if (!r.status.ok()) {
        outcome.failure = StrCat("worker ", w, ": ", r.status.ToString());
        break;
      }
      live_.steps.fetch_add(r.local_steps, std::memory_order_relaxed);
      live_.samples.fetch_add(last_batch, std::memory_order_relaxed);
      live_.pushes.fetch_add(r.pushes, std::memory_order_relaxed);
      publish();
      if (hooks.after_step) hooks.after_step(r, last_batch);
    }
    if (outcome.failure.empty()) {
      st = rule->Finish(env);
      run_deferred();
      if (!st.ok() && !ending(st))
        outcome.failure = StrCat("worker ", w, ": finishing: ", st.ToString());
    }
  } catch (const std::exception& e) {
    outcome.failure = StrCat("worker ", w, ": ", e.what());
  }
  publish();
  return outcome;
}

}  // namespace asgd::experiments
