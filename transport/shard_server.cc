#include "transport/shard_server.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "core/aligned.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/thread_annotations.h"
#include "transport/endpoint.h"
#include "transport/shard_server_impl.h"
#include "transport/zap_handler.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

using ps::CheckPayloadFrames;
using ps::CheckRequestForShard;
using ps::DecodeError;
using ps::DecodeHeader;
using ps::EncodedPayload;
using ps::ErrorCode;
using ps::Header;
using ps::kFlagLaterChunk;
using ps::kFlagMoreChunks;
using ps::kMaxPayloadFrames;
using ps::NonFiniteResultsOnThisThread;
using ps::Op;
using ps::OpName;
using ps::OpRequestHasPayload;
using ps::Payload;
using ps::RequestInfo;
using ps::Role;
using ps::ServerRule;
using ps::ShardCore;

namespace {

using internal::Bytes;
using internal::HeaderMessage;
using shard_server_internal::InfoFrom;
using shard_server_internal::RequestCopy;

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
    throw ConfigError("server.hwm",
                      std::to_string(std::min(options_.request_hwm, options_.reply_hwm)),
                      "a message count >= 0");
  }
  endpoint_ = ParseEndpoint(options_.endpoint, "server.endpoint");
  CheckCurveServer(options_.curve);
  if (!options_.curve.enabled && !options_.allow_plain_remote &&
      !IsLoopbackTcp(options_.endpoint)) {
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
  if (options_.reply_chunk_bytes < 0 ||
      (options_.reply_chunk_bytes > 0 &&
       options_.reply_chunk_bytes < static_cast<int64_t>(sizeof(float)))) {
    throw ConfigError("cluster.chunk_bytes", std::to_string(options_.reply_chunk_bytes),
                      "0 (never chunk a reply) or at least one element's 4 bytes");
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
  reply_before_add_ = endpoint_->Scheme() != "inproc";
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
  ASGD_LOG(kDebug, "shard ", options_.shard, " (", rule_name_, ", ", size_, " floats) bound to ",
           bound_);
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
  if (staging_ != nullptr) staging_->Unref();
  for (ValueBlock* b : spares_) b->Unref();
  spares_.clear();
}

ShardServer::Impl::ValueBlock* ShardServer::Impl::ExclusiveBlock() {
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if ((*it)->exclusive() && (*it)->capacity >= size_) {
      ValueBlock* b = *it;
      spares_.erase(it);
      return b;
    }
  }
  return new ValueBlock(size_, tally_);
}

void ShardServer::Impl::Retire(ValueBlock* block) {
  if (static_cast<int>(spares_.size()) < options_.spare_buffers) {
    spares_.push_back(block);
  } else {
    block->Unref();
  }
}

std::span<float> ShardServer::Impl::mutable_values() {
  if (!current_->exclusive()) {
    // A pull reply still references these values: write into another block.
    ValueBlock* next = ExclusiveBlock();
    std::memcpy(next->data, current_->data, static_cast<std::size_t>(size_) * sizeof(float));
    Retire(current_);
    current_ = next;
    Bump(counters_.copies_on_write);
  }
  return {current_->data, static_cast<std::size_t>(size_)};
}

std::span<float> ShardServer::Impl::staging_values() {
  // No pull reply references a staging block: it is not current until committed.
  if (staging_ == nullptr) staging_ = ExclusiveBlock();
  return {staging_->data, static_cast<std::size_t>(size_)};
}

void ShardServer::Impl::CommitStaging() {
  ASGD_CHECK(staging_ != nullptr, "CommitStaging without a staging block");
  Retire(current_);
  current_ = staging_;
  staging_ = nullptr;
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
      // Wake for the rule's tick, the first barrier deadline and an open chunked push's
      // deadline, whichever is sooner.
      Steady::time_point wake = std::min(next_tick, barrier_wake_);
      if (assembly_.active) wake = std::min(wake, assembly_.deadline);
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
      if (assembly_.active && Steady::now() >= assembly_.deadline) {
        std::lock_guard<std::mutex> lock(mu_);
        FailAssembly(ErrorCode::kIncompletePush,
                     ::asgd::internal::StrCat("its next chunk did not come within ",
                                              options_.chunk_timeout.count(), " ms"));
      }
      // A rule's tick waits until an open chunked push is complete (nothing between its
      // chunks may change the values).
      if (!assembly_.active && next_tick != Steady::time_point::max() &&
          Steady::now() >= next_tick) {
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
    FailAssembly(ErrorCode::kShuttingDown, "shard server is stopping");
    backlog_.clear();
    FailAllHeld(ErrorCode::kShuttingDown, "shard server is stopping");
  } catch (...) {
    finished_.store(true);
    try {
      std::lock_guard<std::mutex> lock(mu_);
      FailAssembly(ErrorCode::kShuttingDown, "shard server stopped after an error");
      backlog_.clear();
      FailAllHeld(ErrorCode::kShuttingDown, "shard server stopped after an error");
    } catch (...) {
    }
    serving_.store(false);
    throw;
  }
  serving_.store(false);
}

