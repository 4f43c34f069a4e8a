// A worker's exchange: what a worker does with its peers, behind one interface with one
// implementation per strategy family (Strategy::family, strategy.h):
//
//   store  (NewStoreExchange)  push and pull through the worker's client chain
//          (ps/client_chain.h: timing, compression) over its store's ps::ParamClient;
//   group  (NewGroupExchange)  allreduce, broadcast and gossip through this worker's rank
//          of a collective::Collective, starting from rank 0's parameters.
//
// An executor (threads, simulator, processes) makes one exchange per worker from its
// store's client or its group's rank and hands it to the worker's loop
// (experiments/run/worker_loop.h), which opens it into the rule's WorkerEnv and reads
// its traffic; neither the loop nor the executor asks which family it is.
//
// Thread safety: an exchange belongs to its worker's thread, except compressing(), whose
// ResidualNorm() any thread may read (ps/compressing_client.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "algorithms/strategy.h"
#include "compression/compressor.h"
#include "core/clock.h"
#include "core/param_layout.h"

namespace asgd::ps {
class CompressingClient;  // ps/compressing_client.h
}  // namespace asgd::ps

namespace asgd::algorithms {

// What the worker's loop brings when it opens an exchange for one pass of the rule.
struct ExchangeContext {
  int worker = 0;
  // [compression] of the worker's pushes (store: the chain's compressing layer; "none": no
  // layer), its stochastic compressors seeded by DeriveSeed(compression_seed,
  // "compression", worker), each push encoded in the model's tensor pieces (`tensors`,
  // read only while opening). The group family does not compress.
  compression::CompressionOptions compression;
  uint64_t compression_seed = 0;
  std::span<const TensorSpec> tensors;
  // The worker's clock and the total its store calls' time is added to (workers.csv's
  // comm_time_s). Not owned; both outlive the pass. REQUIRES: not null.
  const Clock* clock = nullptr;
  Duration* comm_total = nullptr;
  // Optional: runs before each store call, outside the timing (the simulated worker's
  // deferred compute, worker_loop.h).
  std::function<void()> before_call;
};

// The traffic a worker's exchange carried so far (workers.csv): for the store family what
// reached the store (a compressing layer's encoded bytes) and the pushes it dropped; for
// the group family the payload its rank sent and received (Collective::Counters()).
struct ExchangeTraffic {
  int64_t bytes_pushed = 0;
  int64_t dense_bytes_pushed = 0;  // before compression
  int64_t bytes_pulled = 0;
  int64_t dropped_pushes = 0;
};

class Exchange {
 public:
  virtual ~Exchange() = default;

  // Opens the exchange for one pass of a worker rule and points the rule's env at the
  // peers: WorkerEnv::ps (store) or WorkerEnv::collective and initial (group). A second
  // Open starts a fresh pass (a store's chain is rebuilt). Throws what the chain's
  // compressor throws for bad options.
  virtual void Open(const ExchangeContext& context, WorkerEnv& env) = 0;

  // True when a rule uses each gradient before its next exchange call or the end of its
  // Step (a push of it), so the simulated workers of one scheduler may share a gradient
  // buffer and defer the step-time sleep to that call (worker_loop.h). False when the
  // gradients wait in the rule's buffers for the round's collective call.
  virtual bool GradientUsedBeforeNextCall() const = 0;

  // The traffic so far; empty before Open when there is nothing to count yet.
  virtual std::optional<ExchangeTraffic> Traffic() const = 0;

  // The open chain's compressing layer (its error-feedback residual), or null: no
  // compression, not open, or the group family.
  virtual const ps::CompressingClient* compressing() const { return nullptr; }

  // On a non-finite loss only: the first non-finite element of the peers' parameters (one
  // fresh pull of the store), or -1: none, the pull failed, or no peer holds a centre.
  virtual int64_t PeersFirstNonFinite() { return -1; }
};

// The store family's exchange over `store` (not owned; outlives the exchange): Open stacks
// the worker's client chain over it (ps::NewClientChain).
std::unique_ptr<Exchange> NewStoreExchange(ps::ParamClient* store);

// The group family's exchange over this worker's rank (not owned; rank = the worker, size
// = the workers) and the parameters it starts from (every rank passes a span of the model's
// size; rank 0's are broadcast). Both outlive the exchange.
std::unique_ptr<Exchange> NewGroupExchange(collective::Collective* group,
                                           std::span<const float> initial);

}  // namespace asgd::algorithms
