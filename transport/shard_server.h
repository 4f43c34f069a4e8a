// A parameter-server shard (docs/architecture.md#the-data-path-of-one-step).
//
// A ShardServer owns one shard of the flat parameter vector (its ranges concatenated in
// shard-local order, see placement.h) and a version counter (updates applied). It serves
// push, pull, push-pull, clock, register, heartbeat, barrier and stop requests on one
// ZeroMQ ROUTER socket, on one thread: that thread receives a request, validates it,
// calls the ServerRule in place and sends the reply. There is no queue and no other
// thread between the socket and the rule; over inproc:// a push payload is read straight
// from the client's buffer. Over ipc:// and tcp:// a large push whose outcome is certain
// before its add (ShardCore::PushReplyFirst, ServerOptions::ack_before_add_bytes) is
// acknowledged first and added right after, before the thread reads the next request and
// under the shard's mutex, so no request and no Snapshot sees the new version without its
// values.
//
// The shard's bookkeeping (rule calls, version, staleness records, outcome counts,
// non-finite rejection, held requests, snapshots) is a ShardCore's (shard_core.h); this
// class is its ZeroMQ adapter: it decodes, calls the core, and encodes the reply.
//
// Pull replies are sent zero-copy from the shard's values. While such a reply is still
// referenced (by ZeroMQ, or on inproc:// by the client reading it), the next write to
// the values copies them first into a spare buffer (copy-on-write), so a reply always
// shows the values at the version it reports, and pulls cost no copy on the server.
//
// What one peer can make the server hold is bounded (docs/failure-model.md has the
// formula): reply bytes queued towards it (max_queued_reply_bytes; past it
// its replies are dropped, never the server's service to others), barrier requests
// waiting (max_barriers_per_peer, released after barrier_timeout), and requests queued
// from it (request_hwm x max_payload_bytes). An incomplete multipart message is buffered
// by libzmq with no hook to bound it: only CURVE, which reads no frame of an
// unauthenticated peer, bounds that. ShardStats shows what is held now.
//
// Bad input never changes the shard: every request is decoded and checked (message.h)
// before the rule sees it; a bad one gets an error reply (ErrorCode + one-line message)
// and increments errors_by_code, and the server keeps serving.
//
// Thread safety: Start, Stop, Join, stats, Snapshot and Restore may be called from any
// thread. Run serves on the calling thread. Every rule call happens on the serving thread
// under the shard's mutex, which Snapshot and Restore also take.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "ps/placement.h"
#include "ps/server_rule.h"
#include "ps/shard_core.h"  // ShardSnapshot
#include "ps/staleness.h"
#include "ps/status.h"
#include "transport/context.h"
#include "transport/curve.h"

