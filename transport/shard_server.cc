#include "transport/shard_server.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>
#include <new>
#include <thread>
#include <unordered_map>

#include "core/aligned.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/thread_annotations.h"
#include "transport/endpoint.h"
#include "transport/zap_handler.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

namespace {

using internal::Bytes;
using internal::HeaderMessage;

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
    data = static_cast<float*>(::operator new(bytes, std::align_val_t{kBufferAlignment}));
    tally->value_blocks.fetch_add(1, std::memory_order_relaxed);
  }
  ~ValueBlock() {
    ::operator delete(data, std::align_val_t{kBufferAlignment});
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

// A queued reply payload's hold on its peer's budget and on what the frame points into:
// a value block (block != nullptr) or a ReplyBuffer the frame owns. Freed by ZeroMQ's
// free callback once the frame is sent, dropped or closed by the reader (inproc).
struct FrameHold {
  std::shared_ptr<PeerQueue> peer;
  int64_t charge = 0;
  ValueBlock* block = nullptr;

  FrameHold(std::shared_ptr<PeerQueue> p, int64_t c, ValueBlock* b)
      : peer(std::move(p)), charge(c), block(b) {
    peer->bytes.fetch_add(charge, std::memory_order_relaxed);
    peer->tally->queued_bytes.fetch_add(charge, std::memory_order_relaxed);
    if (block != nullptr) block->Ref();
  }
  static void Free(void* data, void* hint) {
    auto* h = static_cast<FrameHold*>(hint);
    h->peer->bytes.fetch_sub(h->charge, std::memory_order_relaxed);
    h->peer->tally->queued_bytes.fetch_sub(h->charge, std::memory_order_relaxed);
    if (h->block != nullptr) {
      h->block->Unref();
    } else {
      ReplyBuffer::Free(static_cast<float*>(data));
    }
    delete h;
  }
};

// The return address of a request held by the rule (ServerCall::Defer) or by a barrier;
// the core keeps the rest (HeldRequest) under the same token.
struct Held {
  std::string routing_id;
  Header request;  // the request's header (op, ids, range); message empty
};

std::atomic<uint64_t> g_control_counter{0};

// Whether endpoint is not a tcp:// address, or one on loopback only.
bool IsLoopbackTcp(const std::string& endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (endpoint.rfind(kTcp, 0) != 0) return true;  // inproc:// and ipc:// stay on this host
  const std::size_t colon = endpoint.rfind(':');
  std::string host = endpoint.substr(kTcp.size(), colon == std::string::npos || colon < kTcp.size()
                                                      ? std::string::npos
                                                      : colon - kTcp.size());
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Compares without an early exit, so that the time taken does not tell how much of a
// guessed token was right.
bool SameSecret(std::string_view a, std::string_view b) {
  if (a.size() != b.size() || a.empty()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

// The ZeroMQ adapter of a ShardCore: decodes requests, calls the core, encodes replies.
// It supplies the core's value storage (copy-on-write blocks, for zero-copy pull
// replies) and its ReplySink (return addresses of held requests).
class ShardServer::Impl final : public ValueStorage, public ReplySink {
 public:
  Impl(std::shared_ptr<Context> context, ServerOptions options, std::vector<float> initial,
       std::unique_ptr<ServerRule> rule);
  ~Impl() override;

  uint32_t shard() const { return options_.shard; }
  int64_t size() const { return size_; }

  // ValueStorage (called by the core on the serving thread, with mu_ held).
  std::span<const float> values() const override {
    return {current_->data, static_cast<std::size_t>(size_)};
  }
  std::span<float> mutable_values() override;
  // ReplySink (likewise).
  void Release(uint64_t token, const HeldRequest& held, ReplyBuffer* payload) override;
  void Fail(uint64_t token, const HeldRequest& held, ErrorCode code,
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
  void SignalControl(Op op);
  void SetLiveWorkers(int live_workers);
  void Join();
  bool serving() const { return serving_.load(std::memory_order_acquire); }
  ShardStats stats() const;
  ShardSnapshot Snapshot() const;
  std::mutex& state_mutex() const { return mu_; }  // for SnapshotTogether
  ShardSnapshot SnapshotLocked() const ASGD_REQUIRES(mu_);
  void Restore(const ShardSnapshot& snapshot);

  const std::string& endpoint() const { return bound_; }
  const std::string& rule_name() const { return rule_name_; }

 private:
  // Counters written by the serving thread only, read by anyone (the core keeps those
  // of pushes, pulls, clocks and staleness).
  struct Counters {
    std::atomic<uint64_t> requests{0}, registrations{0}, barriers{0}, errors{0},
        bytes_received{0}, bytes_sent{0}, replies_sent{0}, replies_dropped{0},
        copies_on_write{0}, replies_over_budget{0}, barriers_timed_out{0}, barriers_refused{0},
        held_barriers{0}, stops_refused{0};
    std::array<std::atomic<uint64_t>, 16> errors_by_code{};
  };
  static void Bump(std::atomic<uint64_t>& c, uint64_t by = 1) {
    c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }

  bool ReceiveOne(bool block);
  void Handle(std::size_t nparts, bool too_many_frames) ASGD_REQUIRES(mu_);
  void HandleValid(const Header& h, std::size_t nparts) ASGD_REQUIRES(mu_);
  void BuildPayload(const Header& h, std::size_t nparts, Payload* out);
  void ReleasePayloadFrames(std::size_t nparts);

  // Every reply goes through here: counts bytes and messages, treats an undeliverable
  // reply as a counted outcome (the peer went away), never as an error.
  void SendReply(zmq::message_t& routing, const Header& h, zmq::message_t* payload);
  void SendError(zmq::message_t& routing, const Header& request, ErrorCode code,
                 const std::string& detail);
  void SendAck(zmq::message_t& routing, const Header& request, uint64_t aux);
  void SendValues(zmq::message_t& routing, const Header& request, ReplyBuffer* rule_payload,
                  uint64_t aux);
  void FailAllHeld(ErrorCode code, const std::string& why) ASGD_REQUIRES(mu_);
  void Tick();

  using Steady = std::chrono::steady_clock;
  // The peer behind a routing frame (created on first use; idle ones are swept).
  std::shared_ptr<PeerQueue> PeerFor(const zmq::message_t& routing);
  std::shared_ptr<PeerQueue> PeerFor(const std::string& routing_id);
  // Whether a reply charged `charge` bytes may be queued to peer; counts and logs a drop.
  bool WithinBudget(PeerQueue& peer, int64_t charge);
  void HandleBarrier(const Header& h) ASGD_REQUIRES(mu_);
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
  AlignedVector<float> scratch_;  // payload frames that arrived misaligned
  std::vector<Payload::Piece> pieces_;

  mutable std::mutex mu_;
  ValueBlock* current_ ASGD_GUARDED_BY(mu_) = nullptr;
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
  std::unique_ptr<ShardCore> core_;

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

ShardServer::Impl::Impl(std::shared_ptr<Context> context, ServerOptions options,
                        std::vector<float> initial, std::unique_ptr<ServerRule> rule)
    : context_(std::move(context)),
      options_(std::move(options)),
      size_(static_cast<int64_t>(initial.size())) {
  ASGD_CHECK(context_ != nullptr, "ShardServer needs a Context");
  ASGD_CHECK(rule != nullptr, "ShardServer needs a ServerRule");
  if (options_.endpoint.empty()) {
    throw ConfigError("server.endpoint", "", "an address such as tcp://127.0.0.1:5000");
  }
  if (options_.request_hwm < 0 || options_.reply_hwm < 0) {
    throw ConfigError("server.hwm", std::to_string(std::min(options_.request_hwm, options_.reply_hwm)),
                      "a message count >= 0");
  }
  endpoint_ = ParseEndpoint(options_.endpoint, "server.endpoint");
  CheckCurveServer(options_.curve);
  if (!options_.curve.enabled && !options_.allow_plain_remote && !IsLoopbackTcp(options_.endpoint)) {
    throw ConfigError(
        "cluster.allow_plain_remote", "false",
        ::asgd::internal::StrCat("true to serve ", options_.endpoint,
                                 " without CURVE: it is not a loopback address, and anyone who "
                                 "reaches it could read and change the shard (or set "
                                 "cluster.curve = true, or bind 127.0.0.1)"));
  }
  if (options_.curve.enabled && endpoint_->Scheme() == "inproc") {
    throw ConfigError("server.curve", "enabled",
                      "an ipc:// or tcp:// endpoint for a CURVE server (inproc:// connections "
                      "are never authenticated)");
  }
  if (options_.clock == nullptr) {
    owned_clock_ = NewSystemClock();
    clock_ = owned_clock_.get();
  } else {
    clock_ = options_.clock;
  }
  max_payload_bytes_ = options_.max_payload_bytes != 0
                           ? options_.max_payload_bytes
                           : std::max<uint64_t>(static_cast<uint64_t>(size_) * 4, 4096);
  rule_name_ = rule->Name();
  {
    const auto shard_bytes = static_cast<uint64_t>(size_) * sizeof(float);
    const uint64_t budget = options_.max_queued_reply_bytes != 0
                                ? options_.max_queued_reply_bytes
                                : std::max<uint64_t>(32 * shard_bytes, uint64_t{16} << 20);
    if (budget < shard_bytes || budget > (uint64_t{1} << 62)) {
      throw ConfigError("cluster.max_queued_reply_bytes", std::to_string(budget),
                        ::asgd::internal::StrCat("at least the shard's ", shard_bytes,
                                                 " bytes (one pull reply)"));
    }
    reply_budget_ = static_cast<int64_t>(budget);
  }
  if (options_.max_barriers_per_peer < 1) {
    throw ConfigError("cluster.max_barriers_per_peer",
                      std::to_string(options_.max_barriers_per_peer), "at least 1");
  }
  if (options_.barrier_timeout.count() < 0) {
    throw ConfigError("cluster.barrier_timeout_s", std::to_string(options_.barrier_timeout.count()),
                      "a duration >= 0 (0: never)");
  }

  try {
    socket_ = zmq::socket_t(context_->zmq_context(), zmq::socket_type::router);
    const SocketTuning tuning = endpoint_->Tuning();
    internal::ConfigureSocket(socket_, options_.reply_hwm, options_.request_hwm,
                              tuning.send_buffer_bytes, tuning.receive_buffer_bytes);
    // An undeliverable reply (peer gone) is reported to us instead of silently dropped.
    socket_.set(zmq::sockopt::router_mandatory, 1);
    // A frame larger than any valid request makes ZeroMQ drop that connection before it
    // allocates the frame (ipc/tcp). Header frames are far below the floor of 4 KiB.
    socket_.set(zmq::sockopt::maxmsgsize,
                static_cast<int64_t>(std::max<uint64_t>(max_payload_bytes_, 4096)) +
                    (options_.curve.enabled ? internal::kCurveFrameOverhead : 0));
  } catch (const zmq::error_t& e) {
    internal::ThrowZmqError(e, "creating the server socket for", options_.endpoint);
  }
  if (options_.curve.enabled) {
    curve_ = std::make_unique<internal::CurveServerSecurity>(
        *context_, socket_, options_.curve, ::asgd::internal::StrCat("shard ", options_.shard));
  }
  bound_ = endpoint_->Bind(socket_.handle(), options_.bind_retry);
  if (curve_ != nullptr) curve_->SetAddress(bound_);
  // Stop() wakes the blocking receive through a private inproc endpoint of the same
  // socket, carrying a secret only this process knows; so the request path is a plain
  // blocking receive, with no poller and no wake-up descriptor.
  const uint64_t n = g_control_counter.fetch_add(1);
  control_secret_ = SplitMix64(reinterpret_cast<uintptr_t>(this) ^ (n << 32) ^
                               static_cast<uint64_t>(clock_->Now().count()));
  control_address_ = "inproc://asgd-shard-control-" + std::to_string(n);
  try {
    socket_.bind(control_address_);
  } catch (const zmq::error_t& e) {
    internal::ThrowZmqError(e, "bind", control_address_);
  }
  // The value block is a raw, reference-counted pointer that only ~Impl releases, and
  // ~Impl does not run when the constructor throws: allocate it after the last step that
  // can throw (a bind refused), or a failed construction leaks the shard's values.
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = new ValueBlock(size_, tally_);
    if (size_ > 0) std::memcpy(current_->data, initial.data(), initial.size() * sizeof(float));
    ShardCore::Options core_options;
    core_options.shard = options_.shard;
    core_options.clock = clock_;
    core_options.staleness_sink = options_.staleness_sink;
    core_options.reject_non_finite = options_.reject_non_finite;
    core_ = std::make_unique<ShardCore>(core_options, std::move(rule), this, this);
  }
  ASGD_LOG(kDebug, "shard ", options_.shard, " (", rule_name_, ", ", size_,
           " floats) bound to ", bound_);
}

ShardServer::Impl::~Impl() {
  Stop();
  try {
    Join();
  } catch (const std::exception& e) {
    ASGD_LOG(kError, "shard ", options_.shard, " at ", bound_, " ended with an error: ", e.what());
  }
  socket_.close();
  std::lock_guard<std::mutex> lock(mu_);
  // Reply frames still in flight keep their blocks alive through their own references.
  if (current_ != nullptr) current_->Unref();
  for (ValueBlock* b : spares_) b->Unref();
  spares_.clear();
}

std::span<float> ShardServer::Impl::mutable_values() {
  if (!current_->exclusive()) {
    // A pull reply still references these values: write into another block.
    ValueBlock* next = nullptr;
    for (auto it = spares_.begin(); it != spares_.end(); ++it) {
      if ((*it)->exclusive() && (*it)->capacity >= size_) {
        next = *it;
        spares_.erase(it);
        break;
      }
    }
    if (next == nullptr) next = new ValueBlock(size_, tally_);
    std::memcpy(next->data, current_->data, static_cast<std::size_t>(size_) * sizeof(float));
    if (static_cast<int>(spares_.size()) < options_.spare_buffers) {
      spares_.push_back(current_);
    } else {
      current_->Unref();
    }
    current_ = next;
    Bump(counters_.copies_on_write);
  }
  return {current_->data, static_cast<std::size_t>(size_)};
}

void ShardServer::Impl::MarkServing() {
  if (serving_.exchange(true)) throw InvariantError("shard server is already serving");
  if (finished_.load()) {
    serving_.store(false);
    throw InvariantError("shard server ended with an error and cannot serve again");
  }
}

void ShardServer::Impl::Run() {
  MarkServing();
  Serve();
}

void ShardServer::Impl::Serve() {
  try {
    Duration tick = Duration::zero();
    {
      std::lock_guard<std::mutex> lock(mu_);
      core_->Start();
      tick = core_->rule().TickInterval();
    }
    auto next_tick = tick > Duration::zero() ? Steady::now() + tick : Steady::time_point::max();
    int timeout_ms = -1;
    socket_.set(zmq::sockopt::rcvtimeo, -1);
    while (!stop_requested_.load()) {
      // Wake for the rule's tick and for the first barrier deadline, whichever is sooner.
      const Steady::time_point wake = std::min(next_tick, barrier_wake_);
      int ms = -1;
      if (wake != Steady::time_point::max()) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - Steady::now());
        ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
      }
      if (ms != timeout_ms) {
        socket_.set(zmq::sockopt::rcvtimeo, ms);
        timeout_ms = ms;
      }
      ReceiveOne(/*block=*/true);
      if (next_tick != Steady::time_point::max() && Steady::now() >= next_tick) {
        Tick();
        next_tick = Steady::now() + tick;
      }
      if (barrier_wake_ != Steady::time_point::max()) {
        const Steady::time_point now = Steady::now();
        if (now >= barrier_wake_) {
          std::lock_guard<std::mutex> lock(mu_);
          ExpireBarriers(now);
        }
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    FailAllHeld(ErrorCode::kShuttingDown, "shard server is stopping");
  } catch (...) {
    finished_.store(true);
    try {
      std::lock_guard<std::mutex> lock(mu_);
      FailAllHeld(ErrorCode::kShuttingDown, "shard server stopped after an error");
    } catch (...) {
    }
    serving_.store(false);
    throw;
  }
  serving_.store(false);
}

bool ShardServer::Impl::ReceiveOne(bool block) {
  std::size_t n = 0;
  bool too_many = false;
  uint64_t bytes = 0;
  for (;;) {
    if (n == parts_.size()) parts_.emplace_back();
    zmq::message_t& m = parts_[n];
    zmq::recv_result_t r;
    try {
      r = socket_.recv(m, n == 0 && !block ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR && n == 0) return false;
      if (e.num() == EINTR) continue;
      internal::ThrowZmqError(e, "receive on", bound_);
    }
    if (!r) {
      if (n == 0) return false;  // timeout or nothing queued
      continue;                  // cannot happen mid-message; be safe
    }
    bytes += m.size();
    ++n;
    if (!m.more()) break;
    if (n >= kMaxPayloadFrames + 2) {
      // Drain the rest of an oversized message without keeping it.
      zmq::message_t sink;
      do {
        (void)socket_.recv(sink);
        bytes += sink.size();
      } while (sink.more());
      too_many = true;
      break;
    }
  }
  internal::AnnotateReceive();
  Bump(counters_.bytes_received, bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Handle(n, too_many);
    version_published_.store(core_->version(), std::memory_order_relaxed);
    held_published_.store(core_->held(), std::memory_order_relaxed);
  }
  for (std::size_t i = 0; i < n; ++i) parts_[i].rebuild();
  pieces_.clear();
  return true;
}

void ShardServer::Impl::Handle(std::size_t nparts, bool too_many_frames) {
  Bump(counters_.requests);
  zmq::message_t& routing = parts_[0];
  Header h;
  if (nparts < 2) {
    SendError(routing, h, ErrorCode::kTruncated, "message has no header frame");
    return;
  }
  const DecodeError decoded = DecodeHeader(Bytes(parts_[1]), &h);
  if (!decoded.ok()) {
    SendError(routing, h, decoded.code, decoded.detail);
    return;
  }
  if (h.aux == control_secret_ && !h.is_reply() && h.role == Role::kPs) {
    if (h.op == Op::kStop) {
      stop_requested_.store(true);  // from Stop(): no reply, the sender is gone
      return;
    }
    if (h.op == Op::kHeartbeat) {  // from Close(): let the held replies go
      FailAllHeld(ErrorCode::kShuttingDown, "shard server closed: the run is over");
      return;
    }
    if (h.op == Op::kRegister) {  // from SetLiveWorkers()
      core_->Membership(live_workers_.load());
      return;
    }
  }
  if (h.is_reply()) {
    SendError(routing, h, ErrorCode::kUnknownOp,
              std::string("got a ") + std::string(OpName(h.op)) + " reply, expected a request");
    return;
  }
  if (too_many_frames) {
    SendError(routing, h, ErrorCode::kBadFrames,
              ::asgd::internal::StrCat("message has more than ", kMaxPayloadFrames, " payload frames"));
    return;
  }
  std::size_t sizes_small[16];
  std::vector<std::size_t> sizes_big;
  std::span<std::size_t> sizes;
  if (nparts - 2 <= std::size(sizes_small)) {
    sizes = std::span<std::size_t>(sizes_small, nparts - 2);
  } else {
    sizes_big.resize(nparts - 2);
    sizes = sizes_big;
  }
  for (std::size_t i = 2; i < nparts; ++i) sizes[i - 2] = parts_[i].size();
  DecodeError e = CheckPayloadFrames(h, sizes, max_payload_bytes_);
  if (e.ok()) e = CheckRequestForShard(h, options_.shard, static_cast<uint64_t>(size_));
  if (e.ok() && h.count == 0 && (h.op == Op::kPush || h.op == Op::kPushPull)) {
    // It would change nothing, yet the rule would count it as an update and advance the
    // version: a peer could inflate every other worker's staleness at no cost.
    e.code = ErrorCode::kMalformedHeader;
    e.detail = ::asgd::internal::StrCat(OpName(h.op), " of 0 elements: nothing to apply");
  }
  if (!e.ok()) {
    SendError(routing, h, e.code, e.detail);
    return;
  }
  try {
    HandleValid(h, nparts);
  } catch (const std::exception& ex) {
    // A bug in the rule or the server: answer, then end serving with the error.
    SendError(routing, h, ErrorCode::kInternal,
              ::asgd::internal::StrCat("shard ", options_.shard, " failed: ", ex.what()));
    throw;
  }
}

void ShardServer::Impl::BuildPayload(const Header& h, std::size_t nparts, Payload* out) {
  pieces_.clear();
  // ZeroMQ may hand us a small frame at any byte offset inside its receive buffer;
  // such frames are copied to aligned scratch (large frames have their own allocation).
  std::size_t misaligned = 0;
  for (std::size_t i = 2; i < nparts; ++i) {
    if (reinterpret_cast<uintptr_t>(parts_[i].data()) % alignof(float) != 0) {
      misaligned += parts_[i].size() / sizeof(float);
    }
  }
  if (misaligned > scratch_.size()) scratch_.resize(misaligned);
  std::size_t scratch_at = 0;
  int64_t at = static_cast<int64_t>(h.offset);
  for (std::size_t i = 2; i < nparts; ++i) {
    const std::size_t count = parts_[i].size() / sizeof(float);
    const float* f;
    if (reinterpret_cast<uintptr_t>(parts_[i].data()) % alignof(float) != 0) {
      std::memcpy(scratch_.data() + scratch_at, parts_[i].data(), parts_[i].size());
      f = scratch_.data() + scratch_at;
      scratch_at += count;
    } else {
      f = static_cast<const float*>(parts_[i].data());
    }
    pieces_.push_back({at, std::span<const float>(f, count)});
    at += static_cast<int64_t>(count);
  }
  // Non-finite values are the core's to reject.
  *out = Payload(static_cast<int64_t>(h.offset), pieces_);
}

void ShardServer::Impl::ReleasePayloadFrames(std::size_t nparts) {
  // Over inproc:// this hands the client's buffer back before the reply is sent.
  for (std::size_t i = 2; i < nparts; ++i) parts_[i].rebuild();
}

namespace {

RequestInfo InfoFrom(const Header& h) {
  RequestInfo info;
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

Header RequestCopy(const Header& h) {
  Header c = h;
  c.message.clear();
  return c;
}

}  // namespace

void ShardServer::Impl::HandleValid(const Header& h, std::size_t nparts) {
  zmq::message_t& routing = parts_[0];
  if (closing_.load() && (h.op == Op::kPush || h.op == Op::kPushPull || h.op == Op::kClock ||
                          h.op == Op::kBarrier)) {
    SendError(routing, h, ErrorCode::kShuttingDown,
              ::asgd::internal::StrCat("shard ", options_.shard, " is closed: the run is over"));
    return;
  }
  switch (h.op) {
    case Op::kPush:
    case Op::kPushPull: {
      const RequestInfo info = InfoFrom(h);
      Payload payload;
      // A compressed push is decoded by the core (frames at any alignment).
      std::span<const std::byte> encoded_frames[compression::kEncodedFrames];
      const bool encoded = h.encoding != compression::Encoding::kDense;
      if (encoded) {
        for (std::size_t i = 2; i < nparts; ++i) encoded_frames[i - 2] = Bytes(parts_[i]);
      } else {
        BuildPayload(h, nparts, &payload);
      }
      const EncodedPayload encoded_payload{h.encoding, encoded_frames};
      const uint64_t overflows_before = NonFiniteResultsOnThisThread();
      // The core scans the payload for NaN right before the rule adds it: the add reuses
      // that scan's largest magnitude to know whether it can overflow (server_rule.h).
      internal::ArmPayloadScans();
      ShardCore::Result r;
      try {
        if (encoded) {
          r = h.op == Op::kPush ? core_->Push(info, encoded_payload)
                                : core_->PushPull(info, encoded_payload);
        } else {
          r = h.op == Op::kPush ? core_->Push(info, std::move(payload))
                                : core_->PushPull(info, std::move(payload));
        }
      } catch (...) {
        internal::DisarmPayloadScans();
        throw;
      }
      internal::DisarmPayloadScans();
      ReleasePayloadFrames(nparts);
      if (!r.ok()) {
        // A rule's add helper refused a result that would not be finite (server_rule.h):
        // the same refusal as a non-finite payload, and the shard is unchanged.
        const ErrorCode code = r.error == ErrorCode::kRejectedByRule &&
                                       NonFiniteResultsOnThisThread() != overflows_before
                                   ? ErrorCode::kNonFinite
                                   : r.error;
        SendError(routing, h, code, r.message);
        return;
      }
      if (r.deferred) {
        held_[r.token] =
            Held{std::string(static_cast<const char*>(routing.data()), routing.size()),
                 RequestCopy(h)};
        return;
      }
      if (h.op == Op::kPush) {
        SendAck(routing, h, static_cast<uint64_t>(r.outcome));
      } else {
        SendValues(routing, h, r.reply.empty() ? nullptr : &r.reply,
                   static_cast<uint64_t>(r.outcome));
      }
      return;
    }
    case Op::kPull:
    case Op::kClock: {
      const RequestInfo info = InfoFrom(h);
      ShardCore::Result r = h.op == Op::kPull ? core_->Pull(info) : core_->Clock(info);
      if (r.deferred) {
        held_[r.token] =
            Held{std::string(static_cast<const char*>(routing.data()), routing.size()),
                 RequestCopy(h)};
        return;
      }
      if (h.op == Op::kPull) {
        SendValues(routing, h, r.reply.empty() ? nullptr : &r.reply, 0);
      } else {
        SendAck(routing, h, 0);
      }
      return;
    }
    case Op::kRegister:
      Bump(counters_.registrations);
      SendAck(routing, h, static_cast<uint64_t>(size_));
      return;
    case Op::kHeartbeat:
      SendAck(routing, h, static_cast<uint64_t>(size_));
      return;
    case Op::kBarrier:
      HandleBarrier(h);
      return;
    case Op::kStop:
      if (!options_.allow_remote_stop) {
        Bump(counters_.stops_refused);
        SendError(routing, h, ErrorCode::kUnknownOp, "remote stop is disabled on this server");
        return;
      }
      if (endpoint_->Scheme() != "inproc" && !SameSecret(h.message, options_.stop_token)) {
        // The token is never echoed or logged, right or wrong.
        Bump(counters_.stops_refused);
        ASGD_LOG(kWarning, "shard ", options_.shard, ": refused a stop request without the run's token");
        SendError(routing, h, ErrorCode::kUnknownOp,
                  "stop refused: it does not carry this run's token (ASGD_RUN_TOKEN)");
        return;
      }
      SendAck(routing, h, 0);
      stop_requested_.store(true);
      return;
    case Op::kCheckpoint:
    case Op::kError:
      break;
  }
  SendError(routing, h, ErrorCode::kUnknownOp,
            ::asgd::internal::StrCat("op ", OpName(h.op), " is not served by shard servers"));
}

void ShardServer::Impl::HandleBarrier(const Header& h) {
  zmq::message_t& routing = parts_[0];
  if (h.aux == 0) {
    SendError(routing, h, ErrorCode::kMalformedHeader, "barrier with 0 participants");
    return;
  }
  auto found = barriers_.find(h.clock);
  if (found != barriers_.end() && found->second.participants != h.aux) {
    SendError(routing, h, ErrorCode::kMalformedHeader,
              ::asgd::internal::StrCat("barrier ", h.clock, " has ", found->second.participants,
                                       " participants, request says ", h.aux));
    return;
  }
  std::shared_ptr<PeerQueue> peer = PeerFor(routing);
  if (peer->barriers >= options_.max_barriers_per_peer) {
    // Each waiting barrier request holds its return address until the barrier completes:
    // a peer must not make the server hold an unbounded number of them.
    Bump(counters_.barriers_refused);
    SendError(routing, h, ErrorCode::kRejectedByRule,
              ::asgd::internal::StrCat("this peer already waits in ", peer->barriers,
                                       " barriers, the most allowed (cluster.max_barriers_per_peer)"));
    return;
  }
  Barrier& b = found != barriers_.end() ? found->second : barriers_[h.clock];
  if (b.tokens.empty()) {
    b.participants = h.aux;
    if (options_.barrier_timeout.count() > 0) b.deadline = Steady::now() + options_.barrier_timeout;
  }
  const uint64_t token = core_->Hold(InfoFrom(h));
  held_[token] = Held{std::string(static_cast<const char*>(routing.data()), routing.size()),
                      RequestCopy(h)};
  b.tokens.push_back(token);
  ++peer->barriers;
  b.peers.push_back(std::move(peer));
  Bump(counters_.barriers);
  if (b.tokens.size() >= b.participants) {
    const Barrier done = std::move(b);
    barriers_.erase(h.clock);
    for (const auto& p : done.peers) --p->barriers;
    for (uint64_t t : done.tokens) core_->Release(t);
  }
  PublishBarriers();
}

void ShardServer::Impl::ExpireBarriers(Steady::time_point now) {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    const int64_t id = it->first;
    const Barrier expired = std::move(it->second);
    it = barriers_.erase(it);
    for (const auto& p : expired.peers) --p->barriers;
    Bump(counters_.barriers_timed_out, expired.tokens.size());
    const std::string why = ::asgd::internal::StrCat(
        "barrier ", id, " timed out with ", expired.tokens.size(), " of ", expired.participants,
        " participants (cluster.barrier_timeout_s ",
        options_.barrier_timeout.count() / 1000.0, " s)");
    ASGD_LOG(kWarning, "shard ", options_.shard, ": ", why);
    for (uint64_t t : expired.tokens) core_->Fail(t, why);
  }
  PublishBarriers();
}

void ShardServer::Impl::ForgetBarriers() {
  for (auto& [id, b] : barriers_) {
    for (const auto& p : b.peers) --p->barriers;
  }
  barriers_.clear();
  PublishBarriers();
}

void ShardServer::Impl::PublishBarriers() {
  uint64_t held = 0;
  barrier_wake_ = Steady::time_point::max();
  for (const auto& [id, b] : barriers_) {
    held += b.tokens.size();
    barrier_wake_ = std::min(barrier_wake_, b.deadline);
  }
  counters_.held_barriers.store(held, std::memory_order_relaxed);
}

std::shared_ptr<PeerQueue> ShardServer::Impl::PeerFor(const zmq::message_t& routing) {
  return PeerFor(std::string(static_cast<const char*>(routing.data()), routing.size()));
}

std::shared_ptr<PeerQueue> ShardServer::Impl::PeerFor(const std::string& routing_id) {
  auto it = peers_.find(routing_id);
  if (it != peers_.end()) return it->second;
  if (peers_.size() >= sweep_at_) {
    // Forget peers that hold nothing: no queued reply, no barrier, no frame in flight.
    std::erase_if(peers_, [](const auto& entry) {
      const PeerQueue& p = *entry.second;
      return entry.second.use_count() == 1 && p.barriers == 0 &&
             p.bytes.load(std::memory_order_relaxed) == 0;
    });
    sweep_at_ = std::max<std::size_t>(64, 2 * peers_.size());
  }
  return peers_.emplace(routing_id, std::make_shared<PeerQueue>(tally_)).first->second;
}

bool ShardServer::Impl::WithinBudget(PeerQueue& peer, int64_t charge) {
  const int64_t queued = peer.bytes.load(std::memory_order_relaxed);
  if (queued + charge <= reply_budget_) {
    peer.over_budget = false;
    return true;
  }
  Bump(counters_.replies_dropped);
  Bump(counters_.replies_over_budget);
  if (!peer.over_budget) {
    peer.over_budget = true;
    ASGD_LOG(kWarning, "shard ", options_.shard, ": a peer holds ", queued,
             " bytes of unread replies (budget ", reply_budget_,
             ", cluster.max_queued_reply_bytes); dropping its replies until it reads them");
  }
  return false;
}

namespace {

Header ReplyHeaderFor(const Header& request, uint32_t shard, uint64_t version) {
  Header r;
  r.op = request.op;
  r.flags = kFlagReply;
  r.role = Role::kPs;
  r.sender = shard;
  r.shard = shard;
  r.request_id = request.request_id;
  r.version = version;
  r.clock = request.clock;
  r.offset = request.offset;
  r.count = request.count;
  return r;
}

}  // namespace

void ShardServer::Impl::SendReply(zmq::message_t& routing, const Header& h,
                                  zmq::message_t* payload) {
  // Publish before the reply leaves (not only after the request was handled): a peer
  // that reads stats() once it has this reply must see the version the reply reports.
  version_published_.store(core_->version(), std::memory_order_relaxed);
  held_published_.store(core_->held(), std::memory_order_relaxed);
  zmq::message_t header = HeaderMessage(h);
  const uint64_t bytes = routing.size() + header.size() + (payload ? payload->size() : 0);
  try {
    internal::AnnotateSend();
    if (!socket_.send(routing, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      Bump(counters_.replies_dropped);  // the peer's reply queue is full
      return;
    }
    (void)socket_.send(header, payload ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                       : zmq::send_flags::dontwait);
    if (payload) (void)socket_.send(*payload, zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) {
      Bump(counters_.replies_dropped);  // the peer disconnected
      return;
    }
    internal::ThrowZmqError(e, "reply on", bound_);
  }
  Bump(counters_.replies_sent);
  Bump(counters_.bytes_sent, bytes);
}

void ShardServer::Impl::SendError(zmq::message_t& routing, const Header& request, ErrorCode code,
                                  const std::string& detail) {
  Header r = ReplyHeaderFor(request, options_.shard, core_->version());
  r.op = Op::kError;
  r.code = code;
  r.offset = 0;
  r.count = 0;
  r.message = detail;
  Bump(counters_.errors);
  const auto i = static_cast<std::size_t>(code);
  if (i < counters_.errors_by_code.size()) Bump(counters_.errors_by_code[i]);
  ASGD_LOG(kDebug, "shard ", options_.shard, ": error reply ", ErrorCodeName(code), ": ", detail);
  SendReply(routing, r, nullptr);
}

void ShardServer::Impl::SendAck(zmq::message_t& routing, const Header& request, uint64_t aux) {
  Header r = ReplyHeaderFor(request, options_.shard, core_->version());
  r.offset = 0;
  r.count = 0;
  r.aux = aux;
  SendReply(routing, r, nullptr);
}

void ShardServer::Impl::SendValues(zmq::message_t& routing, const Header& request,
                                   ReplyBuffer* rule_payload, uint64_t aux) {
  Header r = ReplyHeaderFor(request, options_.shard, core_->version());
  r.aux = aux;
  if (request.count == 0) {
    SendReply(routing, r, nullptr);
    return;
  }
  const std::size_t bytes = static_cast<std::size_t>(request.count) * sizeof(float);
  r.dtype = DType::kFloat32;
  r.payload_bytes = bytes;
  r.frames = 1;
  // A reply read from the values may pin a copy-on-write copy of the whole shard.
  const int64_t charge = rule_payload != nullptr ? static_cast<int64_t>(bytes)
                                                 : size_ * static_cast<int64_t>(sizeof(float));
  std::shared_ptr<PeerQueue> peer = PeerFor(routing);
  if (!WithinBudget(*peer, charge)) return;
  zmq::message_t payload;
  if (rule_payload != nullptr) {
    ASGD_CHECK_EQ(rule_payload->count(), static_cast<int64_t>(request.count),
                  "rule ", rule_name_, " replied with a payload of the wrong size");
    auto* hold = new FrameHold(std::move(peer), charge, nullptr);
    payload = zmq::message_t(rule_payload->Release(), bytes, &FrameHold::Free, hold);
  } else {
    auto* hold = new FrameHold(std::move(peer), charge, current_);
    payload = zmq::message_t(current_->data + request.offset, bytes, &FrameHold::Free, hold);
  }
  SendReply(routing, r, &payload);
}

void ShardServer::Impl::Release(uint64_t token, const HeldRequest& request,
                                ReplyBuffer* payload) {
  auto it = held_.find(token);
  if (it == held_.end()) return;
  Held held = std::move(it->second);
  held_.erase(it);
  zmq::message_t routing(held.routing_id.data(), held.routing_id.size());
  switch (held.request.op) {
    case Op::kPull:
    case Op::kPushPull:
      SendValues(routing, held.request, payload, static_cast<uint64_t>(request.outcome));
      return;
    case Op::kPush:
      SendAck(routing, held.request, static_cast<uint64_t>(request.outcome));
      return;
    default:
      SendAck(routing, held.request, 0);
      return;
  }
}

void ShardServer::Impl::Fail(uint64_t token, const HeldRequest& /*request*/, ErrorCode code,
                             const std::string& message) {
  auto it = held_.find(token);
  if (it == held_.end()) return;
  Held held = std::move(it->second);
  held_.erase(it);
  zmq::message_t routing(held.routing_id.data(), held.routing_id.size());
  SendError(routing, held.request, code, message);
}

void ShardServer::Impl::FailAllHeld(ErrorCode code, const std::string& why) {
  core_->FailAll(code, why);
  ForgetBarriers();
  held_published_.store(0, std::memory_order_relaxed);
}

void ShardServer::Impl::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  core_->Tick();
  version_published_.store(core_->version(), std::memory_order_relaxed);
  held_published_.store(core_->held(), std::memory_order_relaxed);
}

void ShardServer::Impl::Start() {
  std::lock_guard<std::mutex> lock(thread_mu_);
  if (thread_.joinable()) throw InvariantError("shard server already started");
  // serving() is true from here on, not only once the thread got going, so that a caller
  // polling serving() after Start() waits for the server rather than racing it.
  MarkServing();
  thread_ = std::thread([this] {
    try {
      Serve();
    } catch (...) {
      std::lock_guard<std::mutex> l(thread_mu_);
      error_ = std::current_exception();
    }
  });
}

void ShardServer::Impl::Stop() {
  stop_requested_.store(true);
  if (!serving_.load()) return;  // Run() checks the flag before it blocks
  SignalControl(Op::kStop);
}

void ShardServer::Impl::Close() {
  if (closing_.exchange(true)) return;
  // Requests from now on are refused on the serving thread; the held ones are failed
  // there when this signal arrives (or when serving ends, if it never does).
  if (serving_.load()) SignalControl(Op::kHeartbeat);
}

void ShardServer::Impl::SetLiveWorkers(int live_workers) {
  live_workers_.store(live_workers);
  if (serving_.load()) {
    SignalControl(Op::kRegister);
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    core_->Membership(live_workers);
  }
}

void ShardServer::Impl::SignalControl(Op op) {
  try {
    zmq::socket_t s(context_->zmq_context(), zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 1000);
    s.connect(control_address_);
    Header h;
    h.op = op;
    h.role = Role::kPs;
    h.shard = options_.shard;
    h.aux = control_secret_;
    internal::AnnotateSend();
    (void)s.send(HeaderMessage(h), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    ASGD_LOG(kWarning, "shard ", options_.shard, ": ", OpName(op), " signal failed: ", e.what());
  }
}

void ShardServer::Impl::Join() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(thread_mu_);
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(thread_mu_);
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

ShardStats ShardServer::Impl::stats() const {
  ShardStats s;
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  s.version = version_published_.load(std::memory_order_relaxed);
  const ShardCoreStats core = core_->stats();
  s.requests = get(counters_.requests);
  s.pushes_applied = core.pushes_applied;
  s.pushes_accepted = core.pushes_accepted;
  s.pushes_dropped = core.pushes_dropped;
  s.pulls = core.pulls;
  s.push_pulls = core.push_pulls;
  s.clocks = core.clocks;
  s.registrations = get(counters_.registrations);
  s.barriers = get(counters_.barriers);
  s.errors = get(counters_.errors);
  for (std::size_t i = 0; i < s.errors_by_code.size(); ++i) {
    s.errors_by_code[i] = get(counters_.errors_by_code[i]);
  }
  s.staleness_sum = core.staleness_sum;
  s.staleness_max = core.staleness_max;
  s.bytes_received = get(counters_.bytes_received);
  s.bytes_sent = get(counters_.bytes_sent);
  s.replies_sent = get(counters_.replies_sent);
  s.replies_dropped = get(counters_.replies_dropped);
  s.held = held_published_.load(std::memory_order_relaxed);
  s.copies_on_write = get(counters_.copies_on_write);
  s.auth_refused = curve_ != nullptr ? curve_->refused() : 0;
  s.queued_reply_bytes =
      static_cast<uint64_t>(std::max<int64_t>(0, tally_->queued_bytes.load(std::memory_order_relaxed)));
  s.pinned_snapshots = static_cast<uint64_t>(
      std::max<int64_t>(0, tally_->value_blocks.load(std::memory_order_relaxed) - 1));
  s.held_barriers = get(counters_.held_barriers);
  s.replies_over_budget = get(counters_.replies_over_budget);
  s.barriers_timed_out = get(counters_.barriers_timed_out);
  s.barriers_refused = get(counters_.barriers_refused);
  s.stops_refused = get(counters_.stops_refused);
  return s;
}

ShardSnapshot ShardServer::Impl::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return SnapshotLocked();
}

ShardSnapshot ShardServer::Impl::SnapshotLocked() const { return core_->Snapshot(); }

void ShardServer::Impl::Restore(const ShardSnapshot& snapshot) {
  std::lock_guard<std::mutex> lock(mu_);
  ASGD_CHECK_EQ(snapshot.shard, options_.shard, "snapshot of another shard");
  core_->Restore(snapshot);
  version_published_.store(core_->version(), std::memory_order_relaxed);
}

// ---- ShardServer -----------------------------------------------------------------

ShardServer::ShardServer(std::shared_ptr<Context> context, ServerOptions options,
                         std::vector<float> initial_values, std::unique_ptr<ServerRule> rule)
    : impl_(std::make_unique<Impl>(std::move(context), std::move(options),
                                   std::move(initial_values), std::move(rule))) {}
ShardServer::~ShardServer() = default;
const std::string& ShardServer::endpoint() const { return impl_->endpoint(); }
uint32_t ShardServer::shard() const { return impl_->shard(); }
int64_t ShardServer::size() const { return impl_->size(); }
const std::string& ShardServer::rule_name() const { return impl_->rule_name(); }
void ShardServer::Run() { impl_->Run(); }
void ShardServer::Start() { impl_->Start(); }
void ShardServer::Stop() { impl_->Stop(); }
void ShardServer::Close() { impl_->Close(); }
void ShardServer::SetLiveWorkers(int live_workers) { impl_->SetLiveWorkers(live_workers); }
bool ShardServer::closed() const { return impl_->closed(); }
void ShardServer::Join() { impl_->Join(); }
void ShardServer::Shutdown() {
  impl_->Stop();
  impl_->Join();
}
bool ShardServer::serving() const { return impl_->serving(); }
ShardStats ShardServer::stats() const { return impl_->stats(); }
ShardSnapshot ShardServer::Snapshot() const { return impl_->Snapshot(); }

// Every shard's mu_ is held (by `locks`) while SnapshotLocked runs.
std::vector<ShardSnapshot> SnapshotTogether(const std::vector<std::unique_ptr<ShardServer>>& servers,
                                            const std::function<void()>& while_held)
    ASGD_NO_THREAD_SAFETY_ANALYSIS {
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(servers.size());
  for (const auto& server : servers) locks.emplace_back(server->impl_->state_mutex());
  std::vector<ShardSnapshot> snapshots;
  snapshots.reserve(servers.size());
  for (const auto& server : servers) snapshots.push_back(server->impl_->SnapshotLocked());
  if (while_held) while_held();
  return snapshots;
}
void ShardServer::Restore(const ShardSnapshot& snapshot) { impl_->Restore(snapshot); }

std::vector<std::unique_ptr<ShardServer>> StartShardServers(
    std::shared_ptr<Context> context, const Placement& placement, std::span<const float> initial,
    const ServerRuleFactory& rule_for, const std::function<std::string(int)>& endpoint_for,
    const ServerOptions& base) {
  std::vector<std::unique_ptr<ShardServer>> servers;
  for (int s = 0; s < placement.num_shards(); ++s) {
    ServerOptions o = base;
    o.shard = static_cast<uint32_t>(s);
    o.endpoint = endpoint_for(s);
    servers.push_back(std::make_unique<ShardServer>(
        context, o, placement.Gather(s, initial), rule_for(static_cast<uint32_t>(s))));
  }
  for (auto& server : servers) server->Start();
  return servers;
}

std::vector<std::string> Endpoints(const std::vector<std::unique_ptr<ShardServer>>& servers) {
  std::vector<std::string> out;
  out.reserve(servers.size());
  for (const auto& s : servers) out.push_back(s->endpoint());
  return out;
}

}  // namespace asgd::transport
