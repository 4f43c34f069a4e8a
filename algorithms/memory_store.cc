#include "algorithms/memory_store.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {

using ps::Status;

using ps::ErrorCode;
using ps::Op;
using ps::PushOutcome;
using ps::StatusCode;

// A request whose reply the rule deferred; the requesting thread waits for `done`.
struct MemoryStore::Held {
  std::span<float> out;  // pull / push-pull destination (the waiting thread's buffer)
  bool done = false;
  Status status;
  uint64_t version = 0;
};

// The core's ReplySink: completes a held request's record (under MemoryStore::mu_, as
// every core call) so that its waiting thread can return.
class MemoryStore::Replies final : public ps::ReplySink {
 public:
  void Bind(const ps::ShardCore* core) { core_ = core; }

  void Release(uint64_t token, const ps::HeldRequest& request, ps::ReplyBuffer* payload) override {
    Held* h = Find(token);
    if (h == nullptr) return;
    if (request.info.op == Op::kPull || request.info.op == Op::kPushPull) {
      Fill(h->out, request.info.offset, payload);
    }
    Finish(h, Status::Ok());
  }
  void Fail(uint64_t token, const ps::HeldRequest& /*request*/, ErrorCode code,
            const std::string& message) override {
    Held* h = Find(token);
    if (h == nullptr) return;
    Finish(h, Status(StatusCode::kRemoteError, "memory store: " + message, code));
  }

  Held* Hold(uint64_t token, Held h) { return &(held_[token] = h); }
  void Forget(uint64_t token) { held_.erase(token); }
  // Copies the values [offset, offset + out.size()) or payload into out.
  void Fill(std::span<float> out, int64_t offset, const ps::ReplyBuffer* payload) const {
    if (out.empty()) return;
    const float* src = payload != nullptr && !payload->empty()
                           ? payload->values().data()
                           : core_->values().data() + offset;
    std::memcpy(out.data(), src, out.size_bytes());
  }

  bool any_finished = false;  // set when a held request completes (for notify)

 private:
  Held* Find(uint64_t token) {
    auto it = held_.find(token);
    return it == held_.end() || it->second.done ? nullptr : &it->second;
  }
  void Finish(Held* h, Status status) {
    h->status = std::move(status);
    h->version = core_->version();
    h->done = true;
    any_finished = true;
  }

  const ps::ShardCore* core_ = nullptr;
  std::map<uint64_t, Held> held_;
};

ps::ShardSnapshot MemoryStore::SnapshotShard(const std::function<void()>& while_held) const {
  std::lock_guard<std::mutex> lock(mu_);
  ps::ShardSnapshot s = core_->Snapshot();
  if (while_held) while_held();
  return s;
}

void MemoryStore::RestoreShard(const ps::ShardSnapshot& snapshot) {
  std::lock_guard<std::mutex> lock(mu_);
  core_->Restore(snapshot);
}

std::unique_ptr<ps::ParamClient> MemoryStore::NewClient(uint32_t id, ps::Role) {
  return std::make_unique<MemoryClient>(this, id);
}

ps::Status MemoryStore::Read(std::span<float> out) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto v = core_->values();
  ASGD_CHECK_EQ(out.size(), v.size(), "MemoryStore::Read into a buffer of another size");
  std::copy(v.begin(), v.end(), out.begin());
  return ps::Status::Ok();
}

std::vector<ps::ShardSnapshot> MemoryStore::Snapshot(const std::function<void()>& while_held) {
  return {SnapshotShard(while_held)};
}

void MemoryStore::Restore(const std::vector<ps::ShardSnapshot>& snapshots,
                          const std::string& source) {
  if (snapshots.size() != 1) {
    throw DataError(source, internal::StrCat("holds ", snapshots.size(),
                                             " shards, the in-memory store has 1"));
  }
  if (snapshots[0].values.size() != size_) {
    throw DataError(source, internal::StrCat("holds ", snapshots[0].values.size(),
                                             " parameters, the model has ", size_));
  }
  RestoreShard(snapshots[0]);
}

MemoryStore::MemoryStore(std::vector<float> initial, std::unique_ptr<ps::ServerRule> rule,
                         const Clock* clock, ps::StalenessSink* sink)
    : size_(initial.size()) {
  ASGD_CHECK(rule != nullptr, "MemoryStore needs a server rule");
  if (clock == nullptr) {
    own_clock_ = NewSystemClock();
    clock = own_clock_.get();
  }
  storage_ = std::make_unique<ps::VectorStorage>(std::move(initial));
  replies_ = std::make_unique<Replies>();
  ps::ShardCore::Options options;
  options.shard = 0;
  options.clock = clock;
  options.staleness_sink = sink;
  options.reject_non_finite = true;
  core_ = std::make_unique<ps::ShardCore>(options, std::move(rule), storage_.get(), replies_.get());
  replies_->Bind(core_.get());
  std::lock_guard<std::mutex> lock(mu_);
  core_->Start();
}

MemoryStore::~MemoryStore() { Shutdown(); }

std::vector<float> MemoryStore::values() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto v = core_->values();
  return {v.begin(), v.end()};
}

uint64_t MemoryStore::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return core_->version();
}

ps::StoreStats MemoryStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return core_->stats();
}

