// PsClient: the worker-side stub of the ZeroMQ parameter server.
//
// A PsClient knows the shard endpoints and the Placement. Push scatters a flat buffer
// over the shards, Pull gathers the shards into a flat buffer; both return at once with
// a RequestHandle, so compute can overlap communication, and any number of requests may
// be in flight (replies are matched by request id). The blocking conveniences are
// Wait() on the handle. Timeouts, error replies and a missing server are Status values,
// never exceptions and never a hang.
//
// Threads: none of its own. Each shard is one ZeroMQ DEALER socket; ZeroMQ's I/O thread
// moves the bytes for ipc:// and tcp://, and replies are read (and pulled values copied
// into the caller's buffer) on the caller's thread, inside Wait()/Poll() of any handle.
//
// Buffer contract (zero-copy sends, see zero_copy.h):
//   REQUIRES: a push's source buffer stays valid and unchanged until its handle is
//   done() (Wait returned ok) or destroyed; a pull's destination stays valid until its
//   handle is done() or destroyed, and is written only inside this client's calls.
//   Destroying a handle whose request is still in flight abandons it (a late reply is
//   dropped, the destination is never written) and blocks until ZeroMQ has released the
//   source buffer, resetting the connection to a shard that cannot take the message
//   (e.g. a server that is down). So once a handle is gone, its buffers are the caller's.
//
// Versions: every pull reply carries the version each shard read; pulled_versions()
// keeps the latest per shard and a push sends them by default (PushOptions::versions
// overrides), so the server can compute staleness (docs/architecture.md#staleness); a
// windowed push may
// add the versions its oldest gradients were computed on (PushOptions::oldest_versions).
//
// Thread safety: a PsClient and its handles are used by one thread at a time (one
// client per worker thread). A handle may outlive its client; a request still pending
// then reports kAborted.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "ps/message.h"
#include "ps/placement.h"
#include "ps/status.h"
#include "transport/cluster_spec.h"
#include "transport/context.h"
#include "transport/curve.h"

namespace asgd::transport {

struct ClientOptions {
  // Who is asking: sent in every header (the server's staleness records name the worker).
  ps::Role role = ps::Role::kWorker;
  uint32_t id = 0;
  // Timeout of the blocking conveniences (PushAndWait, ...) and of Wait() without an
  // argument. Default 60 s.
  std::chrono::milliseconds timeout{60000};
  // ZeroMQ high-water marks per shard connection, in messages. A push that finds the
  // queue full (server not reading) fails at once with kTimeout. Default 10000.
  int send_hwm = 10000;
  int receive_hwm = 10000;
  // How long an abandoned request waits for ZeroMQ to release its buffers before the
  // connection to the shard is reset to drop the queued message. Default 100 ms.
  std::chrono::milliseconds release_grace{100};
  // A dense push or push-pull whose payload for one shard exceeds this many bytes goes
  // over tcp:// and ipc:// as chunks of at most this size (message.h, "Chunked pushes"),
  // so the server applies one chunk while the next is on the wire. 0: never chunk.
  // inproc:// never chunks (nothing is on a wire). A push whose chunks did not all reach
  // one server (it died between them; the rest reached its successor at the same
  // address) is applied nowhere and fails with kRemoteError (kIncompletePush) or
  // kTimeout; it is not sent again. Shard servers of before kFlagLaterChunk refuse
  // chunked pushes: set 0 with them. Default 1 MiB (cluster.chunk_bytes).
  int64_t chunk_bytes = int64_t{1} << 20;
  // CURVE encryption and authentication (curve.h): the servers' public key and this
  // client's key pair, checked by the constructor (CheckCurveClient). A server that
  // refuses the key never answers: requests time out. Default off: plain ZeroMQ.
  CurveOptions curve;
};

struct PushOptions {
  // The worker's clock (step), sent with the push; recorded in staleness records.
  int64_t clock = 0;
  // The version of each shard the push was computed from, num_shards() entries. Empty
  // (default): pulled_versions().
  std::span<const uint64_t> versions;
  // The version of each shard the push's oldest gradients were computed on, when the
  // worker pulled again inside its push window (DOWNPOUR with n_fetch < n_push);
  // num_shards() entries, or empty (default: the same as versions). Sent in the header's
  // optional oldest_version field for the shards where it is below versions[shard].
  std::span<const uint64_t> oldest_versions;
};

// What one shard answered.
struct ShardResult {
  int shard = -1;
  bool replied = false;
  // Pull and push-pull: the version read. Push: the shard version after the push.
  uint64_t version = 0;
  // Push and push-pull: what the server's rule did with the push.
  ps::PushOutcome outcome = ps::PushOutcome::kApplied;
  // Register/heartbeat: the shard's size in elements; otherwise op-specific.
  uint64_t aux = 0;
  ps::Status status;  // ok, or this shard's error
};

namespace internal {
struct RequestState;
class ClientCore;
}  // namespace internal
class PsClient;

class RequestHandle {
 public:
  RequestHandle() = default;
  RequestHandle(RequestHandle&& other) noexcept = default;
  RequestHandle& operator=(RequestHandle&& other) noexcept;
  // Abandons a request still in flight; see the buffer contract above.
  ~RequestHandle();

