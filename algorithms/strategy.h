// The strategy interface (DESIGN.md §3): a strategy is a worker rule and a server rule,
// registered by name; the name is the `algorithm` column in every CSV.
//
// Worker rules are written in blocking style against a ParamClient (pull, push,
// push-pull, clock), with three implementations: the ZeroMQ client (experiments/ wires
// transport::PsClient), the in-memory store of memory_store.h (deterministic tests, and
// a single-process run without sockets) and the lock-free shared vector of hogwild.h.
// Rules see spans and step metadata only: no sockets, no Eigen types, no wall clock (time
// comes from the injected Clock).
//
// Server rules are transport::ServerRule objects (transport/server_rule.h, an interface
// header), so the same rule object runs inside a ShardServer or the in-memory store.
//
// Thread safety: a WorkerRule and its WorkerEnv belong to one worker thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "algorithms/optimizer.h"
#include "core/clock.h"
#include "transport/server_rule.h"
#include "transport/status.h"

namespace asgd::algorithms {

using transport::Status;

// What a worker needs from the parameter store. Every call blocks until the store
// answered (or the client's timeout passed: a Status, not an exception).
class ParamClient {
 public:
  virtual ~ParamClient() = default;
  // Elements of the flat parameter vector.
  virtual int64_t size() const = 0;
  // Reads the whole vector into out and remembers the version(s) read; the next push
  // carries them, so the store can compute staleness (DESIGN.md §4).
  virtual Status Pull(std::span<float> out) = 0;
  // Sends update to the store, tagged with the worker's step; the server rule decides
  // what it does with it (add, damp, aggregate, ...).
  virtual Status Push(std::span<const float> update, int64_t step) = 0;
  // Atomically pushes update and reads into out what the rule replies (by default the
  // values after the push). update and out must not overlap.
  virtual Status PushPull(std::span<const float> update, std::span<float> out, int64_t step) = 0;
  // Announces that the worker finished clock `clock` (SSP, synchronous rounds); returns
  // when the rule lets it go on.
  virtual Status SendClock(int64_t clock) = 0;
  // Pushes this client's pushes dropped as stale so far (synchronous rules).
  virtual int64_t dropped_pushes() const = 0;
};

// The mini-batch gradient the worker's model computes: loss and gradient at params on
// the worker's next mini-batch (draws it). Examples of the batch are added to *samples.
using GradientFn = std::function<float(std::span<const float> params, std::span<float> grad)>;

// Per-worker settings from the config, read by the worker rules that use them.
struct WorkerOptions {
  // Local learning rate η (the local optimizer's rate). Default 0.05.
  double learning_rate = 0.05;
  // Communication window W: local steps per push (DOWNPOUR n_push, AGN λ, ...). Default 1.
  int64_t window = 1;
  // DOWNPOUR's n_fetch: local steps between pulls. Default 1 (every step).
  int64_t fetch_window = 1;
};

// Everything a worker rule works with. Built by the runner (or a test).
struct WorkerEnv {
  int worker = 0;       // 0-based index
  int num_workers = 1;
  ParamClient* ps = nullptr;       // not owned
  GradientFn gradient;             // the worker's model on its data shard
  Optimizer* optimizer = nullptr;  // local optimizer, not owned
  const Clock* clock = nullptr;    // not owned
  WorkerOptions options;
  double learning_rate_scale = 1.0;  // the runner's schedule (e.g. decay per epoch)
};

// What one Step did.
struct StepResult {
  float loss = 0;          // mini-batch loss of the step
  int64_t local_steps = 1; // gradient evaluations in this step (1 today)
  int64_t pushes = 0;      // pushes sent during the step
  Status status;           // the first failed store call, if any
};

// The worker side of a strategy. The runner calls Start once, Step until the run's stop
// condition, then Finish.
class WorkerRule {
 public:
  virtual ~WorkerRule() = default;
  // Typically: the first pull.
  virtual Status Start(WorkerEnv& env) = 0;
  // One mini-batch step and whatever communication is due after it.
  virtual StepResult Step(WorkerEnv& env) = 0;
  // At the end of the run. The strategies built on a window drop a partial window (as
  // dist-keras does), so every push covers exactly W steps; the header of each says so.
  virtual Status Finish(WorkerEnv& env) {
    (void)env;
    return Status::Ok();
  }
};

struct StrategyOptions {
  WorkerOptions worker;
  int num_workers = 1;
  // dynsgd: none. downpour: "add" or "adagrad" (DistBelief's server-side Adagrad).
  std::string server_optimizer = "add";
  // Server-side Adagrad's learning rate γ and initial accumulator (DistBelief form).
  double server_learning_rate = 0.01;
  double server_initial_accumulator = 0.1;
};

// A registered strategy.
struct Strategy {
  std::string name;         // registry name, e.g. "agn"
  std::string description;  // one line, with the source
  // Runs on threads that share one vector without a store (hogwild).
  bool shared_memory = false;
  std::function<std::unique_ptr<WorkerRule>(const StrategyOptions&)> worker_rule;
  // Per shard; shard = 0 for the in-memory store.
  std::function<std::unique_ptr<transport::ServerRule>(const StrategyOptions&, uint32_t shard)>
      server_rule;
};

// The registry. Throws ConfigError("algorithm.name", name, "one of ...") if unknown.
const Strategy& FindStrategy(const std::string& name);
// Registered names (aliases included), sorted.
std::vector<std::string> StrategyNames();

}  // namespace asgd::algorithms
