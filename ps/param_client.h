// What a worker needs from the parameter store: ParamClient, the interface every worker
// rule is written against (pull, push, push-pull, clock, sparse and compressed pushes),
// with its traffic counters. Implementations: the ZeroMQ client
// (transport/ps_param_client.h), the in-memory store (algorithms/memory_store.h), the
// lock-free shared vector (algorithms/hogwild.h), the simulated store (sim/sim_store.h)
// and the wrappers of param_client_wrapper.h, which a worker stacks over them (client_chain.h).
//
// Thread safety: a ParamClient belongs to one worker thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compression/compressor.h"
#include "core/param_layout.h"
#include "ps/status.h"

namespace asgd::ps {

class Placement;  // ps/placement.h

// Parameter payload a client moved: float32 values (4 bytes each) sent in pushes and
// received in pulls; a sparse push counts 12 bytes per (index, value); a compressed push
// (PushEncoded) its encoded frames. Protocol headers are not counted, so the figures
// compare across stores and transports. dense_bytes_pushed is what the pushes would have
// moved as dense float32 (= bytes_pushed without compression): the compression ratio is
// dense_bytes_pushed / bytes_pushed.
struct Traffic {
  int64_t bytes_pushed = 0;
  int64_t bytes_pulled = 0;
  int64_t dense_bytes_pushed = 0;
};

// What one message of a compressed push encodes (one per shard of a sharded store): the
// elements of its ranges, concatenated in order, `count` in all.
struct PushPart {
  std::vector<Range> ranges;  // core/param_layout.h
  int64_t count = 0;
};
// One part per shard of placement: shard s's ranges and size (the split of a sharded
// store's clients).
std::vector<PushPart> PushPartsOf(const Placement& placement);

// What a worker needs from the parameter store. Every call blocks until the store
// answered (or the client's timeout passed: a Status, not an exception).
//
// The public calls keep the traffic counters and call the protected Do* methods, which
// implementations override (so no implementation can forget the accounting).
class ParamClient {
 public:
  virtual ~ParamClient() = default;
  // Elements of the flat parameter vector.
  virtual int64_t size() const = 0;
  // Reads the whole vector into out and remembers the version(s) read; the next push
  // carries them, so the store can compute staleness (docs/architecture.md#staleness).
  Status Pull(std::span<float> out);
  // Sends update to the store, tagged with the worker's step; the server rule decides
  // what it does with it (add, damp, aggregate, ...).
  Status Push(std::span<const float> update, int64_t step);
  // Atomically pushes update and reads into out what the rule replies (by default the
  // values after the push). update and out must not overlap (the shared-vector client of
  // algorithms/hogwild.h also takes out = update, the same span).
  Status PushPull(std::span<const float> update, std::span<float> out, int64_t step);
  // Announces that the worker finished clock `clock` (SSP, synchronous rounds); returns
  // when the rule lets it go on.
  Status SendClock(int64_t clock) { return DoSendClock(clock); }
  // Sparse forms, for updates that touch few coordinates (Hogwild on LIBSVM data).
  // indices: flat-vector coordinates, unique and increasing. PullSparse writes
  // out[indices[i]] (out has size() elements; other entries may be written too);
  // PushSparse adds values[i] at indices[i].
  Status PullSparse(std::span<const int64_t> indices, std::span<float> out);
  Status PushSparse(std::span<const int64_t> indices, std::span<const float> values, int64_t step);

  // Compressed pushes (compression/compressor.h). PushParts() says how the store splits
  // a push; PushEncoded sends parts[i], the encoding of PushParts()[i]'s elements
  // (count = its count), as one compressed push (push-pull when out is not empty, reading
  // the rule's reply into out as PushPull does). The store decodes each part and handles
  // it as the dense push it stands for. REQUIRES: TakesEncodedPushes(), and parts match
  // PushParts() (checked). Counts the encoded bytes in bytes_pushed and the dense
  // equivalent in dense_bytes_pushed.
  virtual std::vector<PushPart> PushParts() const;
  Status PushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                     int64_t step);
  // Whether PushEncoded works on this client (false for hogwild's shared vector).
  virtual bool TakesEncodedPushes() const { return false; }

  // Marks the start of a push window: the worker's next gradient is the window's first.
  // The next Push or PushPull then carries, besides the version(s) of the last pull (the
  // newest parameters its gradients were computed on), the version(s) pulled when this
  // was called (the oldest), so that a window with pulls inside it (DOWNPOUR with
  // n_fetch < n_push) is recorded with both (ps/staleness.h). The mark is used up
  // by that push; without one a push's oldest version is its newest. Clients without
  // versions (hogwild's shared vector) ignore it.
  void MarkWindowStart() { DoMarkWindowStart(); }

  // Pushes this client's pushes dropped as stale so far (synchronous rules).
  virtual int64_t dropped_pushes() const = 0;
  // Payload moved so far (successful calls).
  const Traffic& traffic() const { return traffic_; }
  // What reached the store: traffic() of the client at the bottom of a wrapper stack
  // (param_client_wrapper.h); a compressing wrapper's encoded bytes.
  virtual const Traffic& wire_traffic() const { return traffic_; }

 protected:
  virtual Status DoPull(std::span<float> out) = 0;
  virtual Status DoPush(std::span<const float> update, int64_t step) = 0;
  virtual Status DoPushPull(std::span<const float> update, std::span<float> out, int64_t step) = 0;
  virtual Status DoSendClock(int64_t clock) = 0;
  virtual void DoMarkWindowStart() {}
  // Default: InvariantError (a client with TakesEncodedPushes() false was asked).
  virtual Status DoPushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                               int64_t step);
  // Defaults go through the dense calls; the shared-vector client touches only the listed
  // coordinates.
  virtual Status DoPullSparse(std::span<const int64_t> indices, std::span<float> out);
  virtual Status DoPushSparse(std::span<const int64_t> indices, std::span<const float> values,
                              int64_t step);

 private:
  Traffic traffic_;
};

}  // namespace asgd::ps
