// One worker's training loop, shared by the in-process runner (a thread per worker), the
// simulated workers and the `asgd worker` process: draws mini-batches from the worker's
// partition, runs the strategy's worker rule against the worker's exchange with its peers
// (algorithms/exchange.h: a client chain over its store's ParamClient with timing and
// compression, or its rank of a group), whatever its family, and measures the worker
// (WorkerMetrics: steps, samples, compute, wait and communication time, traffic, dropped
// pushes).
//
// The caller decides when to stop and what the learning-rate schedule says, through
// hooks, so the same loop serves a shared-memory counter (threads) and a coordinator's
// replies (processes).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "algorithms/exchange.h"
#include "algorithms/optimizer.h"
#include "algorithms/strategy.h"
#include "compression/compressor.h"
#include "core/clock.h"
#include "core/thread_annotations.h"
#include "datasets/augment.h"
#include "datasets/dataset.h"
#include "experiments/record/metrics.h"
#include "models/model.h"
#include "sim/delay_model.h"

namespace asgd::ps {
class CompressingClient;  // ps/compressing_client.h
}  // namespace asgd::ps

namespace asgd::experiments {

// What the simulated workers of one scheduler thread share instead of owning (issue
// 33): one of them runs at a time, so one model object (its activations and other
// scratch, dead between two LossAndGradient calls) and one gradient buffer
// (WorkerEnv::scratch_gradient) serve them all. The simulator's driver builds one per
// scheduler and gives it to every loop it runs (WorkerSetup::shared); it outlives them.
struct SharedWorkerScratch {
  explicit SharedWorkerScratch(const models::Model& run_model)
      : model(run_model.Clone()), gradient(static_cast<std::size_t>(model->layout().size())) {}
  std::unique_ptr<models::Model> model;  // a clone of the run's model
  std::vector<float> gradient;           // of the model's size
};

struct WorkerSetup {
  int worker = 0;
  int num_workers = 1;
  const algorithms::Strategy* strategy = nullptr;  // not owned
  algorithms::StrategyOptions options;
  algorithms::OptimizerOptions optimizer;
  double learning_rate = 0.05;               // this worker's base rate
  const models::Model* model = nullptr;      // cloned for the worker; not owned
  const datasets::Dataset* train = nullptr;  // not owned
  std::vector<int64_t> examples;             // the worker's partition of the training set
  int64_t batch_size = 64;
  // Random crops and flips of the training batches (data.random_crop_padding,
  // data.random_flip); the loop seeds them with DeriveSeed(seed, "augment", worker).
  datasets::AugmentOptions augment;
  // The run's seed; the sampler, augmentation and the worker rule's own choices
  // (WorkerEnv::seed) each draw from a stream derived from it and the worker.
  uint64_t seed = 0;
  // Batches drawn from the sampler and discarded before the first step: a resumed run on
  // a collective continues each worker's sequence of batches where the checkpoint left it.
  int64_t skip_batches = 0;
  // [compression] of the worker's pushes (none: dense), applied by the client chain the
  // loop stacks over the store's client (ps/client_chain.h); its stochastic compressors
  // draw from DeriveSeed(compression_seed, "compression", worker) and encode each part in
  // its pieces of the model's tensors. compression_seed is the run's experiment.seed, also
  // in a resumed run (whose `seed` is fresh).
  compression::CompressionOptions compression;
  uint64_t compression_seed = 0;
  bool sparse = false;           // hogwild's sparse path (sparse model, plain SGD)
  const Clock* clock = nullptr;  // not owned
  // Optional: the step-time model (sim/delay_model.h). Called after every gradient
  // evaluation with the CPU time the evaluation took on this thread; it blocks for as
  // long as the model stretches the step (a simulated worker sleeps in virtual time, a
  // real one on the clock: injected delays), and that time counts as compute.
  std::function<void(Duration cpu_time)> after_gradient;
  // Optional, for simulated workers only (not owned): the scratch they share. The loop
  // then evaluates gradients on shared->model, lends the rule shared->gradient, tells it
  // that push-pulls may be done in place (WorkerEnv), and runs each after_gradient not
  // at once but just before the worker's next store call, its next gradient, or the end
  // of its Step, whichever comes first: so no other task runs between a gradient and
  // its use. Nothing runs in between but the rule's own arithmetic and no virtual time
  // passes, so the sleep starts at the same instant and the run is the same to the bit.
  // Runs on a collective (Run with a Collective) use only its model: their gradients stay
  // in the rule's own buffers until the round's allreduce, and the sleep is not deferred.
  SharedWorkerScratch* shared = nullptr;
  // Optional, for simulated ranks of a strategy with identical replicas only (not owned):
  // their one θ and optimizer (algorithms::SharedReplica). The loop then makes no
  // optimizer of its own and hands the rule this one (WorkerEnv::shared_replica).
  algorithms::SharedReplica* shared_replica = nullptr;
};

struct WorkerHooks {
  // Before each step: false ends the loop; otherwise sets *lr_scale (the schedule).
  std::function<bool(double* lr_scale)> before_step;
  // After each successful step: its result and the examples of its batch.
  std::function<void(const algorithms::StepResult& result, int64_t batch)> after_step;
  // True once the run is ending: a kShuttingDown answer (a synchronous worker's last
  // round), a timeout or an abort (a shard that died as the run stopped) then ends the
  // loop quietly, where otherwise it is a failure.
  std::function<bool()> ending;
  // Optional: a step failed with `status` (e.g. a shard that died timed out). True: the
  // run can go on (the hook returns once it may, e.g. after a restarted shard was
  // restored), and the loop starts the worker rule again (a fresh read of the centre);
  // false: the failure ends the loop.
  std::function<bool(const ps::Status& status)> recover;
  // Optional: called once the worker rule has started (its first pull, or for a
  // collective strategy its broadcast), with the rule, whose local_params() the hooks may
  // then read between steps (on this worker's thread).
  std::function<void(const algorithms::WorkerRule& rule)> started;
};

struct WorkerOutcome {
  std::string failure;  // empty: the loop ended as the hooks or the run decided
  bool nan_loss = false;
};

// The [delay] model of a real run (threads or processes) as injected sleeps: worker w's
// WorkerSetup::after_gradient, sleeping on `clock` for DelayModel::ExtraDelay (the model's
// step time minus the gradient's CPU time, if positive). Each worker draws from its own
// stream of the model, so threads share it without locks. delay and clock must outlive
// the loop.
std::function<void(Duration)> InjectedDelay(sim::DelayModel* delay, Clock* clock, int worker);

// What is known about a non-finite training loss, to name its source.
struct NonFiniteLoss {
  int worker = 0;
  float loss = 0;
  double learning_rate = 0;
  std::string strategy;
  bool shared_memory = false;   // hogwild: the workers write the one vector
  int64_t worker_element = -1;  // first non-finite parameter the loss was computed on; -1: none
  int64_t server_element = -1;  // first non-finite value of a fresh pull; -1: none or unknown
  // The worker's first gradient, computed on the run's initial parameters: no update had
  // been applied, so the model itself produced the value.
  bool first_step = false;
  std::string model;  // the model's Source(), for first_step
};
// One line naming where the non-finite value came from: the model itself (first_step:
// no rate is blamed), the step on finite parameters (the model diverged), the server's
// rule (the server's values were already non-finite: shards refuse non-finite pushes), or
// the worker's own local update.
std::string DescribeNonFiniteLoss(const NonFiniteLoss& f);

// Runs the loop until before_step says stop, the run ends, or a failure. Thread-safe as
// far as *metrics goes: its fields are updated after every step with relaxed atomics
// wrapped in `live` (readable by a reporter thread); `final_metrics` is complete after
// return.
class WorkerLoop {
 public:
  explicit WorkerLoop(WorkerSetup setup);
  // The rule talks to its peers through `exchange` (opened for this run, algorithms/
  // exchange.h), which must outlive the call. The metrics' traffic is the exchange's
  // (ExchangeTraffic). A failed exchange call (a Status, or a CollectiveError from a dead
  // or silent peer) is a failure, as WorkerHooks say.
  WorkerOutcome Run(algorithms::Exchange& exchange, const WorkerHooks& hooks);
  // The same with the store exchange over `store` (NewStoreExchange): the rule talks to the
  // worker's client chain (ps/client_chain.h: timing, and
  // setup.compression) over `store`, the store's client for this worker, which must
  // outlive the call.
  WorkerOutcome Run(ps::ParamClient& store, const WorkerHooks& hooks);
  // The same with the group exchange (NewGroupExchange), for a strategy of the group
  // family: the rule talks to `collective` (this worker's rank) and starts from `initial`
  // (rank 0's is broadcast). The metrics' bytes_pushed / bytes_pulled are the payload the
  // collective sent and received (its Counters()).
  WorkerOutcome Run(collective::Collective& collective, std::span<const float> initial,
                    const WorkerHooks& hooks);

