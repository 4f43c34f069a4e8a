#include "sim/sim_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace asgd::sim {

using ::asgd::internal::StrCat;
using ps::ErrorCode;
using ps::Op;
using ps::PushOutcome;
using ps::PushPart;
using ps::PushPartsOf;
using ps::Status;
using ps::StatusCode;

namespace {

bool Pushes(Op op) { return op == Op::kPush || op == Op::kPushPull; }
bool Reads(Op op) { return op == Op::kPull || op == Op::kPushPull; }

Status ShuttingDown() {
  return Status(StatusCode::kRemoteError, "sim store: shutting down", ErrorCode::kShuttingDown);
}

}  // namespace

// The core's ReplySink for one shard: a released request's reply leaves now.
class SimStore::Replies final : public ps::ReplySink {
 public:
  Replies(SimStore* store, int shard) : store_(store), shard_(shard) {}

  void Release(uint64_t token, const ps::HeldRequest& held, ps::ReplyBuffer* payload) override {
    Call* c = Take(token);
    if (c == nullptr) return;
    if (held.outcome == PushOutcome::kDropped && Pushes(held.info.op)) c->dropped = true;
    int64_t bytes = 0;
    if (Reads(held.info.op)) {
      store_->Fill(shard_, *c, payload);
      bytes = held.info.count * static_cast<int64_t>(sizeof(float));
    }
    (*c->reply_versions)[static_cast<std::size_t>(shard_)] = store_->version(shard_);
    store_->Reply(shard_, *c, bytes);
  }
  void Fail(uint64_t token, const ps::HeldRequest& /*held*/, ErrorCode code,
            const std::string& message) override {
    Call* c = Take(token);
    if (c == nullptr) return;
    if (c->status.ok()) {
      c->status =
          Status(StatusCode::kRemoteError, StrCat("sim shard ", shard_, ": ", message), code);
    }
    store_->Reply(shard_, *c, 0);
  }

  void Hold(uint64_t token, Call* c) { held_[token] = c; }

 private:
  Call* Take(uint64_t token) {
    auto it = held_.find(token);
    if (it == held_.end()) return nullptr;
    Call* c = it->second;
    held_.erase(it);
    return c;
  }

  SimStore* store_;
  int shard_;
  std::map<uint64_t, Call*> held_;
};

struct SimStore::Shard {
  std::unique_ptr<ps::VectorStorage> storage;
  std::unique_ptr<Replies> replies;
  std::unique_ptr<ps::ShardCore> core;
  std::vector<ps::Payload::Piece> pieces;          // scratch for pushes
  std::vector<std::span<const std::byte>> frames;  // scratch for compressed pushes
  // With a transport charge: the shard's I/O thread's jobs (a message's CPU, then what
  // follows it), one at a time, and whether it runs one.
  std::deque<std::pair<Duration, std::function<void()>>> io;
  bool io_busy = false;
};

SimStore::SimStore(sim::Scheduler* sched, sim::NetworkModel* network, ps::Placement placement,
                   std::span<const float> initial, const RuleFactory& rules,
                   ps::StalenessSink* sink)
    : sched_(sched), network_(network), clock_(*sched), placement_(std::move(placement)) {
  ASGD_CHECK(sched_ != nullptr && network_ != nullptr, "SimStore needs a scheduler and a network");
  ASGD_CHECK_EQ(static_cast<int64_t>(initial.size()), placement_.total_elements(),
                "SimStore: initial values");
  const sim::NetworkOptions& n = network_->options();
  inline_ = n.sharing == sim::NetworkSharing::kFifo && n.latency == Duration::zero() &&
            std::isinf(n.link_bandwidth) &&
            (n.shard_nic_bandwidth == 0 || std::isinf(n.shard_nic_bandwidth)) &&
            n.server_per_message == Duration::zero() && n.server_ns_per_element == 0;
  for (int s = 0; s < placement_.num_shards(); ++s) {
    auto shard = std::make_unique<Shard>();
    shard->storage = std::make_unique<ps::VectorStorage>(placement_.Gather(s, initial));
    shard->replies = std::make_unique<Replies>(this, s);
    ps::ShardCore::Options o;
    o.shard = static_cast<uint32_t>(s);
    o.clock = &clock_;
    o.staleness_sink = sink;
    o.reject_non_finite = true;
    shard->core = std::make_unique<ps::ShardCore>(o, rules(static_cast<uint32_t>(s)),
                                                  shard->storage.get(), shard->replies.get());
    shard->core->Start();
    shards_.push_back(std::move(shard));
  }
}

