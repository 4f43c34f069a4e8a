// The strategy interface (docs/architecture.md#strategies-a-worker-rule-and-a-server-rule):
// a strategy is a worker rule and a server rule,
// registered by name; the name is the `algorithm` column in every CSV.
//
// Worker rules are written in blocking style against a ParamClient (ps/param_client.h:
// pull, push, push-pull, clock), with four implementations: the ZeroMQ client
// (transport/ps_param_client.h), the in-memory store of memory_store.h (deterministic
// tests, and a single-process run without sockets), the lock-free shared vector of
// hogwild.h and the simulated store (sim/sim_store.h).
// Rules see spans and step metadata only: no sockets, no Eigen types, no wall clock (time
// comes from the injected Clock).
//
// Server rules are ps::ServerRule objects (ps/server_rule.h, an interface
// header), so the same rule object runs inside a ShardServer or the in-memory store.
//
// Thread safety: a WorkerRule and its WorkerEnv belong to one worker thread.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "algorithms/optimizer.h"
#include "algorithms/schedule.h"
#include "algorithms/settings.h"
#include "compression/compressor.h"
#include "core/clock.h"
#include "core/gradient_ready.h"
#include "core/param_layout.h"
#include "ps/param_client.h"
#include "ps/server_rule.h"
#include "ps/status.h"

namespace asgd::collective {
class Collective;  // collective/collective.h
}

