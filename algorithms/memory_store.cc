#include "algorithms/memory_store.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {

using transport::ErrorCode;
using transport::Op;
using transport::PushOutcome;
using transport::StatusCode;

// A request whose reply the rule deferred; the requesting thread waits for `done`.
struct MemoryStore::Held {
  Op op = Op::kPush;
  int64_t offset = 0;
  std::span<float> out;  // pull / push-pull destination (the waiting thread's buffer)
  bool done = false;
  Status status;
  uint64_t version = 0;
};

// The shard as the rule sees it. All calls happen under MemoryStore::mu_.
class MemoryStore::Context final : public transport::ShardContext {
 public:
  Context(std::vector<float> values, const Clock* clock)
      : values_(std::move(values)), clock_(clock) {}

  uint32_t shard() const override { return 0; }
  int64_t size() const override { return static_cast<int64_t>(values_.size()); }
  uint64_t version() const override { return version_; }
  void AdvanceVersion(uint64_t by) override { version_ += by; }
  void SetVersion(uint64_t version) { version_ = version; }
  std::span<const float> values() const override { return values_; }
  std::span<float> mutable_values() override { return values_; }
  Duration Now() const override { return clock_->Now(); }

  void Release(uint64_t token) override { Finish(token, nullptr, Status::Ok()); }
  void Release(uint64_t token, transport::ReplyBuffer payload) override {
    Finish(token, &payload, Status::Ok());
  }
  void Fail(uint64_t token, std::string message) override {
    Finish(token, nullptr,
           Status(StatusCode::kRemoteError, "memory store: " + message,
                  ErrorCode::kRejectedByRule));
  }
  std::size_t held() const override { return held_.size(); }

  // Registers a deferred request; returns its record.
  Held* Hold(uint64_t token, Held h) { return &(held_[token] = h); }
  void Forget(uint64_t token) { held_.erase(token); }
  void FailAll(const Status& status) {
    std::vector<uint64_t> tokens;
    for (auto& [t, h] : held_) tokens.push_back(t);
    for (uint64_t t : tokens) Finish(t, nullptr, status);
  }
  // Copies the values [offset, offset + out.size()) or payload into out.
  void Fill(std::span<float> out, int64_t offset, const transport::ReplyBuffer* payload) const {
    if (out.empty()) return;
    const float* src = payload != nullptr && !payload->empty()
                           ? payload->values().data()
                           : values_.data() + offset;
    std::memcpy(out.data(), src, out.size_bytes());
  }

  bool any_finished = false;  // set when a held request completes (for notify)

 private:
  void Finish(uint64_t token, const transport::ReplyBuffer* payload, Status status) {
    auto it = held_.find(token);
    if (it == held_.end() || it->second.done) return;
    Held& h = it->second;
    if (status.ok() && (h.op == Op::kPull || h.op == Op::kPushPull)) Fill(h.out, h.offset, payload);
    h.status = std::move(status);
    h.version = version_;
    h.done = true;
    any_finished = true;
  }

  std::vector<float> values_;
  uint64_t version_ = 0;
  const Clock* clock_;
  std::map<uint64_t, Held> held_;
};

transport::ShardSnapshot MemoryStore::Snapshot(const std::function<void()>& while_held) const {
  std::lock_guard<std::mutex> lock(mu_);
  transport::ShardSnapshot s;
  s.version = ctx_->version();
  const auto v = ctx_->values();
  s.values.assign(v.begin(), v.end());
  s.rule_state = rule_->SaveState();
  if (while_held) while_held();
  return s;
}

void MemoryStore::Restore(const transport::ShardSnapshot& snapshot) {
  std::lock_guard<std::mutex> lock(mu_);
  ASGD_CHECK_EQ(snapshot.values.size(), size_, "snapshot size");
  rule_->LoadState(snapshot.rule_state);  // may throw InputError; nothing changed yet
  std::copy(snapshot.values.begin(), snapshot.values.end(), ctx_->mutable_values().begin());
  ctx_->SetVersion(snapshot.version);
}

MemoryStore::MemoryStore(std::vector<float> initial, std::unique_ptr<transport::ServerRule> rule,
                         const Clock* clock, transport::StalenessSink* sink)
    : size_(initial.size()), rule_(std::move(rule)), clock_(clock), sink_(sink) {
  ASGD_CHECK(rule_ != nullptr, "MemoryStore needs a server rule");
  if (clock_ == nullptr) {
    own_clock_ = NewSystemClock();
    clock_ = own_clock_.get();
  }
  ctx_ = std::make_unique<Context>(std::move(initial), clock_);
  std::lock_guard<std::mutex> lock(mu_);
  rule_->Start(*ctx_);
}

MemoryStore::~MemoryStore() { Shutdown(); }

std::vector<float> MemoryStore::values() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto v = ctx_->values();
  return {v.begin(), v.end()};
}

uint64_t MemoryStore::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ctx_->version();
}

MemoryStore::Stats MemoryStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void MemoryStore::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    ctx_->FailAll(Status(StatusCode::kRemoteError, "memory store: shutting down",
                         ErrorCode::kShuttingDown));
  }
  released_.notify_all();
}