namespace asgd::transport {

struct ServerOptions {
  // Address to bind: "inproc://NAME", "ipc://PATH", "tcp://HOST:PORT" (endpoint.h). A
  // port or path of "*" picks a free one; endpoint() reports it. Required.
  std::string endpoint;
  // This shard's index; requests naming another shard get kWrongShard. Default 0.
  uint32_t shard = 0;
  // How long binding retries while the address is in use. Default 5 s.
  std::chrono::milliseconds bind_retry{5000};
  // Largest payload one request may carry, in bytes; larger claims get kTooLarge and
  // larger frames make ZeroMQ drop the connection. 0 (default): the shard's size in
  // bytes (a valid request never needs more), at least 4 KiB.
  uint64_t max_payload_bytes = 0;
  // Reject pushes holding NaN or Inf with kNonFinite (unless the rule checks itself,
  // ServerRule::ChecksNonFinite). Default true.
  bool reject_non_finite = true;
  // Whether a stop request from a peer may stop the server (`asgd ps-check`'s worker 0 stopping
  // the shards). Even then a stop is obeyed only from an inproc:// peer (this process) or
  // when it carries stop_token; any other is refused with kUnknownOp and counted in
  // stops_refused, so that no peer that merely reaches the address can stop a shard.
  // Stop() always works. Default true.
  bool allow_remote_stop = true;
  // The run's secret (made by the launcher, handed to each role by the environment,
  // never logged) that a stop request must carry in its header's message field. Empty
  // (default): only inproc:// peers may stop the server.
  std::string stop_token;
  // A tcp:// address on another interface than loopback (127.0.0.0/8, ::1, localhost),
  // including "*", without CURVE is a ConfigError (naming the config key
  // cluster.allow_plain_remote) unless this is true: anyone who reaches such an address
  // can read and change the shard. Default false.
  bool allow_plain_remote = false;
  // ZeroMQ high-water marks, in messages: requests queued towards this server, and
  // replies queued towards one peer (further replies to a peer that does not read are
  // dropped and counted in replies_dropped). Default 10000 each.
  int request_hwm = 10000;
  int reply_hwm = 10000;
  // Retired value buffers kept for copy-on-write reuse. Default 2.
  int spare_buffers = 2;
  // Most reply bytes queued towards one peer (sent by the server, not yet released by
  // ZeroMQ: a peer that does not read keeps them). A pull reply read from the shard's
  // values is charged the whole shard's bytes, since it can pin a copy-on-write copy of
  // the whole shard; a reply the rule built is charged its payload. A reply that would
  // pass the budget is dropped, counted in replies_dropped and replies_over_budget, and
  // logged once per episode; the server keeps serving. 0 (default): 32 x the shard's bytes,
  // at least 16 MiB — room for a client with 8 pulls in flight whose received replies are
  // still held (8 x the shard was too tight: transport_bench's 1 MiB pulls with 8 in flight
  // over inproc passed it and timed out).
  uint64_t max_queued_reply_bytes = 0;
  // A barrier not complete this long after its first arrival is released with an error
  // reply (kRejectedByRule) to everyone waiting in it. Zero: never. Default 10 min.
  std::chrono::milliseconds barrier_timeout{600000};
  // How long a chunked push (message.h) may wait for its next chunk before the server
  // drops it with an error reply and serves the other peers' requests waiting behind it.
  // Default 10 s.
  std::chrono::milliseconds chunk_timeout{10000};
  // A pull or push-pull reply whose values exceed this many bytes goes as chunks of at
  // most this size when its request asked for that (kFlagChunkedReply; message.h,
  // "Chunked replies"), so the client copies one chunk while the next is on the wire. 0:
  // never chunk. Default 1 MiB (cluster.chunk_bytes).
  int64_t reply_chunk_bytes = int64_t{1} << 20;
  // Over ipc:// and tcp://, a push of the whole shard whose outcome is certain before its
  // add (ShardCore::PushReplyFirst: finite, far from overflow, onto values known finite)
  // and whose payload has at least this many bytes is acknowledged first and added right
  // after. Smaller pushes take the one pass that adds and checks before the ack: below
  // about 256 KiB the add costs little more than the extra read of the payload that
  // decides it (measured in results/bench/issue43_ps.md). 0: every such push. Default
  // 256 KiB.
  uint64_t ack_before_add_bytes = uint64_t{256} << 10;
  // Most barrier requests one peer may have waiting; one more gets kRejectedByRule.
  // Default 4 (a worker waits in one at a time).
  int max_barriers_per_peer = 4;
  // Time source for staleness records (wall_time_s) and ShardContext::Now(). Not owned;
  // must outlive the server. Default (nullptr): a system clock owned by the server.
  const Clock* clock = nullptr;
  // Receives one record per push the rule handled (applied, accepted or dropped:
  // StalenessRecord::outcome). Not owned; must outlive the
  // server. Default (nullptr): records are only counted.
  ps::StalenessSink* staleness_sink = nullptr;
  // CURVE encryption and client authentication (curve.h); checked by the constructor
  // (CheckCurveServer). Default off: plain ZeroMQ.
  CurveOptions curve;
};

// Counters, readable from any thread while the server runs.
struct ShardStats {
  uint64_t version = 0;          // updates applied
  uint64_t requests = 0;         // messages received, valid or not
  uint64_t pushes_applied = 0;   // push and push-pull outcomes, per PushOutcome
  uint64_t pushes_accepted = 0;
  uint64_t pushes_dropped = 0;   // dropped as stale by the rule
  uint64_t pulls = 0;
  uint64_t push_pulls = 0;
  uint64_t chunked_pushes = 0;  // pushes and push-pulls of which every chunk arrived
                                // (message.h, "Chunked pushes"), handed to the rule whole
  uint64_t chunked_replies = 0;  // pull and push-pull replies sent as chunks ("Chunked
                                 // replies"; also counted once in replies_sent)
  uint64_t acked_before_add = 0;  // pushes acknowledged before their add (ipc, tcp;
                                  // ShardCore::PushReplyFirst), also in pushes_applied
  uint64_t clocks = 0;
  uint64_t registrations = 0;
  uint64_t barriers = 0;
  uint64_t errors = 0;           // error replies sent
  std::array<uint64_t, 32> errors_by_code{};  // by ErrorCode value (< 32)
  uint64_t staleness_sum = 0;    // over the records of applied and accepted pushes
                                 // (negative staleness counts as 0)
  uint64_t staleness_max = 0;
  uint64_t bytes_received = 0;   // all frames of all requests
  uint64_t bytes_sent = 0;       // all frames of all replies
  uint64_t replies_sent = 0;
  uint64_t replies_dropped = 0;  // peer gone or its reply queue full
  uint64_t held = 0;             // replies deferred right now
  uint64_t copies_on_write = 0;  // writes that found the values referenced by a reply
  uint64_t auth_refused = 0;     // connections refused by CURVE (ServerOptions::curve), or
                                 // that ended during its handshake
  // What the server holds for its peers right now (issue 22):
  uint64_t queued_reply_bytes = 0;   // charged bytes of replies ZeroMQ has not released
                                     // (see ServerOptions::max_queued_reply_bytes)
  uint64_t pinned_snapshots = 0;     // value buffers alive besides the current one: retired
                                     // copies pinned by queued pull replies, plus up to
                                     // spare_buffers kept for reuse
  uint64_t held_barriers = 0;        // barrier requests waiting for their participants
  // Refusals of what would exceed those bounds (since start):
  uint64_t replies_over_budget = 0;  // replies dropped at the peer's reply budget (also
                                     // in replies_dropped)
  uint64_t barriers_timed_out = 0;   // barrier requests released by barrier_timeout
  uint64_t barriers_refused = 0;     // barrier requests past max_barriers_per_peer
  uint64_t stops_refused = 0;        // stop requests without the run's token