std::size_t ShardServer::Impl::NextMessage(bool block, bool* too_many) {
  *too_many = false;
  // A waiting message may go now when no chunked push is open, or when it is the open
  // push's peer's (its next chunk, received while another push was open).
  auto taken = backlog_.end();
  if (!assembly_.active) {
    taken = backlog_.begin();
  } else {
    taken = std::find_if(backlog_.begin(), backlog_.end(),
                         [&](const Backlogged& m) { return FromAssemblyPeer(m.parts[0]); });
  }
  if (taken != backlog_.end()) {
    const std::size_t n = taken->parts.size();
    if (parts_.size() < n) parts_.resize(n);
    for (std::size_t i = 0; i < n; ++i) parts_[i] = std::move(taken->parts[i]);
    *too_many = taken->too_many;
    backlog_.erase(taken);
    return n;
  }
  std::size_t n = 0;
  uint64_t bytes = 0;
  for (;;) {
    if (n == parts_.size()) parts_.emplace_back();
    zmq::message_t& m = parts_[n];
    zmq::recv_result_t r;
    try {
      r = socket_.recv(m, n == 0 && !block ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR && n == 0) return 0;
      if (e.num() == EINTR) continue;
      internal::ThrowZmqError(e, "receive on", bound_);
    }
    if (!r) {
      if (n == 0) return 0;  // timeout or nothing queued
      continue;              // cannot happen mid-message; be safe
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
      *too_many = true;
      break;
    }
  }
  internal::AnnotateReceive();
  Bump(counters_.bytes_received, bytes);
  return n;
}