void MemoryStore::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    core_->FailAll(ErrorCode::kShuttingDown, "shutting down");
  }
  released_.notify_all();
}

MemoryStore::Result MemoryStore::Request(Op op, uint32_t worker, int64_t step, uint64_t version,
                                         std::span<const float> update, std::span<float> out,
                                         std::optional<uint64_t> oldest_version,
                                         const compression::Encoded* encoded) {
  std::unique_lock<std::mutex> lock(mu_);
  Result result;
  if (shut_down_) {
    result.status = Status(StatusCode::kRemoteError, "memory store: shutting down",
                           ErrorCode::kShuttingDown);
    return result;
  }
  const bool pushes = op == Op::kPush || op == Op::kPushPull;
  const bool reads = op == Op::kPull || op == Op::kPushPull;
  if (pushes) {
    ASGD_CHECK_EQ(encoded != nullptr ? static_cast<std::size_t>(encoded->count) : update.size(),
                  size_, "push size");
  }
  if (reads) {
    ASGD_CHECK_EQ(out.size(), size_, "pull size");
  }
  ps::RequestInfo info;
  info.op = op;
  info.worker = worker;
  info.version = version;
  if (pushes) info.oldest_version = oldest_version;
  info.clock = step;
  info.offset = 0;
  info.count = pushes || reads ? static_cast<int64_t>(size_) : 0;
  ps::ShardCore::Result r;
  std::vector<std::span<const std::byte>> frames;
  if (encoded != nullptr) frames.assign(encoded->frames.begin(), encoded->frames.end());
  const ps::EncodedPayload packed{
      encoded != nullptr ? encoded->encoding : compression::Encoding::kDense, frames};
  switch (op) {
    case Op::kPush:
      r = encoded != nullptr ? core_->Push(info, packed)
                             : core_->Push(info, ps::Payload(0, {{0, update}}));
      break;
    case Op::kPushPull:
      r = encoded != nullptr ? core_->PushPull(info, packed)
                             : core_->PushPull(info, ps::Payload(0, {{0, update}}));
      break;
    case Op::kPull: r = core_->Pull(info); break;
    case Op::kClock: r = core_->Clock(info); break;
    default:
      ASGD_CHECK(false, "MemoryStore: op ", ps::OpName(op), " not served");
  }
  if (!r.ok()) {
    result.status = Status(StatusCode::kRemoteError, "memory store: " + r.message, r.error);
    return result;
  }
  result.outcome = r.outcome;
  // Replies the rule released while handling this request (e.g. the last push of a
  // round releases the others) wake their threads.
  const bool wake = replies_->any_finished;
  replies_->any_finished = false;
  if (!r.deferred) {
    if (reads) replies_->Fill(out, 0, &r.reply);
    result.version = core_->version();
    if (wake) {
      lock.unlock();
      released_.notify_all();
    }
    return result;
  }
  Held* held = replies_->Hold(r.token, Held{reads ? out : std::span<float>(), false, {}, 0});
  if (wake) released_.notify_all();
  released_.wait(lock, [&] { return held->done; });
  result.status = held->status;
  result.version = held->version;
  replies_->Forget(r.token);
  return result;
}

Status MemoryClient::DoPull(std::span<float> out) {
  auto r = store_->Request(Op::kPull, worker_, 0, pulled_version_, {}, out);
  if (r.status.ok()) pulled_version_ = r.version;
  return r.status;
}

std::optional<uint64_t> MemoryClient::TakeOldestVersion() {
  std::optional<uint64_t> oldest;
  if (window_version_ && *window_version_ < pulled_version_) oldest = window_version_;
  window_version_.reset();
  return oldest;
}

Status MemoryClient::DoPush(std::span<const float> update, int64_t step) {
  auto r = store_->Request(Op::kPush, worker_, step, pulled_version_, update, {},
                           TakeOldestVersion());
  if (r.status.ok() && r.outcome == PushOutcome::kDropped) ++dropped_;
  return r.status;
}

Status MemoryClient::DoPushPull(std::span<const float> update, std::span<float> out, int64_t step) {
  auto r = store_->Request(Op::kPushPull, worker_, step, pulled_version_, update, out,
                           TakeOldestVersion());
  if (r.status.ok()) {
    pulled_version_ = r.version;
    if (r.outcome == PushOutcome::kDropped) ++dropped_;
  }
  return r.status;
}

Status MemoryClient::DoPushEncoded(std::span<const compression::Encoded> parts,
                                   std::span<float> out, int64_t step) {
  ASGD_CHECK_EQ(parts.size(), 1u, "a memory store push is one part");
  const Op op = out.empty() ? Op::kPush : Op::kPushPull;
  auto r =
      store_->Request(op, worker_, step, pulled_version_, {}, out, TakeOldestVersion(), &parts[0]);
  if (r.status.ok()) {
    if (op == Op::kPushPull) pulled_version_ = r.version;
    if (r.outcome == PushOutcome::kDropped) ++dropped_;
  }
  return r.status;
}

Status MemoryClient::DoSendClock(int64_t clock) {
  return store_->Request(Op::kClock, worker_, clock, pulled_version_, {}, {}).status;
}

}  // namespace asgd::algorithms