  uint64_t errors_for(ps::ErrorCode code) const {
    auto i = static_cast<std::size_t>(code);
    return i < errors_by_code.size() ? errors_by_code[i] : 0;
  }
};

class ShardServer {
 public:
  // Creates the socket and binds it (so endpoint() is known and bind errors surface
  // here, as IoError or ConfigError). Serving starts with Run() or Start().
  // REQUIRES: rule != nullptr.
  ShardServer(std::shared_ptr<Context> context, ServerOptions options,
              std::vector<float> initial_values, std::unique_ptr<ps::ServerRule> rule);
  // Stops and joins a server started with Start(). REQUIRES: Run() is not executing on
  // another thread.
  ~ShardServer();
  ShardServer(const ShardServer&) = delete;
  ShardServer& operator=(const ShardServer&) = delete;

  // The bound address, with the real port or path; give this to clients.
  const std::string& endpoint() const;
  uint32_t shard() const;
  int64_t size() const;
  const std::string& rule_name() const;

  // Serves on the calling thread until Stop() or a stop request, then answers held
  // replies with kShuttingDown and returns. Rethrows an error the rule or ZeroMQ raised
  // (after which the server does not serve again). REQUIRES: not already serving.
  void Run();
  // Run() on a new thread.
  void Start();
  // Asks the serving loop to end; returns at once. Idempotent; thread-safe.
  void Stop();
  // Stops taking part in training while still serving reads: every held reply, and from
  // then on every push, push-pull, clock and barrier request, is answered with
  // kShuttingDown; pulls, registrations and heartbeats are still answered. For the end
  // of a run of a synchronous strategy, whose workers may be held in a round that can no
  // longer complete. Returns at once (the held replies leave from the serving thread).
  // Idempotent; thread-safe.
  void Close();
  // True once Close() was called.
  bool closed() const;
  // Waits for the thread from Start(), then rethrows its error if any.
  void Join();
  // Stop() + Join().
  void Shutdown();
  // True from Start() (or the start of Run()) until serving has ended.
  bool serving() const;

  ShardStats stats() const;
  // The shard's ShardCore counts (a ParamStore's StoreStats).
  ps::ShardCoreStats core_stats() const;
  // Tells the rule the run now has live_workers workers (ServerRule::OnMembership), on
  // the serving thread: returns at once, the rule hears of it shortly after.
  void SetLiveWorkers(int live_workers);
  ps::ShardSnapshot Snapshot() const;
  // Replaces values, version and rule state. Throws InvariantError if the sizes or the
  // shard differ, InputError if the rule cannot read its state.
  void Restore(const ps::ShardSnapshot& snapshot);

 private:
  friend std::vector<ps::ShardSnapshot> SnapshotTogether(
      const std::vector<std::unique_ptr<ShardServer>>& servers,
      const std::function<void()>& while_held);
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Snapshots of every server at one instant: each shard's lock is taken (in order) and
// held while all are copied and while_held runs, so no push is applied to one shard and
// not another meanwhile, and whatever pushes update under those locks (a staleness sink's
// records) can be read consistently with the snapshots. Workers' requests wait meanwhile.
std::vector<ps::ShardSnapshot> SnapshotTogether(
    const std::vector<std::unique_ptr<ShardServer>>& servers,
    const std::function<void()>& while_held);

// Starts one ShardServer per shard of placement (threads, via Start()), shard s holding
// placement.Gather(s, initial) and rule_for(s), bound to endpoint_for(s) (e.g.
// "inproc://ps-3", "ipc://DIR/ps-3", "tcp://127.0.0.1:*"). base supplies the other
// options. Returns them in shard order; destroy them to stop them.
std::vector<std::unique_ptr<ShardServer>> StartShardServers(
    std::shared_ptr<Context> context, const ps::Placement& placement,
    std::span<const float> initial, const ps::ServerRuleFactory& rule_for,
    const std::function<std::string(int)>& endpoint_for, const ServerOptions& base = {});

// The bound endpoints of servers, in order (for PsClient).
std::vector<std::string> Endpoints(const std::vector<std::unique_ptr<ShardServer>>& servers);

}  // namespace asgd::transport
