#include "ps/shard_core.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/error.h"

namespace asgd::ps {

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

ShardCore::Result ShardCore::PushReplyFirst(const RequestInfo& info, Payload payload) {
  ASGD_CHECK(info.op == Op::kPush, "PushReplyFirst of a ", OpName(info.op));
  CheckNoPendingAdd();
  // The conditions of BeginStaged, and finite values: a finite value plus an addend below
  // the overflow bound is finite (AddCannotOverflow), so the scan of the payload alone
  // decides the outcome, and nothing the add computes can change it.
  if (!values_known_finite_ || !check_non_finite_ || staged_.active || size_ == 0 ||
      payload.count() != size_) {
    return PushOrPushPull(info, std::move(payload));
  }
  const uint64_t arrival = version_;
  const auto staleness = static_cast<int64_t>(arrival - info.version);
  const std::optional<float> scale = rule_->ElementwiseAddScale(info, staleness);
  if (!scale.has_value()) return PushOrPushPull(info, std::move(payload));
  float max_magnitude = 0.0f;
  for (const Payload::Piece& piece : payload.pieces()) {
    float piece_max = 0.0f;
    if (FindNonFinite(piece.values, &piece_max) >= 0) {
      // Refused with the words of the other paths (they name the first bad element).
      return PushOrPushPull(info, std::move(payload));
    }
    max_magnitude = std::max(max_magnitude, piece_max);
  }
  // Near overflow (pushes of FLT_MAX): the checked add decides, before any reply.
  if (!AddCannotOverflow(*scale, max_magnitude)) return PushOrPushPull(info, std::move(payload));
  pending_.active = true;
  pending_.scale = *scale;
  pending_.payload = std::move(payload);
  AdvanceVersion();
  Result result;
  result.outcome = PushOutcome::kApplied;
  result.token = next_token_++;
  result.add_pending = true;
  Bump(counters_.pushes_applied);
  Record(info, PushOutcome::kApplied, arrival, staleness);
  return result;
}

namespace {

// dst[i] += scale * src[i] (for scale == 1: dst[i] + src[i], the bits AddScaledInto gives),
// for an add known not to overflow: no check.
void AddInPlace(std::span<float> dst, float scale, std::span<const float> src) {
  float* __restrict d = dst.data();
  const float* __restrict s = src.data();
  const std::size_t n = dst.size();
  if (scale == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) d[i] += s[i];
  } else {
    for (std::size_t i = 0; i < n; ++i) d[i] += scale * s[i];
  }
}

}  // namespace

void ShardCore::FinishAdd() {
  ASGD_CHECK(pending_.active, "FinishAdd without a push decided by PushReplyFirst");
  const PendingAdd p = std::move(pending_);
  pending_ = PendingAdd{};
  // In place unless a reply still reads the values (which mutable_values() would first
  // copy): then out of place into the staging buffer, in the same one pass.
  const std::span<float> staging =
      storage_->values_shared() ? storage_->staging_values() : std::span<float>();
  const bool staged = static_cast<int64_t>(staging.size()) == size_;
  const std::span<float> out = staged ? staging : storage_->mutable_values();
  for (const Payload::Piece& piece : p.payload.pieces()) {
    const auto at = static_cast<std::size_t>(piece.offset);
    const std::span<float> into = out.subspan(at, piece.values.size());
    if (staged) {
      const bool finite =
          AddScaledInto(into, values().subspan(at, piece.values.size()), p.scale, piece.values);
      ASGD_CHECK(finite, "a push decided as applied gave a non-finite result");
    } else {
      AddInPlace(into, p.scale, piece.values);
    }
  }
  if (staged) storage_->CommitStaging();
}

void ShardCore::CheckNoPendingAdd() const {
  ASGD_CHECK(!pending_.active, "a call on the shard core before FinishAdd of the push decided");
}