SimStore::~SimStore() = default;

void SimStore::ChargeTransportCpu(CorePool* cores, const TransportCpu& cpu) {
  ASGD_CHECK(cores != nullptr, "SimStore::ChargeTransportCpu needs the core pool");
  cpu.Validate();
  if (!cpu.active()) return;
  cores_ = cores;
  cpu_ = cpu;
  inline_ = false;
}

void SimStore::ReadValues(std::span<float> out) const {
  ASGD_CHECK_EQ(static_cast<int64_t>(out.size()), size(), "SimStore::ReadValues");
  for (int s = 0; s < num_shards(); ++s) {
    placement_.Scatter(s, shards_[static_cast<std::size_t>(s)]->core->values(), out);
  }
}

std::vector<float> SimStore::values() const {
  std::vector<float> v(static_cast<std::size_t>(size()));
  ReadValues(v);
  return v;
}

uint64_t SimStore::version(int shard) const {
  return shards_.at(static_cast<std::size_t>(shard))->core->version();
}

ps::StoreStats SimStore::stats() const {
  ps::StoreStats s;
  for (const auto& shard : shards_) ps::Accumulate(s, shard->core->stats());
  return s;
}

std::string SimStore::Describe() const {
  return internal::StrCat(num_shards(), " simulated shard", num_shards() > 1 ? "s" : "");
}

std::unique_ptr<ps::ParamClient> SimStore::NewClient(uint32_t id, ps::Role) {
  return std::make_unique<SimParamClient>(this, id);
}

std::vector<ps::ShardSnapshot> SimStore::Snapshot(const std::function<void()>& while_held) {
  std::vector<ps::ShardSnapshot> snaps;
  for (const auto& shard : shards_) snaps.push_back(shard->core->Snapshot());
  if (while_held) while_held();
  return snaps;
}

void SimStore::Restore(const std::vector<ps::ShardSnapshot>& snapshots, const std::string& source) {
  if (snapshots.size() != shards_.size()) {
    throw DataError(source, internal::StrCat("holds ", snapshots.size(), " shards, the run has ",
                                             shards_.size()));
  }
  // Every shard checked before any is touched.
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    const auto want = static_cast<std::size_t>(placement_.shard_size(static_cast<int>(s)));
    if (snapshots[s].values.size() != want) {
      throw DataError(source, internal::StrCat("shard ", s, " holds ", snapshots[s].values.size(),
                                               " values, the placement gives it ", want));
    }
  }
  for (std::size_t s = 0; s < shards_.size(); ++s) shards_[s]->core->Restore(snapshots[s]);
}

void SimStore::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& shard : shards_) shard->core->FailAll(ErrorCode::kShuttingDown, "shutting down");
}

int64_t SimStore::RequestBytes(int shard, const Call& call) const {
  if (!Pushes(call.op)) return 0;
  if (!call.encoded.empty()) return call.encoded[static_cast<std::size_t>(shard)].bytes();
  return placement_.shard_size(shard) * static_cast<int64_t>(sizeof(float));
}

int64_t SimStore::ServedElements(int shard, Op op) const {
  return (Pushes(op) ? placement_.shard_size(shard) : 0) +
         (Reads(op) ? placement_.shard_size(shard) : 0);
}

