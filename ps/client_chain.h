// A worker's client chain: the layers between a worker rule and its store's ParamClient,
// stacked in one place (NewClientChain) for every executor -- threads, simulated workers
// and worker processes all run experiments/run/worker_loop.h, which builds it. From the
// rule down:
//
//   timing       every call timed on the worker's clock into *total (workers.csv's
//                comm_time_s), after an optional before_call hook that is not timed (the
//                simulated worker's deferred compute);
//   compression  with [compression] on, a CompressingClient (compressing_client.h): each
//                push encoded per store part, with error feedback;
//   the store's client (not owned): the ZeroMQ client (transport/ps_param_client.h), the
//                in-memory store (algorithms/memory_store.h), the shared vector
//                (algorithms/hogwild.h), the simulated store (sim/sim_store.h).
//
// Each layer is a ParamClientWrapper (param_client_wrapper.h) and counts the traffic that
// passed through it (ParamClient's public calls); wire_traffic() of the chain's client is
// what reached the store. So a push goes from the rule (algorithms/) through this folder's
// layers to the store once.
//
// Thread safety: a chain belongs to its worker's thread, as every ParamClient; the
// compressing layer's ResidualNorm() may be read from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "compression/compressor.h"
#include "core/clock.h"
#include "core/param_layout.h"
#include "ps/compressing_client.h"
#include "ps/param_client.h"

namespace asgd::ps {

struct ClientChainOptions {
  // [compression] of the worker's pushes. Name "none" (the default): no compressing layer.
  compression::CompressionOptions compression;
  // The compressors' random draws come from DeriveSeed(seed, "compression", worker).
  uint64_t seed = 0;
  int worker = 0;
  // The model's tensors (ParamLayout::tensors()): the compressing layer encodes each push
  // part in its tensor pieces (TensorPieces). Empty: one piece per part. Read only while
  // the chain is built.
  std::span<const TensorSpec> tensors;
  // The worker's clock, and the total every call's time is added to. Not owned; both must
  // outlive the chain. REQUIRES: not null.
  const Clock* clock = nullptr;
  Duration* total = nullptr;
  // Optional: runs before each call, outside the timing.
  std::function<void()> before_call;
};

// A worker's chain: `client` is what the worker rule calls (the timing layer, owning the
// layers below it but the store's client); `compressing` is the compressing layer inside
// it, or null without compression.
struct ClientChain {
  std::unique_ptr<ParamClient> client;
  const CompressingClient* compressing = nullptr;
};

// Stacks a worker's layers over `store` (not owned; must outlive the chain). Throws what
// compression::NewCompressor throws for bad options. REQUIRES: store, clock and total not
// null; with compression, store->TakesEncodedPushes() (checked).
ClientChain NewClientChain(ParamClient* store, const ClientChainOptions& options);

}  // namespace asgd::ps