ShardCore::Result ShardCore::DecodeThenPush(const RequestInfo& info,
                                            const EncodedPayload& encoded) {
  CheckNoPendingAdd();
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
  CheckNoPendingAdd();
  // A push of the whole shard under an element-wise rule: one out-of-place pass that
  // checks the results, instead of a scan of the payload and an add in place.
  if (payload.count() == size_ && size_ > 0 && BeginStaged(info)) {
    for (const Payload::Piece& piece : payload.pieces()) StagePiece(piece);
    return FinishStaged();
  }
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

bool ShardCore::BeginStaged(const RequestInfo& info) {
  CheckNoPendingAdd();
  if (staged_.active || !check_non_finite_) return false;
  const uint64_t arrival = version_;
  const auto staleness = static_cast<int64_t>(arrival - info.version);
  const std::optional<float> scale = rule_->ElementwiseAddScale(info, staleness);
  if (!scale.has_value()) return false;
  const std::span<float> out = storage_->staging_values();
  if (static_cast<int64_t>(out.size()) != size_) return false;
  staged_ = Staged{};
  staged_.active = true;
  staged_.info = info;
  staged_.arrival = arrival;
  staged_.staleness = staleness;
  staged_.scale = *scale;
  staged_.next = info.offset;
  staged_.out = out;
  return true;
}

void ShardCore::StagePiece(const Payload::Piece& piece) {
  ASGD_CHECK(staged_.active, "StagePiece without BeginStaged");
  const auto n = static_cast<int64_t>(piece.values.size());
  ASGD_CHECK_EQ(piece.offset, staged_.next, "staged pieces must be contiguous and in order");
  ASGD_CHECK_LE(piece.offset + n, staged_.info.offset + staged_.info.count,
                "a staged piece past the push's range");
  staged_.next += n;
  if (staged_.error != ErrorCode::kNone || n == 0) return;
  const auto at = static_cast<std::size_t>(piece.offset);
  const std::span<float> out = staged_.out.subspan(at, piece.values.size());
  const std::span<const float> base = values().subspan(at, piece.values.size());
  if (AddScaledInto(out, base, staged_.scale, piece.values)) return;
  // The rare path: name the first bad element, as the in-place path would.
  staged_.error = ErrorCode::kNonFinite;
  const int64_t bad = FindNonFinite(piece.values);
  if (bad >= 0) {
    const float v = piece.values[static_cast<std::size_t>(bad)];
    staged_.message = ::asgd::internal::StrCat(
        OpName(staged_.info.op), " payload holds ", v != v ? "NaN" : "Inf",
        " at shard-local element ", piece.offset + bad, "; the shard is unchanged");
    return;
  }
  const int64_t first = FindNonFinite(out);
  const auto i = static_cast<std::size_t>(std::max<int64_t>(first, 0));
  staged_.message = ::asgd::internal::StrCat(
      "the result at shard-local element ", piece.offset + first, " would be ",
      out[i] != out[i] ? "NaN" : "Inf", " (", base[i], " + ", staged_.scale * piece.values[i],
      "); nothing was changed");
}

ShardCore::Result ShardCore::FinishStaged() {
  ASGD_CHECK(staged_.active, "FinishStaged without BeginStaged");
  Staged st = std::move(staged_);
  staged_ = Staged{};
  ASGD_CHECK_EQ(version_, st.arrival, "the version changed during a staged push");
  Result result;
  if (st.error != ErrorCode::kNone) {
    Bump(counters_.rejected);
    result.error = st.error;
    result.message = std::move(st.message);
    return result;
  }
  const int64_t end = st.info.offset + st.info.count;
  ASGD_CHECK_EQ(st.next, end, "a staged push finished before its last piece");
  // The elements outside the push keep their values.
  const std::span<const float> now = values();
  if (st.info.offset > 0) {
    std::memcpy(st.out.data(), now.data(), static_cast<std::size_t>(st.info.offset) * sizeof(float));
  }
  if (end < size_) {
    std::memcpy(st.out.data() + end, now.data() + end,
                static_cast<std::size_t>(size_ - end) * sizeof(float));
  }
  storage_->CommitStaging();
  // Every result of a push of the whole shard was checked finite.
  if (st.info.offset == 0 && end == size_) values_known_finite_ = true;
  AdvanceVersion();
  result.outcome = PushOutcome::kApplied;
  result.token = next_token_++;
  Bump(counters_.pushes_applied);
  if (st.info.op == Op::kPushPull) Bump(counters_.push_pulls);
  Record(st.info, PushOutcome::kApplied, st.arrival, st.staleness);
  return result;
}

void ShardCore::AbortStaged() { staged_ = Staged{}; }

ShardCore::Result ShardCore::ReadOrClock(const RequestInfo& info) {
  CheckNoPendingAdd();
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
  CheckNoPendingAdd();
  ShardSnapshot s;
  s.shard = options_.shard;
  s.version = version_;
  const std::span<const float> v = values();
  s.values.assign(v.begin(), v.end());
  s.rule_state = rule_->SaveState();
  return s;
}

void ShardCore::Restore(const ShardSnapshot& snapshot) {
  CheckNoPendingAdd();
  ASGD_CHECK_EQ(static_cast<int64_t>(snapshot.values.size()), size_, "snapshot size");
  // A rule sets up its state in Start (which serving would otherwise call later, after
  // the restore, wiping the loaded state).
  Start();
  rule_->LoadState(snapshot.rule_state);  // may throw InputError; nothing changed yet
  if (staged_.active && staged_.error == ErrorCode::kNone) {
    // What was staged is built on the values being replaced.
    staged_.error = ErrorCode::kRejectedByRule;
    staged_.message = "the shard was restored from a snapshot while this push arrived; it was not applied";
  }
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

}  // namespace asgd::ps