Status SimStore::Request(Call& call) {
  ASGD_CHECK(sched_->InTask(), "SimStore::Request outside a scheduler task");
  if (shut_down_) return ShuttingDown();
  if (Pushes(call.op) && call.encoded.empty()) {
    ASGD_CHECK_EQ(static_cast<int64_t>(call.update.size()), size(), "push size");
  }
  if (Pushes(call.op) && !call.encoded.empty()) {
    ASGD_CHECK_EQ(static_cast<int>(call.encoded.size()), num_shards(), "compressed push parts");
    for (int s = 0; s < num_shards(); ++s) {
      ASGD_CHECK_EQ(call.encoded[static_cast<std::size_t>(s)].count, placement_.shard_size(s),
                    "compressed push part ", s);
    }
  }
  if (Reads(call.op)) ASGD_CHECK_EQ(static_cast<int64_t>(call.out.size()), size(), "pull size");
  sim::Completion done(*sched_, num_shards());
  call.done = &done;
  call.task = sched_->Current();
  call.sent = sched_->Now();
  for (int s = 0; s < num_shards(); ++s) {
    if (inline_) {
      Handle(s, call);
      continue;
    }
    const int64_t bytes = RequestBytes(s, call);
    if (cores_ != nullptr) {
      // 1. Client send: this task holds a core for the request's CPU, then hands the
      // request to the network.
      const Duration now = sched_->Now();
      const Duration cpu_done = cores_->Run(now, cpu_.Cost(bytes));
      if (cpu_done > now) sched_->Sleep(cpu_done - now);
      network_->SendToShard(
          *sched_, static_cast<int>(call.worker), s, bytes, [this, s, &call, bytes] {
            // 2. Shard receive, on the shard's I/O thread; then its server thread.
            ShardIo(s, cpu_.Cost(bytes), [this, s, &call] {
              const Duration served = network_->Serve(s, ServedElements(s, call.op), sched_->Now());
              sched_->At(served, [this, s, &call] { Handle(s, call); });
            });
          });
      continue;
    }
    network_->SendToShard(*sched_, static_cast<int>(call.worker), s, bytes, [this, s, &call] {
      const Duration served = network_->Serve(s, ServedElements(s, call.op), sched_->Now());
      sched_->At(served, [this, s, &call] { Handle(s, call); });
    });
  }
  done.Wait();
  call.done = nullptr;
  return call.status;
}

void SimStore::Handle(int s, Call& call) {
  Shard& shard = *shards_[static_cast<std::size_t>(s)];
  const auto si = static_cast<std::size_t>(s);
  if (shut_down_) {
    if (call.status.ok()) call.status = ShuttingDown();
    Reply(s, call, 0);
    return;
  }
  ps::RequestInfo info;
  info.op = call.op;
  info.role = ps::Role::kWorker;
  info.worker = call.worker;
  info.request_id = call.request_id;
  info.version = call.versions[si];
  if (Pushes(call.op) && call.oldest[si]) info.oldest_version = call.oldest[si];
  info.clock = call.step;
  info.offset = 0;
  info.count = Pushes(call.op) || Reads(call.op) ? placement_.shard_size(s) : 0;
  ps::ShardCore::Result r;
  if (Pushes(call.op) && !call.encoded.empty()) {
    const compression::Encoded& e = call.encoded[si];
    shard.frames.assign(e.frames.begin(), e.frames.end());
    const ps::EncodedPayload packed{e.encoding, shard.frames};
    r = call.op == Op::kPush ? shard.core->Push(info, packed) : shard.core->PushPull(info, packed);
  } else if (Pushes(call.op)) {
    shard.pieces.clear();
    int64_t local = 0;
    for (const auto& range : placement_.ranges(s)) {
      shard.pieces.push_back({local, call.update.subspan(static_cast<std::size_t>(range.begin),
                                                         static_cast<std::size_t>(range.count))});
      local += range.count;
    }
    ps::Payload payload(0, shard.pieces);
    r = call.op == Op::kPush ? shard.core->Push(info, std::move(payload))
                             : shard.core->PushPull(info, std::move(payload));
  } else if (call.op == Op::kPull) {
    r = shard.core->Pull(info);
  } else {
    ASGD_CHECK(call.op == Op::kClock, "SimStore: op ", ps::OpName(call.op), " not served");
    r = shard.core->Clock(info);
  }
  if (!r.ok()) {
    if (call.status.ok()) {
      call.status =
          Status(StatusCode::kRemoteError, StrCat("sim shard ", s, ": ", r.message), r.error);
    }
    Reply(s, call, 0);
    return;
  }
  if (Pushes(call.op) && r.outcome == PushOutcome::kDropped) call.dropped = true;
  if (observer_) {
    observer_(Service{s, call.op, call.worker, call.sent, sched_->Now(), RequestBytes(s, call),
                      ServedElements(s, call.op), shard.core->version(), r.deferred});
  }
  if (r.deferred) {
    shard.replies->Hold(r.token, &call);
    return;
  }
  int64_t bytes = 0;
  if (Reads(call.op)) {
    Fill(s, call, r.reply.empty() ? nullptr : &r.reply);
    bytes = placement_.shard_size(s) * static_cast<int64_t>(sizeof(float));
  }
  (*call.reply_versions)[si] = shard.core->version();
  Reply(s, call, bytes);
}

void SimStore::ShardIo(int s, Duration cpu, std::function<void()> then) {
  Shard& shard = *shards_[static_cast<std::size_t>(s)];
  shard.io.emplace_back(cpu, std::move(then));
  if (!shard.io_busy) NextShardIo(s);
}