bool ShardServer::Impl::ReceiveOne(bool block) {
  bool too_many = false;
  const std::size_t n = NextMessage(block, &too_many);
  if (n == 0) return false;
  const bool assembling = assembly_.active;
  if (assembling && !FromAssemblyPeer(parts_[0])) {
    // Another peer's request waits until the open chunked push is complete.
    Backlogged b;
    b.parts.reserve(n);
    for (std::size_t i = 0; i < n; ++i) b.parts.push_back(std::move(parts_[i]));
    b.too_many = too_many;
    backlog_.push_back(std::move(b));
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunk_taken_ = false;
    Handle(n, too_many);
    if (assembling && !chunk_taken_ && assembly_.active) {
      // The open push's peer sent something that was not its next chunk (and was
      // answered on its own): the push cannot complete.
      FailAssembly(ErrorCode::kIncompletePush,
                   "the sender's next message was not the push's next chunk");
    }
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
    SendError(
        routing, h, ErrorCode::kBadFrames,
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

void ShardServer::Impl::BuildPayload(uint64_t offset, std::span<zmq::message_t> frames,
                                     Payload* out) {
  pieces_.clear();
  // ZeroMQ may hand us a small frame at any byte offset inside its receive buffer;
  // such frames are copied to aligned scratch (large frames have their own allocation).
  std::size_t misaligned = 0;
  for (const zmq::message_t& f : frames) {
    if (reinterpret_cast<uintptr_t>(f.data()) % alignof(float) != 0) {
      misaligned += f.size() / sizeof(float);
    }
  }
  if (misaligned > scratch_.size()) scratch_.resize(misaligned);
  std::size_t scratch_at = 0;
  auto at = static_cast<int64_t>(offset);
  for (const zmq::message_t& frame : frames) {
    const std::size_t count = frame.size() / sizeof(float);
    const float* f;
    if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(float) != 0) {
      std::memcpy(scratch_.data() + scratch_at, frame.data(), frame.size());
      f = scratch_.data() + scratch_at;
      scratch_at += count;
    } else {
      f = static_cast<const float*>(frame.data());
    }
    pieces_.push_back({at, std::span<const float>(f, count)});
    at += static_cast<int64_t>(count);
  }
  // Non-finite values are the core's to reject.
  *out = Payload(static_cast<int64_t>(offset), pieces_);
}

void ShardServer::Impl::ReleasePayloadFrames(std::size_t nparts) {
  // Over inproc:// this hands the client's buffer back before the reply is sent.
  for (std::size_t i = 2; i < nparts; ++i) parts_[i].rebuild();
}

void ShardServer::Impl::HandleValid(const Header& h, std::size_t nparts) {
  zmq::message_t& routing = parts_[0];
  if (closing_.load() &&
      (h.op == Op::kPush || h.op == Op::kPushPull || h.op == Op::kClock || h.op == Op::kBarrier)) {
    SendError(routing, h, ErrorCode::kShuttingDown,
              ::asgd::internal::StrCat("shard ", options_.shard, " is closed: the run is over"));
    return;
  }
  if (assembly_.active) {
    if (IsNextChunk(h)) {
      ContinueAssembly(h, nparts);
      return;
    }
    FailAssembly(ErrorCode::kIncompletePush,
                 ::asgd::internal::StrCat("the sender's next message was a ", OpName(h.op),
                                          " request, not the push's chunk at element ",
                                          assembly_.next_offset));
  }
  if ((h.flags & kFlagLaterChunk) != 0) {
    // The rest of a push whose first chunks this server never saw: its client sent them
    // to a server that died at this address, or the sequence broke above. Applying it
    // (even as a push of its own range) would apply part of a push.
    SendError(routing, h, ErrorCode::kIncompletePush,
              ::asgd::internal::StrCat("a chunk of ", OpName(h.op), " request ", h.request_id,
                                       " at element ", h.offset,
                                       " whose earlier chunks did not come to this shard server "
                                       "(restarted?); nothing of it is applied"));
    return;
  }
  if ((h.flags & kFlagMoreChunks) != 0) {
    StartAssembly(h, nparts);
    return;
  }
  if (OpRequestHasPayload(h.op) && h.aux != 0 && h.aux != h.count) {
    SendError(routing, h, ErrorCode::kPayloadMismatch,
              ::asgd::internal::StrCat("the last chunk of a push (", h.aux,
                                       " elements left) whose earlier chunks did not come"));
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
      // A dense push whose frames are ours (not the client's buffer, as over inproc://)
      // may be answered before its add: ShardCore::PushReplyFirst.
      const bool reply_first = h.op == Op::kPush && !encoded && reply_before_add_ &&
                               h.payload_bytes >= options_.ack_before_add_bytes;
      if (encoded) {
        for (std::size_t i = 2; i < nparts; ++i) encoded_frames[i - 2] = Bytes(parts_[i]);
      } else {
        BuildPayload(h.offset, std::span(parts_).subspan(2, nparts - 2), &payload);
      }
      const EncodedPayload encoded_payload{h.encoding, encoded_frames};
      const uint64_t overflows_before = NonFiniteResultsOnThisThread();
      // The core scans the payload for NaN right before the rule adds it: the add reuses
      // that scan's largest magnitude to know whether it can overflow (server_rule.h).
      ps::internal::ArmPayloadScans();
      ShardCore::Result r;
      try {
        if (encoded) {
          r = h.op == Op::kPush ? core_->Push(info, encoded_payload)
                                : core_->PushPull(info, encoded_payload);
        } else if (reply_first) {
          r = core_->PushReplyFirst(info, std::move(payload));
        } else {
          r = h.op == Op::kPush ? core_->Push(info, std::move(payload))
                                : core_->PushPull(info, std::move(payload));
        }
      } catch (...) {
        ps::internal::DisarmPayloadScans();
        throw;
      }
      ps::internal::DisarmPayloadScans();
      if (r.add_pending) {
        // The ack depends only on the decision: it leaves now, and the add runs while it
        // travels and the client sends its next request. The shard's mutex is held until
        // the add is done, so no snapshot sees the version without the values.
        Bump(counters_.acked_before_add);
        try {
          ReplyToPush(routing, h, r, overflows_before);
        } catch (...) {
          core_->FinishAdd();
          throw;
        }
        core_->FinishAdd();
        ReleasePayloadFrames(nparts);
        return;
      }
      ReleasePayloadFrames(nparts);
      ReplyToPush(routing, h, r, overflows_before);
      return;
    }
    case Op::kPull:
    case Op::kClock: {
      const RequestInfo info = InfoFrom(h);
      ShardCore::Result r = h.op == Op::kPull ? core_->Pull(info) : core_->Clock(info);
      if (r.deferred) {
        held_[r.token] = Held{std::string(static_cast<const char*>(routing.data()), routing.size()),
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
        ASGD_LOG(kWarning, "shard ", options_.shard,
                 ": refused a stop request without the run's token");
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

}  // namespace asgd::transport
