#include "experiments/run/worker_loop.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "algorithms/exchange.h"
#include "core/aligned.h"
#include "core/check.h"
#include "core/rng.h"
#include "datasets/sampler.h"
#include "experiments/record/run_core.h"
#include "ps/compressing_client.h"
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

double WorkerLoop::ResidualNorm() const {
  std::lock_guard<std::mutex> lock(residual_.mu);
  return residual_.compressing != nullptr ? residual_.compressing->ResidualNorm() : residual_.last;
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
  if (f.first_step) {
    return NonFiniteFirstLossReason(f.loss, StrCat(" on worker ", f.worker), f.model);
  }
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

double ResidualNorm(std::span<const std::unique_ptr<WorkerLoop>> loops) {
  double sq = 0;
  for (const auto& loop : loops) {
    const double n = loop->ResidualNorm();
    sq += n * n;
  }
  return std::sqrt(sq);
}

// One run of a worker rule (WorkerLoop::Run): what the rule steps with (the worker's
// model, sampler, optimizer, its open exchange and the WorkerEnv with its gradient
// callbacks), the times the metrics report, and the loop of steps.
class WorkerLoop::Pass {
 public:
  Pass(const WorkerSetup& setup, Live& live, Residual& residual, alg::Exchange& exchange)
      : s_(setup),
        clock_(*setup.clock),
        live_(live),
        residual_(residual),
        exchange_(exchange),
        // Simulated workers share the scratch (WorkerSetup::shared) when the rule uses each
        // gradient before its next exchange call; otherwise only its model (PrepareModel).
        shared_(exchange.GradientUsedBeforeNextCall() ? setup.shared : nullptr) {}

  // The chain goes with the pass: its residual stays readable (WorkerLoop::ResidualNorm).
  ~Pass() {
    std::lock_guard<std::mutex> lock(residual_.mu);
    if (residual_.compressing != nullptr) residual_.last = residual_.compressing->ResidualNorm();
    residual_.compressing = nullptr;
  }

  // Builds what the rule steps with, then starts the rule and steps it until the hooks
  // stop it, the run ends, or a failure (in *outcome). Throws what the model, the sampler
  // or the rule throw.
  void Run(const WorkerHooks& hooks, WorkerOutcome* outcome) {
    Prepare();
    auto rule = s_.strategy->worker_rule(s_.options);
    ps::Status st = rule->Start(env_);
    RunDeferred();
    if (!st.ok()) {
      if (!Ending(hooks, st)) {
        outcome->failure = StrCat("worker ", s_.worker, ": first pull: ", st.ToString());
      }
      return;
    }
    if (hooks.started) hooks.started(*rule);
    Steps(*rule, hooks, outcome);
    if (outcome->failure.empty()) {
      st = rule->Finish(env_);
      RunDeferred();
      if (!st.ok() && !Ending(hooks, st)) {
        outcome->failure = StrCat("worker ", s_.worker, ": finishing: ", st.ToString());
      }
    }
  }

  // The times and the traffic so far into the live metrics.
  void Publish() {
    live_.compute_ns.store(compute_.count(), std::memory_order_relaxed);
    live_.wait_ns.store(std::max<int64_t>(0, (in_steps_ - compute_).count()),
                        std::memory_order_relaxed);
    live_.comm_ns.store(comm_.count(), std::memory_order_relaxed);
    if (const std::optional<alg::ExchangeTraffic> t = exchange_.Traffic()) {
      live_.bytes_pushed.store(t->bytes_pushed, std::memory_order_relaxed);
      live_.dense_bytes_pushed.store(t->dense_bytes_pushed, std::memory_order_relaxed);
      live_.bytes_pulled.store(t->bytes_pulled, std::memory_order_relaxed);
      live_.dropped.store(t->dropped_pushes, std::memory_order_relaxed);
    }
  }

 private:
  // What the rule steps with: the model, sampler and optimizer, the open exchange, the env.
  void Prepare() {
    PrepareModel();
    OpenExchange();
    PrepareEnv();
  }

  // The worker's model (its own clone, or the shared one), sampler and optimizer.
  void PrepareModel() {
    const int w = s_.worker;
    // Simulated workers share the model whatever their exchange (its scratch is dead
    // between two gradients, and no worker yields inside one); the gradient buffer only
    // when shared_ says so.
    if (s_.shared == nullptr) own_model_ = s_.model->Clone();
    model_ = s_.shared != nullptr ? s_.shared->model.get() : own_model_.get();
    datasets::SamplerOptions sopt;
    sopt.batch_size = s_.batch_size;
    sopt.seed = DeriveSeed(s_.seed, "sampler", static_cast<uint64_t>(w));
    sopt.augment = s_.augment;
    sopt.augment.seed = DeriveSeed(s_.seed, "augment", static_cast<uint64_t>(w));
    sampler_.emplace(*s_.train, s_.examples, sopt);
    dropout_seed_ = DeriveSeed(s_.seed, "dropout", static_cast<uint64_t>(w));
    for (int64_t i = 0; i < s_.skip_batches; ++i) (void)sampler_->Next();
    if (s_.shared_replica == nullptr) {
      optimizer_ = alg::NewOptimizer(s_.optimizer, model_->layout().size());
    }
  }

  // The worker's peers in the env (exchange.h): a store's calls timed as communication
  // and its pushes compressed as [compression] says, or the group's rank.
  void OpenExchange() {
    alg::ExchangeContext context;
    context.worker = s_.worker;
    context.compression = s_.compression;
    context.compression_seed = s_.compression_seed;
    context.tensors = model_->layout().tensors();
    context.clock = &clock_;
    context.comm_total = &comm_;
    if (shared_ != nullptr) context.before_call = [this] { RunDeferred(); };
    exchange_.Open(context, env_);
    std::lock_guard<std::mutex> lock(residual_.mu);
    residual_.compressing = exchange_.compressing();
  }

  // The rest of the env: the optimizer, the options and the gradient callbacks.
  void PrepareEnv() {
    const int64_t n_params = model_->layout().size();
    env_.worker = s_.worker;
    env_.num_workers = s_.num_workers;
    env_.seed = alg::WorkerRuleSeed(s_.seed, s_.worker);
    env_.optimizer =
        s_.shared_replica != nullptr ? s_.shared_replica->optimizer.get() : optimizer_.get();
    env_.shared_replica = s_.shared_replica;
    env_.clock = &clock_;
    env_.options = s_.options.worker;
    env_.options.learning_rate = s_.learning_rate;
    if (shared_ != nullptr) {
      ASGD_CHECK_EQ(static_cast<int64_t>(shared_->gradient.size()), n_params,
                    "shared gradient size");
      env_.scratch_gradient = shared_->gradient;
      env_.push_pull_in_place = true;
    }
    env_.gradient = [this](std::span<const float> params, std::span<float> grad) {
      return Gradient(params, grad, nullptr);
    };
    env_.reporting_gradient = [this](std::span<const float> params, std::span<float> grad,
                                     GradientReady& ready) {
      return Gradient(params, grad, &ready);
    };
    if (s_.sparse) {
      sparse_params_.assign(static_cast<std::size_t>(n_params), 0.0f);
      env_.sparse_gradient = [this](const alg::SparseReader& read, alg::SparseUpdate* grad,
                                    ps::Status* status) {
        return SparseGradient(read, grad, status);
      };
    }
  }

  // The rule's steps, each scaled by the hooks' schedule, until before_step stops them,
  // the run ends, or a failure.
  void Steps(alg::WorkerRule& rule, const WorkerHooks& hooks, WorkerOutcome* outcome) {
    const Duration first_step = clock_.Now();
    for (;;) {
      double lr_scale = 1.0;
      if (!hooks.before_step(&lr_scale)) return;
      env_.learning_rate_scale = lr_scale;
      const Duration step_start = clock_.Now();
      alg::StepResult r = rule.Step(env_);
      RunDeferred();
      const Duration step_end = clock_.Now();
      in_steps_ += step_end - step_start;
      live_.active_ns.store((step_end - first_step).count(), std::memory_order_relaxed);
      if (Ending(hooks, r.status)) return;
      if (!r.status.ok() && hooks.recover && hooks.recover(r.status)) {
        const ps::Status st = rule.Start(env_);
        RunDeferred();
        if (!st.ok()) {
          if (!Ending(hooks, st)) {
            outcome->failure =
                StrCat("worker ", s_.worker, ": pull after recovery: ", st.ToString());
          }
          return;
        }
        continue;
      }
      if (!std::isfinite(r.loss)) {
        outcome->nan_loss = true;
        outcome->failure = DescribeNonFiniteLoss(NonFinite(r.loss));
        return;
      }
      if (!r.status.ok()) {
        outcome->failure = StrCat("worker ", s_.worker, ": ", r.status.ToString());
        return;
      }
      live_.steps.fetch_add(r.local_steps, std::memory_order_relaxed);
      live_.samples.fetch_add(last_batch_, std::memory_order_relaxed);
      live_.pushes.fetch_add(r.pushes, std::memory_order_relaxed);
      Publish();
      if (hooks.after_step) hooks.after_step(r, last_batch_);
    }
  }

  // Once the hooks say the run is ending, an answer that did not come ends the loop
  // quietly: kShuttingDown (the store closed a synchronous round), or a timeout or an abort
  // (a request to a shard that died, which a run that stopped no longer restores). Its
  // request was the worker's last.
  // The hook is asked only then (a simulated pace's answer checks the run's limits).
  static bool Ending(const WorkerHooks& hooks, const ps::Status& st) {
    const bool unanswered = st.error_code() == ps::ErrorCode::kShuttingDown ||
                            st.code() == ps::StatusCode::kTimeout ||
                            st.code() == ps::StatusCode::kAborted;
    return unanswered && hooks.ending && hooks.ending();
  }

  // The deferred after_gradient of the last gradient (shared scratch only), timed as compute.
  void RunDeferred() {
    if (!deferred_cpu_) return;
    const Duration cpu = *deferred_cpu_;
    deferred_cpu_.reset();
    const Duration t0 = clock_.Now();
    s_.after_gradient(cpu);
    compute_ += clock_.Now() - t0;
  }

  // WorkerEnv::gradient: the next batch's loss and gradient at params, timed as compute,
  // with the step-time model applied (at once, or deferred when the scratch is shared);
  // WorkerEnv::reporting_gradient when `ready` is not null (the model reports its ranges).
  float Gradient(std::span<const float> params, std::span<float> grad, GradientReady* ready) {
    RunDeferred();
    datasets::BatchView batch = sampler_->Next();
    last_batch_ = batch.size;
    const Duration t0 = clock_.Now();
    const Duration cpu0 = s_.after_gradient ? sim::ThreadCpuTime() : Duration::zero();
    // Seeded before every gradient, so that the k-th gradient of worker w draws the same
    // (dropout) whether the model is this worker's or shared (simulated workers).
    model_->SeedTraining(dropout_seed_, gradients_);
    const float loss = ready != nullptr
                           ? model_->LossAndGradientReporting(params, batch, grad, *ready)
                           : model_->LossAndGradient(params, batch, grad);
    if (s_.after_gradient) {
      const Duration cpu = sim::ThreadCpuTime() - cpu0;
      if (shared_ != nullptr) {
        deferred_cpu_ = cpu;
      } else {
        s_.after_gradient(cpu);
      }
    }
    compute_ += clock_.Now() - t0;
    if (!std::isfinite(loss)) {
      non_finite_param_ = FirstNonFinite(params);
      first_step_ = gradients_ == 0 && non_finite_param_ < 0 && AtInitialParameters(params);
    }
    ++gradients_;
    return loss;
  }

  // Whether params are the run's θ₀ (every driver initialises with DeriveSeed(seed,
  // "init")): on the failure path only. A resumed run's seed differs, and so do its
  // parameters, which updates made.
  bool AtInitialParameters(std::span<const float> params) const {
    std::vector<float> initial(params.size());
    model_->Initialize(initial, DeriveSeed(s_.seed, "init"));
    return std::equal(params.begin(), params.end(), initial.begin());
  }

  // WorkerEnv::sparse_gradient (hogwild's sparse path): reads the batch's coordinates
  // through `read`, then their loss and sparse gradient.
  float SparseGradient(const alg::SparseReader& read, alg::SparseUpdate* grad, ps::Status* status) {
    RunDeferred();
    datasets::BatchView batch = sampler_->Next();
    last_batch_ = batch.size;
    model_->SparseCoordinates(batch, &touched_);
    *status = read(touched_, sparse_params_);
    if (!status->ok()) return std::nanf("");
    const Duration t0 = clock_.Now();
    const Duration cpu0 = s_.after_gradient ? sim::ThreadCpuTime() : Duration::zero();
    const float loss = model_->LossAndSparseGradient(sparse_params_, batch, &sparse_grad_);
    if (s_.after_gradient) s_.after_gradient(sim::ThreadCpuTime() - cpu0);
    compute_ += clock_.Now() - t0;
    grad->indices.swap(sparse_grad_.indices);
    grad->values.swap(sparse_grad_.values);
    return loss;
  }

  // What is known about a step's non-finite loss.
  NonFiniteLoss NonFinite(float loss) const {
    NonFiniteLoss f;
    f.worker = s_.worker;
    f.loss = loss;
    f.learning_rate = s_.learning_rate;
    f.strategy = s_.strategy->name;
    f.shared_memory = s_.strategy->shared_memory;
    f.worker_element = non_finite_param_;
    f.first_step = first_step_;
    f.model = model_->Source();
    // Were the server's parameters already non-finite? One pull, on this failure path only.
    if (f.worker_element >= 0 && !f.shared_memory) {
      f.server_element = exchange_.PeersFirstNonFinite();
    }
    return f;
  }

  const WorkerSetup& s_;
  const Clock& clock_;
  Live& live_;
  Residual& residual_;
  alg::Exchange& exchange_;
  SharedWorkerScratch* const shared_;

  Duration compute_{0};   // in gradient evaluations (the model)
  Duration in_steps_{0};  // in Step calls (compute, communication, waiting)
  Duration comm_{0};      // in the client chain's calls
  // The CPU time of the last gradient whose after_gradient is deferred (shared only).
  std::optional<Duration> deferred_cpu_;
  int64_t last_batch_ = 0;  // the examples of the last batch drawn
  // The first non-finite parameter the last loss was computed on (-1: none), looked up
  // only when the loss is not finite.
  int64_t non_finite_param_ = -1;
  // Gradients this worker evaluated (the step count SeedTraining gets), whether the first
  // was non-finite on θ₀, and the seed of its models' random draws.
  int64_t gradients_ = 0;
  bool first_step_ = false;
  uint64_t dropout_seed_ = 0;

  std::unique_ptr<models::Model> own_model_;  // null when the scratch is shared
  models::Model* model_ = nullptr;
  std::optional<datasets::BatchSampler> sampler_;
  std::unique_ptr<alg::Optimizer> optimizer_;
  alg::WorkerEnv env_;
  AlignedVector<float> sparse_params_;
  models::SparseGradient sparse_grad_;
  std::vector<int64_t> touched_;
};

WorkerOutcome WorkerLoop::Run(ps::ParamClient& store, const WorkerHooks& hooks) {
  return Run(*alg::NewStoreExchange(&store), hooks);
}

WorkerOutcome WorkerLoop::Run(collective::Collective& collective, std::span<const float> initial,
                              const WorkerHooks& hooks) {
  return Run(*alg::NewGroupExchange(&collective, initial), hooks);
}

WorkerOutcome WorkerLoop::Run(alg::Exchange& exchange, const WorkerHooks& hooks) {
  WorkerOutcome outcome;
  Pass pass(setup_, live_, residual_, exchange);
  try {
    pass.Run(hooks, &outcome);
  } catch (const std::exception& e) {
    outcome.failure = StrCat("worker ", setup_.worker, ": ", e.what());
  }
  pass.Publish();
  return outcome;
}

}  // namespace asgd::experiments