void SimStore::NextShardIo(int s) {
  Shard& shard = *shards_[static_cast<std::size_t>(s)];
  if (shard.io.empty()) {
    shard.io_busy = false;
    return;
  }
  shard.io_busy = true;
  auto job = std::move(shard.io.front());
  shard.io.pop_front();
  const Duration done = cores_->Run(sched_->Now(), job.first);
  sched_->At(done, [this, s, then = std::move(job.second)] {
    then();
    NextShardIo(s);
  });
}

void SimStore::Reply(int s, Call& call, int64_t bytes) {
  if (cores_ != nullptr) {
    // 3. Shard reply send, on the shard's I/O thread; then the wire; then 4. client
    // receive: a core for the reply's CPU, after which the call's shard is done.
    ShardIo(s, cpu_.Cost(bytes), [this, s, &call, bytes] {
      network_->SendToWorker(*sched_, s, static_cast<int>(call.worker), bytes,
                             [this, &call, bytes] {
                               sched_->At(cores_->Run(sched_->Now(), cpu_.Cost(bytes)),
                                          [&call] { call.done->Done(); });
                             });
    });
    return;
  }
  if (inline_ && sched_->Current() == call.task) {
    // Served inline by the caller's own task: the zero network (FIFO), where the reply
    // arrives at once; the model still counts its bytes.
    network_->SendToWorker(s, static_cast<int>(call.worker), bytes, sched_->Now());
    call.done->Done();
    return;
  }
  network_->SendToWorker(*sched_, s, static_cast<int>(call.worker), bytes,
                         [&call] { call.done->Done(); });
}

void SimStore::Fill(int s, Call& call, const ps::ReplyBuffer* payload) const {
  if (call.out.empty()) return;
  const std::span<const float> src = payload != nullptr && !payload->empty()
                                         ? payload->values()
                                         : shards_[static_cast<std::size_t>(s)]->core->values();
  placement_.Scatter(s, src, call.out);
}

// ---- the client ---------------------------------------------------------------------

SimParamClient::SimParamClient(SimStore* store, uint32_t worker)
    : store_(store),
      worker_(worker),
      pulled_(static_cast<std::size_t>(store->num_shards()), 0),
      window_(static_cast<std::size_t>(store->num_shards())),
      oldest_(static_cast<std::size_t>(store->num_shards())),
      reply_(static_cast<std::size_t>(store->num_shards()), 0) {}

Status SimParamClient::Send(Op op, int64_t step, std::span<const float> update,
                            std::span<float> out, std::span<const compression::Encoded> encoded) {
  SimStore::Call c;
  c.op = op;
  c.worker = worker_;
  c.request_id = next_request_++;
  c.step = step;
  c.update = update;
  c.encoded = encoded;
  c.out = out;
  c.versions = pulled_;
  std::fill(oldest_.begin(), oldest_.end(), std::nullopt);
  if (Pushes(op)) {
    // The oldest version of the push: the mark's, when it is older than the last pull.
    for (std::size_t s = 0; s < window_.size(); ++s) {
      if (window_[s] && *window_[s] < pulled_[s]) oldest_[s] = window_[s];
      window_[s].reset();
    }
  }
  c.oldest = oldest_;
  reply_ = pulled_;
  c.reply_versions = &reply_;
  Status st = store_->Request(c);
  if (st.ok() && Reads(op)) pulled_ = reply_;
  if (st.ok() && c.dropped) ++dropped_;
  return st;
}

Status SimParamClient::DoPull(std::span<float> out) { return Send(Op::kPull, 0, {}, out); }

Status SimParamClient::DoPush(std::span<const float> update, int64_t step) {
  return Send(Op::kPush, step, update, {});
}

Status SimParamClient::DoPushPull(std::span<const float> update, std::span<float> out,
                                  int64_t step) {
  return Send(Op::kPushPull, step, update, out);
}

std::vector<PushPart> SimParamClient::PushParts() const { return PushPartsOf(store_->placement()); }

Status SimParamClient::DoPushEncoded(std::span<const compression::Encoded> parts,
                                     std::span<float> out, int64_t step) {
  return Send(out.empty() ? Op::kPush : Op::kPushPull, step, {}, out, parts);
}

Status SimParamClient::DoSendClock(int64_t clock) { return Send(Op::kClock, clock, {}, {}); }

void SimParamClient::DoMarkWindowStart() {
  for (std::size_t s = 0; s < window_.size(); ++s) window_[s] = pulled_[s];
}

}  // namespace asgd::sim
