// Internal to transport/shard_server*.cc: the ZeroMQ adapter of a ShardCore (the
// class behind ShardServer) and what it shares with its reply frames. Split from
// shard_server.cc by subject: shard_server.cc builds the server and serves requests;
// shard_server_replies.cc sends replies, keeps barriers and per-peer budgets, and holds
// the lifecycle, stats and the public ShardServer calls. Not part of the API.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/aligned.h"
#include "core/thread_annotations.h"
#include "ps/shard_core.h"
#include "transport/endpoint.h"
#include "transport/shard_server.h"
#include "transport/zap_handler.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

namespace shard_server_internal {

// What the server holds for its peers, shared with reply frames (which may outlive the
// server): bytes of queued replies and value blocks alive.
struct ReplyTally {
  std::atomic<int64_t> queued_bytes{0};
  std::atomic<int64_t> value_blocks{0};
};

// The shard's values, shared with zero-copy reply frames. The server holds one
// reference to the blocks it owns; every reply frame pointing into a block holds one
// more, dropped by ZeroMQ's free callback (on whichever thread closes the frame). The
// last reference frees the block, so a frame may outlive the server safely.
struct ValueBlock {
  std::atomic<int64_t> refs{1};
  int64_t capacity = 0;
  float* data = nullptr;
  std::shared_ptr<ReplyTally> tally;

  ValueBlock(int64_t n, std::shared_ptr<ReplyTally> t) : capacity(n), tally(std::move(t)) {
    const std::size_t bytes = static_cast<std::size_t>(std::max<int64_t>(n, 1)) * sizeof(float);
    data = static_cast<float*>(::operator new (bytes, std::align_val_t{kBufferAlignment}));
    tally->value_blocks.fetch_add(1, std::memory_order_relaxed);
  }
  ~ValueBlock() {
    ::operator delete (data, std::align_val_t{kBufferAlignment});
    tally->value_blocks.fetch_sub(1, std::memory_order_relaxed);
  }

  void Ref() { refs.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  // Only the server references the block. Only the serving thread adds references, so
  // the answer cannot turn false behind its back; acquire orders every reader's last
  // access before the writes that follow.
  bool exclusive() const { return refs.load(std::memory_order_acquire) == 1; }
};

// One peer (a routing id) as the server sees it. `bytes` is released by reply frames on
// ZeroMQ's threads; the rest belongs to the serving thread.
struct PeerQueue {
  explicit PeerQueue(std::shared_ptr<ReplyTally> t) : tally(std::move(t)) {}
  std::shared_ptr<ReplyTally> tally;
  std::atomic<int64_t> bytes{0};  // charged bytes of this peer's queued replies
  int barriers = 0;               // its barrier requests waiting
  bool over_budget = false;       // its replies are being dropped (logged once per episode)
};

// A rule's reply payload (ReplyBuffer storage) shared by the frames of a chunked reply;
// the last frame released frees it.
struct SharedReply {
  std::atomic<int64_t> refs{0};
  float* data = nullptr;

  explicit SharedReply(float* d) : data(d) {}
  void Ref() { refs.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      ps::ReplyBuffer::Free(data);
      delete this;
    }
  }
};

// A queued reply payload's hold on its peer's budget and on what the frame points into:
// a value block (block != nullptr), a rule's payload shared by the chunks of one reply
// (shared != nullptr), or else a ReplyBuffer the frame owns. Freed by ZeroMQ's free
// callback once the frame is sent, dropped or closed by the reader (inproc).
struct FrameHold {
  std::shared_ptr<PeerQueue> peer;
  int64_t charge = 0;
  ValueBlock* block = nullptr;
  SharedReply* shared = nullptr;