namespace asgd::algorithms {

// The mini-batch gradient the worker's model computes: loss and gradient at params on
// the worker's next mini-batch (draws it). Examples of the batch are added to *samples.
using GradientFn = std::function<float(std::span<const float> params, std::span<float> grad)>;
// GradientFn that also tells `ready` which ranges of grad are final while the model's
// backward pass runs (models/model.h, LossAndGradientReporting): the same batch, loss and
// gradient bits as GradientFn.
using ReportingGradientFn = std::function<float(std::span<const float> params,
                                                std::span<float> grad, GradientReady& ready)>;

// A sparse gradient: only the listed coordinates (unique, increasing) may be non-zero.
struct SparseUpdate {
  std::vector<int64_t> indices;
  std::vector<float> values;
};
// Reads the parameters at the given coordinates into params[indices[i]].
using SparseReader =
    std::function<ps::Status(std::span<const int64_t> indices, std::span<float> params)>;
// The sparse form of GradientFn, for models whose mini-batch gradient touches few
// coordinates (logistic regression on LIBSVM data): draws the next batch, reads the
// parameters it needs through `read` (only those) and writes the gradient at the
// coordinates it touches into *grad. Returns the loss, or NaN with *status set if the
// read failed.
using SparseGradientFn =
    std::function<float(const SparseReader& read, SparseUpdate* grad, ps::Status* status)>;

// Per-worker settings from the config, read by the worker rules that use them.
struct WorkerOptions {
  // Local learning rate η (the local optimizer's rate). Default 0.05.
  double learning_rate = 0.05;
  // Communication window W: local steps per push (DOWNPOUR n_push, AGN λ, ...). Default 1.
  int64_t window = 1;
  // DOWNPOUR's n_fetch: local steps between pulls. Default 1 (every step).
  int64_t fetch_window = 1;
  // allreduce_sgd (collective.overlap, collective.bucket_kib): allreduce the gradient in
  // buckets of bucket_floats from its end, each as soon as backward has produced it
  // (collective/bucketed_allreduce.h), when the runner provides
  // WorkerEnv::reporting_gradient; else one allreduce after the whole backward.
  bool overlap = false;
  int64_t bucket_floats = 65536;  // 256 KiB
};

// One θ and one optimizer for ranks whose replicas stay identical (Strategy::
// identical_replicas: allreduce_sgd), kept once by a simulation whose ranks are tasks of one
// scheduler (issue 33): every rank applies the same mean gradient with the same optimizer
// state to the same θ, so N copies would hold the same bits. The first rank to resume from
// a round's allreduce applies that round's step; the others find it applied (`rounds`).
// Not for real runs, whose ranks run at once.
struct SharedReplica {
  std::vector<float> theta;              // the replicas' θ
  std::vector<float> mean;               // the round's mean gradient (scratch)
  std::unique_ptr<Optimizer> optimizer;  // the replicas' optimizer (its state included)
  int64_t rounds = -1;                   // rounds applied; -1: θ not set (before the start)
};

// Everything a worker rule works with. Built by the runner (or a test).
struct WorkerEnv {
  int worker = 0;  // 0-based index
  int num_workers = 1;
  ps::ParamClient* ps = nullptr;  // not owned
  GradientFn gradient;            // the worker's model on its data shard
  // The same model reporting its gradient by ranges (ReportingGradientFn); set by the
  // runners of real workers, empty in the simulator and where a test gives none.
  ReportingGradientFn reporting_gradient;
  // Set by the runner when the model has sparse gradients and the strategy can use them
  // (hogwild with plain SGD); empty otherwise.
  SparseGradientFn sparse_gradient;
  Optimizer* optimizer = nullptr;  // local optimizer, not owned
  const Clock* clock = nullptr;    // not owned
  WorkerOptions options;
  double learning_rate_scale = 1.0;  // the runner's schedule (e.g. decay per epoch)
  // The seed of the rule's own random choices (signsgd_vote's sign of an exact zero):
  // WorkerRuleSeed(run seed, worker), so each worker has its own stream and a run is
  // reproducible.
  uint64_t seed = 0;
  // Strategies on a collective (Strategy::family kGroup) instead of ps: this worker's rank
  // (rank = worker, size = num_workers), not owned, and its starting parameters (the
  // rules start from rank 0's, broadcast; every rank passes a span of the model's size).
  // Collective calls throw collective::CollectiveError (a peer died or timed out).
  collective::Collective* collective = nullptr;
  std::span<const float> initial;
  // Memory the simulator saves (issue 33; empty / false in real runs, where every
  // worker keeps its own buffers). A rule may ignore both; results do not change.
  // - scratch_gradient: a buffer of the model's size, shared by the workers of one
  //   scheduler thread, for a gradient that the rule consumes before its next `ps` call
  //   (the runner guarantees that no other worker runs between a `gradient` call and the
  //   rule's next `ps` call or the end of its Step).
  // - push_pull_in_place: ps->PushPull(update, out, step) may be given the same span for
  //   update and out (each shard reads its part of the update before writing its part
  //   of the reply), so a rule that needs nothing of its parameters after computing its
  //   push may compute the push into them.
  std::span<float> scratch_gradient;
  bool push_pull_in_place = false;
  // - shared_replica (Strategy::identical_replicas only, not owned): the ranks' one θ and
  //   optimizer (SharedReplica); the rule then keeps neither of its own and ignores
  //   `optimizer`, and reads its allreduce's result with Collective::AllreduceView.
  SharedReplica* shared_replica = nullptr;
};

// Worker w's WorkerEnv::seed in a run of seed `run_seed`: a stream of its own, unrelated to
// the sampler's and the compressor's.
uint64_t WorkerRuleSeed(uint64_t run_seed, int worker);

// What one Step did.
struct StepResult {
  float loss = 0;           // mini-batch loss of the step
  int64_t local_steps = 1;  // gradient evaluations in this step (1 today)
  int64_t pushes = 0;       // pushes sent during the step
  ps::Status status;        // the first failed store call, if any
};

// The worker side of a strategy. The runner calls Start once, Step until the run's stop
// condition, then Finish.
class WorkerRule {
 public:
  virtual ~WorkerRule() = default;
  // Typically: the first pull.
  virtual ps::Status Start(WorkerEnv& env) = 0;
  // One mini-batch step and whatever communication is due after it.
  virtual StepResult Step(WorkerEnv& env) = 0;
  // At the end of the run. The strategies built on a window drop a partial window (as
  // dist-keras does), so every push covers exactly W steps; the header of each says so.
  virtual ps::Status Finish(WorkerEnv& env) {
    (void)env;
    return ps::Status::Ok();
  }
  // The worker's own copy of the parameters as of its last Step (elastic averaging's
  // x^i, a window's local trajectory), for tests and for evaluating local models. Empty
  // for a rule that keeps none.
  virtual std::span<const float> local_params() const { return {}; }
};

struct StrategyOptions {
  WorkerOptions worker;
  int num_workers = 1;
  // The strategies' own settings (Strategy::settings): every registered strategy's, as
  // the config gives them or their defaults; the rules read theirs by name
  // (settings.Double(name), settings.Int(name), settings.String(name)).
  SettingValues settings;
  // aeamsgd: the Nesterov momentum δ of the local step (algorithm.momentum).
  double worker_momentum = 0.9;
  // downpour's server-side Adagrad: the initial accumulator (algorithm.initial_accumulator).
  double server_initial_accumulator = 0.1;
  // Servers that follow the run's schedule: sync_sgd applies the wrapped optimizer once
  // per round (TensorFlow's SyncReplicasOptimizer) with these options and the schedule at
  // the round's epoch; dc_asgd and staleness_aware decay their server rate per epoch.
  // epochs_per_batch = B / training examples turns the batches a shard has applied into
  // epochs (0: the schedule stays at epoch 0).
  OptimizerOptions optimizer;
  ScheduleOptions schedule;
  double epochs_per_batch = 0;
};

// What a strategy's workers exchange with (docs/architecture.md#the-exchange): each strategy
// declares it once (Strategy::family) and every runner picks its worker exchange
// (experiments/run/exchange.h) and its store or group by it, not by the strategy's other
// traits.
enum class Family {
  // The sequential baseline: one worker, no peers; the runner trains it itself.
  kSequential,
  // Through a parameter store: the worker rule pulls and pushes through WorkerEnv::ps (a
  // ps::ParamClient); the store applies the strategy's server rule.
  kStore,
  // Within a group of peers: the worker rule allreduces, broadcasts or gossips through
  // WorkerEnv::collective (collective/collective.h); no store and no server rule.
  kGroup,
};
// "sequential", "store", "group" (logs and errors).
const char* FamilyName(Family family);

// A registered strategy: its rules and the traits code outside algorithms/ asks (no caller
// compares a strategy's name).
struct Strategy {
  std::string name;         // registry name, e.g. "agn"
  std::string description;  // one line, with the source
  // Its family: the one place a strategy says whether it runs alone, on a store or in a
  // group. The default is the parameter-server family.
  // kSequential (sgd): one worker and no store; the runner trains it itself, so
  // worker_rule and server_rule are empty. kGroup: the worker rule uses
  // WorkerEnv::collective and initial, server_rule is empty, and every worker takes the
  // same number of steps.
  Family family = Family::kStore;
  // Runs on threads that share one vector without a store (hogwild).
  bool shared_memory = false;
  // Workers wait for each other (rounds, clocks): a worker that stops early would block
  // the others, so the runner shuts the store down when the run ends.
  bool synchronous = false;
  // The worker rule uses WorkerEnv::sparse_gradient when the runner provides it.
  bool supports_sparse = false;
  // Synchronous rounds of N pushes (replicas_to_aggregate): an update aggregates N
  // mini-batches, which the linear scaling rule scales the rate by.
  bool rounds = false;
  // Collective strategies whose ranks' parameters and optimizer states stay bit-identical
  // (allreduce_sgd): a simulation may give them one SharedReplica (WorkerEnv::shared_replica).
  bool identical_replicas = false;
  // Collective strategies: the local steps from one communication to the next (local_sgd:
  // H = algorithm.window; 1 otherwise). The runner lets workers stop, and reads their
  // parameters for evaluation, only at these boundaries, where every worker has taken
  // the same steps.
  std::function<int64_t(const StrategyOptions&)> steps_per_round;
  // Compressing the worker's push (compression.name) is meaningful: the push is an update
  // (a gradient, a window's update, an elastic difference), not parameters. Each
  // strategy's source says why; the runner refuses compression for the others.
  bool supports_compression = false;
  // The compression.name values the strategy takes besides none; empty = every one
  // (signsgd_vote pushes signs: sign only).
  std::vector<std::string> compressors;
  // Workers announce clocks (SendClock) and the server bounds how far apart they run
  // (ssp): a run needs every worker's clock to go on.
  bool clocks = false;
  // Runs under the virtual-time cluster simulator (cluster.transport = sim): its workers
  // talk to the store only through a ParamClient, so a simulated client can suspend them.
  // False for the sequential baseline and for hogwild (shared memory, no messages). The
  // strategies on a collective run on a simulated collective instead of the simulated
  // store (sim/sim_collective.h).
  bool can_simulate = true;
  // The strategy's own settings (settings.h): each is the config key algorithm.<name>,
  // with its type, default, range and help; the config table and StrategyOptions::settings
  // are made from them. A setting several strategies share (elastic_alpha,
  // replicas_to_aggregate, ...) is declared alike by each, from one function beside the
  // rule they share.
  std::vector<Setting> settings;
  // The `algorithm.*` config keys the strategy reads (ReadKeys), its settings' keys
  // included (the registry adds them); a config that sets any other algorithm.* key is
  // told it is ignored.
  std::vector<std::string> keys;
  // Checks of a config with this strategy that involve several keys (easgd's stability
  // condition on elastic_alpha and workers): throws ConfigError naming a key, the value
  // and what was expected. Empty = none.
  std::function<void(const StrategyOptions&)> check;
  std::function<std::unique_ptr<WorkerRule>(const StrategyOptions&)> worker_rule;
  // Per shard; shard = 0 for the in-memory store.
  std::function<std::unique_ptr<ps::ServerRule>(const StrategyOptions&, uint32_t shard)>
      server_rule;
};

// Groups of algorithm.* keys for Strategy::keys.
enum KeyGroup : unsigned {
  // algorithm.name, workers, batch_size, learning_rate: every strategy reads them.
  kCommonKeys = 0,
  // The worker's local optimizer: optimizer, momentum, beta1, beta2, epsilon,
  // initial_accumulator, weight_decay.
  kOptimizerKeys = 1u << 0,
  // The worker's learning-rate schedule: lr_decay, linear_scaling, warmup_epochs,
  // worker_learning_rates.
  kScheduleKeys = 1u << 1,
};
// The common keys, the groups' keys and `own` (full names, "algorithm.window"), sorted.
std::vector<std::string> ReadKeys(unsigned groups, std::initializer_list<const char*> own = {});
// Every algorithm.* key some strategy reads, sorted.
std::vector<std::string> AllStrategyKeys();

// The registry. Throws ConfigError("algorithm.name", name, "one of ...") if unknown.
const Strategy& FindStrategy(const std::string& name);
// The registered strategy of that name (an alias included), or nullptr.
const Strategy* TryFindStrategy(const std::string& name);
// Registered names (aliases included, the sequential baseline sgd too), sorted.
std::vector<std::string> StrategyNames();
// Each registered strategy once (aliases left out), by name.
std::vector<const Strategy*> Strategies();

}  // namespace asgd::algorithms
