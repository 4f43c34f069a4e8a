// The second half of the ZeroMQ shard server (shard_server_impl.h says how the files
// divide): barriers, peers and their reply budgets, replies, held requests, the
// lifecycle and stats, and ShardServer's public calls.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include <pthread.h>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "transport/shard_server.h"
#include "transport/shard_server_impl.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

using ps::DType;
using ps::ErrorCode;
using ps::ErrorCodeName;
using ps::Header;
using ps::HeldRequest;
using ps::kFlagChunkedReply;
using ps::kFlagLaterChunk;
using ps::kFlagMoreChunks;
using ps::kFlagReply;
using ps::Op;
using ps::OpName;
using ps::Placement;
using ps::ReplyBuffer;
using ps::Role;
using ps::ServerRule;
using ps::ServerRuleFactory;
using ps::ShardCoreStats;
using ps::ShardSnapshot;

namespace {

using internal::HeaderMessage;
using shard_server_internal::FrameHold;
using shard_server_internal::InfoFrom;
using shard_server_internal::PeerQueue;
using shard_server_internal::RequestCopy;

}  // namespace

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
    SendError(
        routing, h, ErrorCode::kRejectedByRule,
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
  held_[token] =
      Held{std::string(static_cast<const char*>(routing.data()), routing.size()), RequestCopy(h)};
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
    const std::string why =
        ::asgd::internal::StrCat("barrier ", id, " timed out with ", expired.tokens.size(), " of ",
                                 expired.participants, " participants (cluster.barrier_timeout_s ",
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
  if (SendMessage(routing, h, payload)) Bump(counters_.replies_sent);
}

bool ShardServer::Impl::SendMessage(zmq::message_t& routing, const Header& h,
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
      return false;
    }
    (void)socket_.send(header, payload ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                       : zmq::send_flags::dontwait);
    if (payload) (void)socket_.send(*payload, zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) {
      Bump(counters_.replies_dropped);  // the peer disconnected
      return false;
    }
    internal::ThrowZmqError(e, "reply on", bound_);
  }
  Bump(counters_.bytes_sent, bytes);
  return true;
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
  static_assert(static_cast<std::size_t>(ErrorCode::kIncompletePush) <
                    std::tuple_size_v<decltype(ShardStats::errors_by_code)>,
                "ShardStats::errors_by_code has a slot for every ErrorCode");
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
  if ((request.flags & kFlagChunkedReply) != 0 && options_.reply_chunk_bytes > 0 &&
      bytes > static_cast<std::size_t>(options_.reply_chunk_bytes)) {
    if (rule_payload != nullptr) {
      ASGD_CHECK_EQ(rule_payload->count(), static_cast<int64_t>(request.count), "rule ", rule_name_,
                    " replied with a payload of the wrong size");
    }
    SendValueChunks(routing, r, rule_payload, std::move(peer), charge);
    return;
  }
  zmq::message_t payload;
  if (rule_payload != nullptr) {
    ASGD_CHECK_EQ(rule_payload->count(), static_cast<int64_t>(request.count), "rule ", rule_name_,
                  " replied with a payload of the wrong size");
    auto* hold = new FrameHold(std::move(peer), charge, nullptr);
    payload = zmq::message_t(rule_payload->Release(), bytes, &FrameHold::Free, hold);
  } else {
    auto* hold = new FrameHold(std::move(peer), charge, current_);
    payload = zmq::message_t(current_->data + request.offset, bytes, &FrameHold::Free, hold);
  }
  SendReply(routing, r, &payload);
}

void ShardServer::Impl::SendValueChunks(zmq::message_t& routing, const Header& reply,
                                        ReplyBuffer* rule_payload, std::shared_ptr<PeerQueue> peer,
                                        int64_t charge) {
  using shard_server_internal::SharedReply;
  const uint64_t per_chunk =
      std::max<uint64_t>(1, static_cast<uint64_t>(options_.reply_chunk_bytes) / sizeof(float));
  const uint64_t chunks = (reply.count + per_chunk - 1) / per_chunk;
  // The sender's own reference keeps a rule's payload alive until the last chunk is
  // queued, however early ZeroMQ releases the first ones.
  SharedReply* shared = nullptr;
  const float* values = current_->data + reply.offset;
  if (rule_payload != nullptr) {
    shared = new SharedReply(rule_payload->Release());
    shared->Ref();
    values = shared->data;
  }
  const std::string id(static_cast<const char*>(routing.data()), routing.size());
  const auto share = static_cast<int64_t>(static_cast<uint64_t>(charge) / chunks);
  bool sent = true;
  for (uint64_t k = 0, at = 0; k < chunks; ++k) {
    const uint64_t n = std::min(per_chunk, reply.count - at);
    Header chunk = reply;
    chunk.offset = reply.offset + at;
    chunk.count = n;
    chunk.payload_bytes = n * sizeof(float);
    if (k + 1 < chunks) chunk.flags |= kFlagMoreChunks;
    if (k > 0) chunk.flags |= kFlagLaterChunk;
    // Equal shares of the charge; the last chunk takes the remainder.
    const int64_t hold_charge =
        k + 1 < chunks ? share : charge - share * static_cast<int64_t>(chunks - 1);
    auto* hold = new shard_server_internal::FrameHold(
        peer, hold_charge, shared != nullptr ? nullptr : current_, shared);
    zmq::message_t payload(const_cast<float*>(values + at), n * sizeof(float), &FrameHold::Free,
                           hold);
    zmq::message_t to(id.data(), id.size());
    if (!SendMessage(to, chunk, &payload)) {
      // The rest is not sent: the client's request times out, as for a dropped reply.
      sent = false;
      break;
    }
    at += n;
  }
  if (shared != nullptr) shared->Unref();
  if (sent) {
    Bump(counters_.replies_sent);
    Bump(counters_.chunked_replies);
  }
}

void ShardServer::Impl::Release(uint64_t token, const HeldRequest& request, ReplyBuffer* payload) {
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
    // Named for profilers, top -H and debuggers: "asgd-ps-<shard>" (15 bytes at most).
    const std::string name = "asgd-ps-" + std::to_string(options_.shard);
    (void)pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
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
  s.chunked_pushes = get(counters_.chunked_pushes);
  s.chunked_replies = get(counters_.chunked_replies);
  s.acked_before_add = get(counters_.acked_before_add);
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
  s.queued_reply_bytes = static_cast<uint64_t>(
      std::max<int64_t>(0, tally_->queued_bytes.load(std::memory_order_relaxed)));
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

ShardCoreStats ShardServer::core_stats() const { return impl_->core_stats(); }
ShardSnapshot ShardServer::Snapshot() const { return impl_->Snapshot(); }

// Every shard's mu_ is held (by `locks`) while SnapshotLocked runs.
std::vector<ShardSnapshot> SnapshotTogether(
    const std::vector<std::unique_ptr<ShardServer>>& servers,
    const std::function<void()>& while_held) ASGD_NO_THREAD_SAFETY_ANALYSIS {
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
    servers.push_back(std::make_unique<ShardServer>(context, o, placement.Gather(s, initial),
                                                    rule_for(static_cast<uint32_t>(s))));
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