MemoryStore::Result MemoryStore::Request(Op op, uint32_t worker, int64_t step, uint64_t version,
                                         std::span<const float> update, std::span<float> out) {
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
    ASGD_CHECK_EQ(update.size(), size_, "push size");
  }
  if (reads) {
    ASGD_CHECK_EQ(out.size(), size_, "pull size");
  }
  if (pushes && !rule_->ChecksNonFinite()) {
    const int64_t bad = transport::FindNonFinite(update);
    if (bad >= 0) {
      ++stats_.rejected;
      result.status = Status(StatusCode::kRemoteError,
                             internal::StrCat("memory store: push from worker ", worker,
                                              " holds ", update[static_cast<std::size_t>(bad)],
                                              " at element ", bad),
                             ErrorCode::kNonFinite);
      return result;
    }
  }
  transport::RequestInfo info;
  info.op = op;
  info.worker = worker;
  info.version = version;
  info.clock = step;
  info.offset = 0;
  info.count = pushes || reads ? static_cast<int64_t>(size_) : 0;
  const uint64_t arrival = ctx_->version();
  const int64_t staleness = static_cast<int64_t>(arrival - version);
  transport::Payload payload;
  if (pushes) payload = transport::Payload(0, {{0, update}});
  const uint64_t token = next_token_++;
  transport::ServerCall call(token, info, std::move(payload), pushes ? staleness : 0);
  try {
    switch (op) {
      case Op::kPush: result.outcome = rule_->OnPush(*ctx_, call); break;
      case Op::kPushPull: result.outcome = rule_->OnPushPull(*ctx_, call); break;
      case Op::kPull: rule_->OnPull(*ctx_, call); break;
      case Op::kClock: rule_->OnClock(*ctx_, call); break;
      default: ASGD_CHECK(false, "MemoryStore: op ", transport::OpName(op), " not served");
    }
  } catch (const InputError& e) {
    ++stats_.rejected;
    result.status = Status(StatusCode::kRemoteError, std::string("memory store: ") + e.what(),
                           ErrorCode::kRejectedByRule);
    return result;
  }
  if (pushes) {
    switch (result.outcome) {
      case PushOutcome::kApplied: ++stats_.applied; break;
      case PushOutcome::kAccepted: ++stats_.accepted; break;
      case PushOutcome::kDropped: ++stats_.dropped; break;
    }
    if (result.outcome != PushOutcome::kDropped) {
      const int64_t recorded = call.staleness();  // the rule may restate it (SSP: clocks)
      ++stats_.records;
      stats_.staleness_sum += std::max<int64_t>(0, recorded);
      stats_.staleness_max = std::max(stats_.staleness_max, recorded);
      if (sink_ != nullptr) {
        transport::StalenessRecord r;
        r.worker = worker;
        r.step = step;
        r.pulled_version = version;
        r.applied_version = arrival;
        r.staleness = recorded;
        r.wall_time_s = std::chrono::duration<double>(clock_->Now()).count();
        r.outcome = result.outcome;
        sink_->Record(r);
      }
    }
  }
  // Replies the rule released while handling this request (e.g. the last push of a
  // round releases the others) wake their threads.
  const bool wake = ctx_->any_finished;
  ctx_->any_finished = false;
  if (!call.deferred()) {
    transport::ReplyBuffer reply = call.TakeReplyPayload();
    if (reads) ctx_->Fill(out, 0, &reply);
    result.version = ctx_->version();
    if (wake) {
      lock.unlock();
      released_.notify_all();
    }
    return result;
  }
  Held* held = ctx_->Hold(token, Held{op, 0, reads ? out : std::span<float>(), false, {}, 0});
  if (wake) released_.notify_all();
  released_.wait(lock, [&] { return held->done; });
  result.status = held->status;
  result.version = held->version;
  ctx_->Forget(token);
  return result;
}

Status MemoryClient::DoPull(std::span<float> out) {
  auto r = store_->Request(Op::kPull, worker_, 0, pulled_version_, {}, out);
  if (r.status.ok()) pulled_version_ = r.version;
  return r.status;
}

Status MemoryClient::DoPush(std::span<const float> update, int64_t step) {
  auto r = store_->Request(Op::kPush, worker_, step, pulled_version_, update, {});
  if (r.status.ok() && r.outcome == PushOutcome::kDropped) ++dropped_;
  return r.status;
}

Status MemoryClient::DoPushPull(std::span<const float> update, std::span<float> out, int64_t step) {
  auto r = store_->Request(Op::kPushPull, worker_, step, pulled_version_, update, out);
  if (r.status.ok()) {
    pulled_version_ = r.version;
    if (r.outcome == PushOutcome::kDropped) ++dropped_;
  }
  return r.status;
}

Status MemoryClient::DoSendClock(int64_t clock) {
  return store_->Request(Op::kClock, worker_, clock, pulled_version_, {}, {}).status;
}

}  // namespace asgd::algorithms