  FrameHold(std::shared_ptr<PeerQueue> p, int64_t c, ValueBlock* b, SharedReply* r = nullptr)
      : peer(std::move(p)), charge(c), block(b), shared(r) {
    peer->bytes.fetch_add(charge, std::memory_order_relaxed);
    peer->tally->queued_bytes.fetch_add(charge, std::memory_order_relaxed);
    if (block != nullptr) block->Ref();
    if (shared != nullptr) shared->Ref();
  }
  static void Free(void* data, void* hint) {
    auto* h = static_cast<FrameHold*>(hint);
    h->peer->bytes.fetch_sub(h->charge, std::memory_order_relaxed);
    h->peer->tally->queued_bytes.fetch_sub(h->charge, std::memory_order_relaxed);
    if (h->block != nullptr) {
      h->block->Unref();
    } else if (h->shared != nullptr) {
      h->shared->Unref();
    } else {
      ps::ReplyBuffer::Free(static_cast<float*>(data));
    }
    delete h;
  }
};

// The return address of a request held by the rule (ServerCall::Defer) or by a barrier;
// the core keeps the rest (HeldRequest) under the same token.
struct Held {
  std::string routing_id;
  ps::Header request;  // the request's header (op, ids, range); message empty
};

// The core's view of a request header.
inline ps::RequestInfo InfoFrom(const ps::Header& h) {
  ps::RequestInfo info;
  info.op = h.op;
  info.role = h.role;
  info.worker = h.sender;
  info.request_id = h.request_id;
  info.version = h.version;
  info.oldest_version = h.oldest_version;
  info.clock = h.clock;
  info.offset = static_cast<int64_t>(h.offset);
  info.count = static_cast<int64_t>(h.count);
  info.aux = h.aux;
  return info;
}
// The header of a held request, without its message.
inline ps::Header RequestCopy(const ps::Header& h) {
  ps::Header c = h;
  c.message.clear();
  return c;
}

}  // namespace shard_server_internal

// The ZeroMQ adapter of a ShardCore: decodes requests, calls the core, encodes replies.
// It supplies the core's value storage (copy-on-write blocks, for zero-copy pull
// replies) and its ReplySink (return addresses of held requests).
class ShardServer::Impl final : public ps::ValueStorage, public ps::ReplySink {
 public:
  using ValueBlock = shard_server_internal::ValueBlock;
  using PeerQueue = shard_server_internal::PeerQueue;
  using ReplyTally = shard_server_internal::ReplyTally;
  using Held = shard_server_internal::Held;

  Impl(std::shared_ptr<Context> context, ServerOptions options, std::vector<float> initial,
       std::unique_ptr<ps::ServerRule> rule);
  ~Impl() override;

  uint32_t shard() const { return options_.shard; }
  int64_t size() const { return size_; }

  // ValueStorage (called by the core on the serving thread, with mu_ held).
  std::span<const float> values() const override {
    return {current_->data, static_cast<std::size_t>(size_)};
  }
  std::span<float> mutable_values() override;
  // An exclusive block to write a whole new state into, made current by CommitStaging
  // (out-of-place pushes, ShardCore::BeginStaged).
  std::span<float> staging_values() override;
  void CommitStaging() override;
  bool values_shared() const override { return !current_->exclusive(); }
  // ReplySink (likewise).
  void Release(uint64_t token, const ps::HeldRequest& held, ps::ReplyBuffer* payload) override;
  void Fail(uint64_t token, const ps::HeldRequest& held, ps::ErrorCode code,
            const std::string& message) override;

  void Run();
  // Sets serving_ (throws if already serving or failed for good); Serve() then serves
  // until stopped and clears it.
  void MarkServing();
  void Serve();
  void Start();
  void Stop();
  void Close();
  bool closed() const { return closing_.load(); }
  // Sends a control message (op, the secret) to the serving loop through the private
  // endpoint, so that a blocked receive wakes up.
  void SignalControl(ps::Op op);
  void SetLiveWorkers(int live_workers);
  void Join();
  bool serving() const { return serving_.load(std::memory_order_acquire); }
  ShardStats stats() const;
  ps::ShardCoreStats core_stats() const { return core_->stats(); }
  ps::ShardSnapshot Snapshot() const;
  std::mutex& state_mutex() const { return mu_; }  // for SnapshotTogether
  ps::ShardSnapshot SnapshotLocked() const ASGD_REQUIRES(mu_);
  void Restore(const ps::ShardSnapshot& snapshot);

  const std::string& endpoint() const { return bound_; }
  const std::string& rule_name() const { return rule_name_; }

 private:
  // Counters written by the serving thread only, read by anyone (the core keeps those
  // of pushes, pulls, clocks and staleness).
  struct Counters {
    std::atomic<uint64_t> requests{0}, registrations{0}, barriers{0}, errors{0}, bytes_received{0},
        bytes_sent{0}, replies_sent{0}, replies_dropped{0}, copies_on_write{0},
        replies_over_budget{0}, barriers_timed_out{0}, barriers_refused{0}, held_barriers{0},
        stops_refused{0}, chunked_pushes{0}, chunked_replies{0}, acked_before_add{0};
    std::array<std::atomic<uint64_t>, 32> errors_by_code{};
  };
  static void Bump(std::atomic<uint64_t>& c, uint64_t by = 1) {
    c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }

  bool ReceiveOne(bool block);
  // The next message into parts_: from the backlog when it holds one this server may take
  // now, else from the socket. Returns its number of frames (0: none).
  std::size_t NextMessage(bool block, bool* too_many);
  void Handle(std::size_t nparts, bool too_many_frames) ASGD_REQUIRES(mu_);
  void HandleValid(const ps::Header& h, std::size_t nparts) ASGD_REQUIRES(mu_);
  // Payload pieces over frames (copying misaligned ones to scratch_), from `offset` on.
  void BuildPayload(uint64_t offset, std::span<zmq::message_t> frames, ps::Payload* out);
  // The reply to a push or push-pull the core handled (r), or its error.
  void ReplyToPush(zmq::message_t& routing, const ps::Header& h, ps::ShardCore::Result& r,
                   uint64_t overflows_before) ASGD_REQUIRES(mu_);
  // Chunked pushes (message.h): the first chunk, the next ones, the end, a failure.
  void StartAssembly(const ps::Header& h, std::size_t nparts) ASGD_REQUIRES(mu_);
  bool IsNextChunk(const ps::Header& h) const;
  // Whether a routing frame is the open chunked push's sender's.
  bool FromAssemblyPeer(const zmq::message_t& routing) const;
  void ContinueAssembly(const ps::Header& h, std::size_t nparts) ASGD_REQUIRES(mu_);
  void FinishAssembly() ASGD_REQUIRES(mu_);
  void FailAssembly(ps::ErrorCode code, const std::string& why) ASGD_REQUIRES(mu_);
  void ReleasePayloadFrames(std::size_t nparts);

  // Every reply goes through here: counts bytes and messages, treats an undeliverable
  // reply as a counted outcome (the peer went away), never as an error.
  void SendReply(zmq::message_t& routing, const ps::Header& h, zmq::message_t* payload);
  // One message of a reply: counts its bytes; one ZeroMQ cannot deliver (the peer's queue
  // is full or the peer went away) is counted in replies_dropped and returns false.
  bool SendMessage(zmq::message_t& routing, const ps::Header& h, zmq::message_t* payload);
  void SendError(zmq::message_t& routing, const ps::Header& request, ps::ErrorCode code,
                 const std::string& detail);
  void SendAck(zmq::message_t& routing, const ps::Header& request, uint64_t aux);
  void SendValues(zmq::message_t& routing, const ps::Header& request, ps::ReplyBuffer* rule_payload,
                  uint64_t aux);
  // The values reply of SendValues as chunks of at most reply_chunk_bytes (message.h,
  // "Chunked replies"), every chunk's frame holding its share of `charge`.
  void SendValueChunks(zmq::message_t& routing, const ps::Header& reply,
                       ps::ReplyBuffer* rule_payload, std::shared_ptr<PeerQueue> peer,
                       int64_t charge);
  void FailAllHeld(ps::ErrorCode code, const std::string& why) ASGD_REQUIRES(mu_);
  // A spare block no reply references (or a new one), taken out of spares_.
  ValueBlock* ExclusiveBlock() ASGD_REQUIRES(mu_);
  // Keeps a block that stopped being current as a spare, or drops the server's reference.
  void Retire(ValueBlock* block) ASGD_REQUIRES(mu_);
  void Tick();

  using Steady = std::chrono::steady_clock;
  // The peer behind a routing frame (created on first use; idle ones are swept).
  std::shared_ptr<PeerQueue> PeerFor(const zmq::message_t& routing);
  std::shared_ptr<PeerQueue> PeerFor(const std::string& routing_id);
  // Whether a reply charged `charge` bytes may be queued to peer; counts and logs a drop.
  bool WithinBudget(PeerQueue& peer, int64_t charge);
  void HandleBarrier(const ps::Header& h) ASGD_REQUIRES(mu_);
  // Releases, with an error reply, the barriers whose deadline has passed.
  void ExpireBarriers(Steady::time_point now) ASGD_REQUIRES(mu_);
  // Forgets every barrier (their held requests are answered by the core) and the peers'
  // counts of them.
  void ForgetBarriers() ASGD_REQUIRES(mu_);
  void PublishBarriers() ASGD_REQUIRES(mu_);