  // A consistent-enough copy of the metrics so far (each field read atomically), for
  // periodic reports from another thread.
  WorkerMetrics Snapshot() const;
  // ||e||_2 of the compressing layer's error-feedback residual as of the worker's last
  // push (CompressingClient::ResidualNorm; 0 without compression or before the first
  // push); after Run, as it ended. Any thread may call it.
  double ResidualNorm() const;

 private:
  struct Live {
    std::atomic<int64_t> steps{0}, samples{0}, pushes{0}, bytes_pushed{0}, dense_bytes_pushed{0},
        bytes_pulled{0}, dropped{0};
    std::atomic<int64_t> active_ns{0}, compute_ns{0}, wait_ns{0}, comm_ns{0};
  };
  // The running chain's compressing layer, or (once the chain is gone) its last residual.
  struct Residual {
    mutable std::mutex mu;
    const ps::CompressingClient* compressing ASGD_GUARDED_BY(mu) = nullptr;
    double last ASGD_GUARDED_BY(mu) = 0;
  };
  class Pass;  // one run of the worker rule (worker_loop.cc)

  WorkerSetup setup_;
  Live live_;
  Residual residual_;
};

// The error-feedback residual of all workers: sqrt(sum of ResidualNorm()^2) over the
// loops; convergence.csv's ef_residual_norm.
double ResidualNorm(std::span<const std::unique_ptr<WorkerLoop>> loops);

}  // namespace asgd::experiments
