#include "transport/shard_core.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/error.h"

namespace asgd::transport {

ShardCore::ShardCore(Options options, std::unique_ptr<ServerRule> rule, ValueStorage* storage,
                     ReplySink* replies)
    : options_(options),
      rule_(std::move(rule)),
      storage_(storage),
      replies_(replies),
      size_(storage != nullptr ? static_cast<int64_t>(storage->values().size()) : 0),
      // Asked once: a rule's answer is a property of the rule, and the push path then
      // pays no virtual call for it.
      check_non_finite_(rule_ != nullptr && options.reject_non_finite &&
                        !rule_->ChecksNonFinite()) {
  ASGD_CHECK(rule_ != nullptr, "ShardCore needs a ServerRule");
  ASGD_CHECK(storage_ != nullptr, "ShardCore needs a ValueStorage");
  ASGD_CHECK(replies_ != nullptr, "ShardCore needs a ReplySink");
  ASGD_CHECK(options_.clock != nullptr, "ShardCore needs a Clock");
}

void ShardCore::Start() {
  if (started_) return;
  rule_->Start(*this);
  started_ = true;
}

ShardCore::Result ShardCore::Push(const RequestInfo& info, Payload payload) {
  return PushOrPushPull(info, std::move(payload));
}

ShardCore::Result ShardCore::PushPull(const RequestInfo& info, Payload payload) {
  return PushOrPushPull(info, std::move(payload));
}

ShardCore::Result ShardCore::Push(const RequestInfo& info, const EncodedPayload& encoded) {
  return DecodeThenPush(info, encoded);
}

ShardCore::Result ShardCore::PushPull(const RequestInfo& info, const EncodedPayload& encoded) {
  return DecodeThenPush(info, encoded);
}

ShardCore::Result ShardCore::DecodeThenPush(const RequestInfo& info,
                                            const EncodedPayload& encoded) {
  // A rule may keep a push's payload spans only for the call (server_rule.h), so one
  // scratch vector serves every compressed push.
  decoded_.resize(static_cast<std::size_t>(info.count));
  std::string problem = compression::Decode(encoded.encoding, encoded.frames, decoded_);
  if (!problem.empty()) {
    Bump(counters_.rejected);
    Result result;
    result.error = ErrorCode::kBadEncoding;
    result.message = ::asgd::internal::StrCat(OpName(info.op), " refused: ", problem,
                                              "; the shard is unchanged");
    return result;
  }
  return PushOrPushPull(info, Payload(info.offset, {{info.offset, decoded_}}));
}

ShardCore::Result ShardCore::Pull(const RequestInfo& info) { return ReadOrClock(info); }

ShardCore::Result ShardCore::Clock(const RequestInfo& info) { return ReadOrClock(info); }

ShardCore::Result ShardCore::PushOrPushPull(const RequestInfo& info, Payload payload) {
  Result result;
  if (check_non_finite_) {
    for (const Payload::Piece& piece : payload.pieces()) {
      const int64_t bad = FindNonFinite(piece.values);
      if (bad >= 0) {
        const float v = piece.values[static_cast<std::size_t>(bad)];
        Bump(counters_.rejected);
        result.error = ErrorCode::kNonFinite;
        result.message = ::asgd::internal::StrCat(
            OpName(info.op), " payload holds ", v != v ? "NaN" : "Inf", " at shard-local element ",
            piece.offset + bad, "; the shard is unchanged");
        return result;
      }
    }
  }
  const uint64_t arrival = version_;
  const auto staleness = static_cast<int64_t>(arrival - info.version);
  ServerCall call(next_token_++, info, std::move(payload), staleness);
  try {
    result.outcome =
        info.op == Op::kPushPull ? rule_->OnPushPull(*this, call) : rule_->OnPush(*this, call);
  } catch (const NonFiniteResultError& e) {
    // A result that would not be finite (the rule's add helpers, finite_apply.h): the
    // same refusal as a non-finite payload, and the rule left the shard unchanged.
    Bump(counters_.rejected);
    result.error = ErrorCode::kNonFinite;
    result.message = e.what();
    return result;
  } catch (const InputError& e) {
    Bump(counters_.rejected);
    result.error = ErrorCode::kRejectedByRule;
    result.message = e.what();
    return result;
  }
  switch (result.outcome) {
    case PushOutcome::kApplied:
      Bump(counters_.pushes_applied);
      break;
    case PushOutcome::kAccepted:
      Bump(counters_.pushes_accepted);
      break;
    case PushOutcome::kDropped:
      Bump(counters_.pushes_dropped);
      break;
  }
  if (info.op == Op::kPushPull) Bump(counters_.push_pulls);
  // The rule may have restated the staleness in its own unit (set_staleness). A dropped
  // push gets its record too: its staleness is what a backup-worker study looks at.
  Record(info, result.outcome, arrival, call.staleness());
  result.token = call.token();
  if (call.deferred()) {
    result.deferred = true;
    held_.emplace(call.token(), HeldRequest{info, result.outcome});
  } else if (info.op == Op::kPushPull) {
    result.reply = call.TakeReplyPayload();
  }
  return result;
}

ShardCore::Result ShardCore::ReadOrClock(const RequestInfo& info) {
  Result result;
  ServerCall call(next_token_++, info, Payload(), 0);
  if (info.op == Op::kPull) {
    rule_->OnPull(*this, call);
    Bump(counters_.pulls);
  } else {
    rule_->OnClock(*this, call);
    Bump(counters_.clocks);
  }
  result.token = call.token();
  if (call.deferred()) {
    result.deferred = true;
    held_.emplace(call.token(), HeldRequest{info, PushOutcome::kApplied});
  } else if (info.op == Op::kPull) {
    result.reply = call.TakeReplyPayload();
  }
  return result;
}

uint64_t ShardCore::Hold(const RequestInfo& info) {
  const uint64_t token = next_token_++;
  held_.emplace(token, HeldRequest{info, PushOutcome::kApplied});
  return token;
}

void ShardCore::ReleaseHeld(uint64_t token, ReplyBuffer* payload) {
  auto it = held_.find(token);
  if (it == held_.end()) return;
  const HeldRequest held = it->second;
  held_.erase(it);
  replies_->Release(token, held, payload);
}

void ShardCore::Fail(uint64_t token, std::string message) {
  auto it = held_.find(token);
  if (it == held_.end()) return;
  const HeldRequest held = it->second;
  held_.erase(it);
  replies_->Fail(token, held, ErrorCode::kRejectedByRule, message);
}

void ShardCore::FailAll(ErrorCode code, const std::string& message) {
  std::vector<uint64_t> tokens;
  tokens.reserve(held_.size());
  for (const auto& [token, held] : held_) tokens.push_back(token);
  std::sort(tokens.begin(), tokens.end());
  for (uint64_t token : tokens) {
    auto it = held_.find(token);
    if (it == held_.end()) continue;  // the sink's Fail released it meanwhile
    const HeldRequest held = it->second;
    held_.erase(it);
    replies_->Fail(token, held, code, message);
  }
}

void ShardCore::Record(const RequestInfo& info, PushOutcome outcome, uint64_t applied_version,
                       int64_t staleness) {
  // The counters describe the pushes the shard took in (applied or accepted), as the
  // summary statistics do; a dropped push is counted in pushes_dropped only.
  if (outcome != PushOutcome::kDropped) {
    Bump(counters_.records);
    if (staleness > 0) {
      const auto s = static_cast<uint64_t>(staleness);
      Bump(counters_.staleness_sum, s);
      if (s > counters_.staleness_max.load(std::memory_order_relaxed)) {
        counters_.staleness_max.store(s, std::memory_order_relaxed);
      }
    }
  }
  if (options_.staleness_sink != nullptr) {
    StalenessRecord r;
    r.worker = info.worker;
    r.shard = options_.shard;
    r.step = info.clock;
    r.pulled_version = info.version;
    r.applied_version = applied_version;
    r.staleness = staleness;
    // The codec guarantees oldest <= version; a direct caller of the core may not.
    const uint64_t oldest = info.OldestVersion();
    r.oldest_lag = oldest < info.version ? info.version - oldest : 0;
    r.wall_time_s = options_.clock->NowSeconds();
    r.outcome = outcome;
    options_.staleness_sink->Record(r);
  }
}

ShardSnapshot ShardCore::Snapshot() const {
  ShardSnapshot s;
  s.shard = options_.shard;
  s.version = version_;
  const std::span<const float> v = values();
  s.values.assign(v.begin(), v.end());
  s.rule_state = rule_->SaveState();
  return s;
}

void ShardCore::Restore(const ShardSnapshot& snapshot) {
  ASGD_CHECK_EQ(static_cast<int64_t>(snapshot.values.size()), size_, "snapshot size");
  // A rule sets up its state in Start (which serving would otherwise call later, after
  // the restore, wiping the loaded state).
  Start();
  rule_->LoadState(snapshot.rule_state);  // may throw InputError; nothing changed yet
  std::span<float> v = mutable_values();
  if (size_ > 0) std::memcpy(v.data(), snapshot.values.data(), v.size_bytes());
  version_ = snapshot.version;
}

ShardCoreStats ShardCore::stats() const {
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  ShardCoreStats s;
  s.pushes_applied = get(counters_.pushes_applied);
  s.pushes_accepted = get(counters_.pushes_accepted);
  s.pushes_dropped = get(counters_.pushes_dropped);
  s.pulls = get(counters_.pulls);
  s.push_pulls = get(counters_.push_pulls);
  s.clocks = get(counters_.clocks);
  s.rejected = get(counters_.rejected);
  s.records = get(counters_.records);
  s.staleness_sum = get(counters_.staleness_sum);
  s.staleness_max = get(counters_.staleness_max);
  return s;
}

}  // namespace asgd::transport