  std::shared_ptr<Context> context_;
  ServerOptions options_;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<internal::CurveServerSecurity> curve_;  // with options_.curve.enabled
  std::string bound_;
  // Over ipc:// and tcp://, where a payload frame is the server's own copy: a push may be
  // answered before its add (ShardCore::PushReplyFirst). Over inproc:// the frame is the
  // client's buffer, which the client waits for anyway.
  bool reply_before_add_ = false;
  std::string control_address_;
  std::atomic<int> live_workers_{0};  // SetLiveWorkers -> the serving thread
  uint64_t control_secret_ = 0;
  std::unique_ptr<Clock> owned_clock_;
  const Clock* clock_ = nullptr;
  const int64_t size_;
  uint64_t max_payload_bytes_ = 0;
  std::string rule_name_;

  // Serving-thread state. The socket belongs to the serving thread once Run() starts.
  zmq::socket_t socket_;
  std::vector<zmq::message_t> parts_;
  // A chunked push being received: at most one at a time. Until its last chunk, the
  // messages of other peers wait in backlog_ (in arrival order), so that the push is
  // applied all or nothing with nothing else in between; ShardServer::Restore in between
  // makes it fail. A push whose next chunk does not come within
  // ServerOptions::chunk_timeout is dropped with an error reply.
  struct Assembly {
    bool active = false;
    std::string routing_id;
    ps::Header first;          // chunk 0's header with count = the whole push's
    uint64_t next_offset = 0;  // where the next chunk must start (shard-local)
    bool staged = false;       // applied chunk by chunk (ShardCore::BeginStaged)
    std::vector<zmq::message_t> kept;  // else the chunks' payload frames, applied at the end
    ps::ErrorCode error = ps::ErrorCode::kNone;  // a refused chunk: the rest are read and dropped
    std::string message;
    std::chrono::steady_clock::time_point deadline;
  };
  Assembly assembly_;
  bool chunk_taken_ = false;  // Handle consumed the message as a chunk of assembly_
  struct Backlogged {
    std::vector<zmq::message_t> parts;
    bool too_many = false;
  };
  std::deque<Backlogged> backlog_;
  AlignedVector<float> scratch_;  // payload frames that arrived misaligned
  std::vector<ps::Payload::Piece> pieces_;

  mutable std::mutex mu_;
  ValueBlock* current_ ASGD_GUARDED_BY(mu_) = nullptr;
  ValueBlock* staging_ ASGD_GUARDED_BY(mu_) = nullptr;  // ShardCore's staging buffer, or null
  std::vector<ValueBlock*> spares_ ASGD_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Held> held_ ASGD_GUARDED_BY(mu_);
  struct Barrier {
    uint64_t participants = 0;
    std::vector<uint64_t> tokens;                   // held in the core
    std::vector<std::shared_ptr<PeerQueue>> peers;  // who sent each, for the per-peer cap
    Steady::time_point deadline = Steady::time_point::max();
  };
  std::map<int64_t, Barrier> barriers_ ASGD_GUARDED_BY(mu_);  // by barrier id
  // The earliest deadline in barriers_ (max when none); read by the serving loop.
  Steady::time_point barrier_wake_ = Steady::time_point::max();
  // Serving thread only. Peers by routing id; swept of idle ones past sweep_at_.
  std::unordered_map<std::string, std::shared_ptr<PeerQueue>> peers_;
  std::size_t sweep_at_ = 64;
  std::shared_ptr<ReplyTally> tally_ = std::make_shared<ReplyTally>();
  int64_t reply_budget_ = 0;  // bytes, per peer
  // Set by the constructor, then never reassigned: its calls need mu_, its stats() not.
  std::unique_ptr<ps::ShardCore> core_;

  Counters counters_;
  std::atomic<uint64_t> version_published_{0};
  std::atomic<uint64_t> held_published_{0};

  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> closing_{false};  // Close() was called
  std::atomic<bool> serving_{false};
  std::atomic<bool> finished_{false};  // a fatal error ended serving for good
  std::mutex thread_mu_;
  std::thread thread_ ASGD_GUARDED_BY(thread_mu_);
  std::exception_ptr error_ ASGD_GUARDED_BY(thread_mu_);
};

}  // namespace asgd::transport