  bool valid() const { return state_ != nullptr; }
  // Drives the client until every shard replied and ZeroMQ released the request's
  // buffers, or timeout passed. Returns ok; the first shard error (kRemoteError with
  // the server's message, kBadReply); kTimeout naming the shards that did not answer
  // (the request stays in flight: Wait again or drop the handle); or kAborted.
  ps::Status Wait(Duration timeout);
  // Wait with the client's ClientOptions::timeout.
  ps::Status Wait();
  // Reads replies that have arrived, without blocking. Returns done().
  bool Poll();
  // Every shard replied and the buffers are released.
  bool done() const;
  // The status so far (ok while pending).
  ps::Status status() const;
  // One entry per shard the request went to, in shard order.
  std::span<const ShardResult> results() const;
  // The entry for shard, or nullptr if the request did not go there.
  const ShardResult* result(int shard) const;

 private:
  friend class PsClient;
  explicit RequestHandle(std::shared_ptr<internal::RequestState> state)
      : state_(std::move(state)) {}
  std::shared_ptr<internal::RequestState> state_;
};

struct ClientStats {
  uint64_t requests = 0;       // requests sent (one per shard touched)
  uint64_t replies = 0;        // replies matched to a request
  uint64_t error_replies = 0;  // of which error replies
  uint64_t stray_replies = 0;  // replies to abandoned or unknown requests
  uint64_t bad_replies = 0;    // undecodable or mismatched replies
  uint64_t timeouts = 0;       // Wait() calls that returned kTimeout
  uint64_t resets = 0;         // shard connections reset to reclaim buffers
  uint64_t bytes_sent = 0;     // all frames
  uint64_t bytes_received = 0;
};

class PsClient {
 public:
  // Connects one socket per shard (ZeroMQ connects in the background; servers may come
  // up later). REQUIRES: shard_endpoints.size() == placement.num_shards() (ConfigError
  // otherwise).
  PsClient(std::shared_ptr<Context> context, std::vector<std::string> shard_endpoints,
           ps::Placement placement, ClientOptions options = {});
  // The client of spec's ps shards (spec.PsAddress(i) for every i).
  static std::unique_ptr<PsClient> FromCluster(std::shared_ptr<Context> context,
                                               const ClusterSpec& spec, ps::Placement placement,
                                               ClientOptions options = {});
  // Abandons requests in flight (their handles report kAborted) and waits until ZeroMQ
  // has released every buffer it was given.
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  int num_shards() const;
  const ps::Placement& placement() const;
  const std::string& endpoint(int shard) const;
  const ClientOptions& options() const;

  // Whole-vector requests on a flat buffer of placement().total_elements() floats
  // (checked). Shards that own nothing are skipped.
  RequestHandle Push(std::span<const float> values, const PushOptions& options = {});
  RequestHandle Pull(std::span<float> out);
  // Atomic on each shard: push values, get back the rule's reply payload (by default the
  // values after the push) into out. values and out may not overlap.
  RequestHandle PushPull(std::span<const float> values, std::span<float> out,
                         const PushOptions& options = {});

  // A compressed push (compression/compressor.h): parts[s] encodes shard s's elements in
  // shard-local order (its ranges concatenated), count = placement().shard_size(s); the
  // parts of shards that own nothing are skipped. With out not empty, a push-pull whose
  // replies land in the flat out as PushPull's. The frames are sent zero-copy: they stay
  // valid and unchanged until the handle is done or destroyed (the buffer contract).
  // REQUIRES: parts.size() == num_shards(), counts as said, every frame a whole number of
  // 4-byte words (as every encoding's are) (checked).
  RequestHandle PushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                            const PushOptions& options = {});

  // One shard, shard-local elements [offset, offset + size).
  RequestHandle PushShard(int shard, int64_t offset, std::span<const float> values,
                          const PushOptions& options = {});
  RequestHandle PullShard(int shard, int64_t offset, std::span<float> out);
  RequestHandle PushPullShard(int shard, int64_t offset, std::span<const float> values,
                              std::span<float> out, const PushOptions& options = {});

  // Control requests. SendClock: to every shard; the rule may hold the reply (SSP).
  RequestHandle SendClock(int64_t clock);
  // Register with every shard; results carry each shard's size in aux.
  RequestHandle Register();
  RequestHandle Heartbeat();
  // Held by shard 0 until `participants` barrier requests with this id arrived.
  RequestHandle Barrier(int64_t id, uint32_t participants);
  // Asks every shard to stop (servers with allow_remote_stop). Over ipc:// and tcp:// a
  // server obeys only a stop that carries its ServerOptions::stop_token (the run's
  // secret): pass it here.
  RequestHandle StopServers(const std::string& token = {});

  // Blocking conveniences, with options().timeout.
  ps::Status PushAndWait(std::span<const float> values, const PushOptions& options = {});
  ps::Status PullAndWait(std::span<float> out);
  ps::Status PushPullAndWait(std::span<const float> values, std::span<float> out,
                             const PushOptions& options = {});
  // Registers with every shard and waits for all to answer (they may start later than
  // the worker); checks each shard's size against the placement (kBadReply if they
  // disagree). For a worker process to wait until the parameter server is up.
  ps::Status WaitForServers(Duration timeout);

  // The version each shard reported in this client's latest pull (0 before any).
  std::span<const uint64_t> pulled_versions() const;
  ClientStats stats() const;

 private:
  // A request without payload to each shard in `shards`.
  // `message` rides in the header's message field (a stop's token).
  RequestHandle Control(ps::Op op, const std::vector<int>& shards, int64_t clock, uint64_t aux,
                        const std::string& message = {});

  std::unique_ptr<internal::ClientCore> core_;
};

}  // namespace asgd::transport
