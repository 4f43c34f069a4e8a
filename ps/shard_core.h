// The shard's server-side bookkeeping, independent of any transport
// (docs/architecture.md#one-host-for-server-rules).
//
// A ShardCore owns one shard's rule, version, staleness accounting (counters and
// StalenessSink records, in the unit the rule restates; a record for every push the rule
// handled, dropped ones included, but counters of applied and accepted ones only), push
// outcome counts, the rejection of non-finite pushes, the deferred (held) requests,
// Start-once semantics, Snapshot/Restore of values plus rule state, and
// OnTick/OnMembership forwarding. It is the ShardContext the rule sees.
//
// Hosts are thin adapters: the ZeroMQ ShardServer (transport/shard_server.h), the
// in-process MemoryStore (algorithms/memory_store.h) and the simulated store
// (sim/sim_store.h) decode a request, call Push/Pull/PushPull/Clock here, and encode what
// comes back. The core never blocks and includes no ZeroMQ header.
//
// Two things stay with the host, through small interfaces it implements:
//   - ValueStorage: where the values live. The ZeroMQ server keeps copy-on-write blocks
//     that pull replies reference zero-copy; the default is a plain vector.
//   - ReplySink: how a deferred reply leaves. The host keeps the return address per
//     token; the core tells it when a held request is released or failed.
//
// Thread safety: none. The core is single-threaded by contract; the host serialises
// every call (the server's shard mutex, the store's mutex). stats() alone may be read
// from any thread while the host's thread writes (relaxed atomic counters), and the
// version through the host's own publication.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "ps/message.h"
#include "ps/server_rule.h"
#include "ps/staleness.h"
#include "ps/status.h"

namespace asgd::ps {

// Everything needed to restore a shard: for checkpoints.
struct ShardSnapshot {
  uint32_t shard = 0;
  uint64_t version = 0;
  std::vector<float> values;
  std::string rule_state;  // ServerRule::SaveState()
};

// Where a shard's values live. Same contract as ShardContext::values()/mutable_values().
class ValueStorage {
 public:
  virtual ~ValueStorage() = default;
  virtual std::span<const float> values() const = 0;
  virtual std::span<float> mutable_values() = 0;
  // A second buffer of values().size() floats that the core writes a whole new state
  // into (out of place, ShardCore::BeginStaged), made the values by CommitStaging().
  // Its content on return is unspecified; it stays the staging buffer until
  // CommitStaging. Empty (the default): no staging, every push goes through the rule in
  // place.
  virtual std::span<float> staging_values() { return {}; }
  // Makes the staging buffer the values; the old values may become the next staging
  // buffer.
  virtual void CommitStaging() {}
  // Whether something outside the core still reads values() (a reply sent from them
  // without a copy), so that mutable_values() would first copy them. Default: never.
  virtual bool values_shared() const { return false; }
};

// The default storage: one vector, and a second one (allocated on first use) to stage
// into.
class VectorStorage final : public ValueStorage {
 public:
  explicit VectorStorage(std::vector<float> values) : values_(std::move(values)) {}
  std::span<const float> values() const override { return values_; }
  std::span<float> mutable_values() override { return values_; }
  std::span<float> staging_values() override {
    staging_.resize(values_.size());
    return staging_;
  }
  void CommitStaging() override { values_.swap(staging_); }

 private:
  std::vector<float> values_;
  std::vector<float> staging_;
};

// A compressed push as received (compression/compressor.h): its encoding and frames, for
// RequestInfo::count dense elements starting at RequestInfo::offset. The frames need no
// alignment.
struct EncodedPayload {
  compression::Encoding encoding = compression::Encoding::kDense;
  std::span<const std::span<const std::byte>> frames;
};

// A request whose reply is held (by the rule, or by the host through Hold()).
struct HeldRequest {
  RequestInfo info;
  PushOutcome outcome = PushOutcome::kApplied;  // push and push-pull
};

// Implemented by the host: sends the reply of a held request. Called on the core's
// thread (possibly from inside a rule call), after the token was forgotten by the core.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // Reply now: push acknowledges `held.outcome` with the core's current version; pull and
  // push-pull carry `payload` when not null, else the current values of the range; others
  // acknowledge.
  virtual void Release(uint64_t token, const HeldRequest& held, ReplyBuffer* payload) = 0;
  // Reply with an error (code, message as given by the rule or the core).
  virtual void Fail(uint64_t token, const HeldRequest& held, ErrorCode code,
                    const std::string& message) = 0;
};

// Counters of a core; see ShardStats for the ZeroMQ host's meaning.
struct ShardCoreStats {
  uint64_t pushes_applied = 0, pushes_accepted = 0, pushes_dropped = 0;
  uint64_t pulls = 0, push_pulls = 0, clocks = 0;
  uint64_t rejected = 0;       // non-finite pushes and InputErrors of the rule
  uint64_t records = 0;        // staleness records of applied + accepted pushes (the sink
                               // also receives the dropped ones; pushes_dropped counts them)
  uint64_t staleness_sum = 0;  // over records, negative staleness counting as 0
  uint64_t staleness_max = 0;  // likewise
};

class ShardCore final : public ShardContext {
 public:
  struct Options {
    uint32_t shard = 0;
    // Not owned; REQUIRED (the host supplies a system clock by default).
    const ::asgd::Clock* clock = nullptr;
    // Not owned; may be null (records are then only counted). Receives one record per
    // push the rule handled, whatever its outcome (StalenessRecord::outcome).
    StalenessSink* staleness_sink = nullptr;
    // Reject pushes holding NaN or Inf (unless the rule ChecksNonFinite()).
    bool reject_non_finite = true;
  };

  // What a request produced. When ok and not deferred, the host replies now: push with an
  // ack of `outcome`; pull and push-pull with `reply` if not empty, else the values of the
  // range read from values() now; clock with an ack. When deferred, the host stores its
  // return address under `token` (the ReplySink hears of it later).
  struct Result {
    // kNonFinite (a non-finite payload, or a rule's NonFiniteResultError), kRejectedByRule
    ErrorCode error = ErrorCode::kNone;
    std::string message;  // with an error
    PushOutcome outcome = PushOutcome::kApplied;
    bool deferred = false;
    uint64_t token = 0;
    ReplyBuffer reply;
    // PushReplyFirst decided the push and left its add to FinishAdd().
    bool add_pending = false;
    bool ok() const { return error == ErrorCode::kNone; }
  };

  // REQUIRES: rule, storage, replies and options.clock not null; storage and replies
  // outlive the core.
  ShardCore(Options options, std::unique_ptr<ServerRule> rule, ValueStorage* storage,
            ReplySink* replies);

  // ServerRule::Start, the first time only (serving, or a restore before serving).
  void Start();
  bool started() const { return started_; }

  // The requests. `info` was validated by the host (range inside the shard, payload of
  // info.count elements). Exceptions other than the rule's InputError propagate (a bug).
  Result Push(const RequestInfo& info, Payload payload);
  Result PushPull(const RequestInfo& info, Payload payload);
  // A compressed push: decoded (every field validated first) into the core's scratch
  // vector of info.count elements, then handled as the dense push it stands for. An
  // encoding that does not decode is the error kBadEncoding (counted in rejected) and
  // changes nothing: the rule never sees it.
  Result Push(const RequestInfo& info, const EncodedPayload& encoded);
  Result PushPull(const RequestInfo& info, const EncodedPayload& encoded);
  Result Pull(const RequestInfo& info);
  Result Clock(const RequestInfo& info);
  void Tick() {
    CheckNoPendingAdd();
    rule_->OnTick(*this);
  }
  void Membership(int live_workers) {
    CheckNoPendingAdd();
    rule_->OnMembership(*this, live_workers);
  }

  // A dense push whose outcome is certain before its add, decided first so that the host
  // can send the reply and add while it travels:
  //
  //   Result r = core.PushReplyFirst(info, payload);
  //   reply as for Push;
  //   if (r.add_pending) core.FinishAdd();
  //
  // Certain means: a push of the whole shard under an element-wise rule
  // (ServerRule::ElementwiseAddScale) with non-finite pushes rejected, onto values known to
  // be finite (every value was checked by a push of the whole shard since the last write
  // the core did not check: a rule's mutable_values(), Restore, the initial values),
  // whose payload is finite and too small for any result to overflow
  // (AddCannotOverflow). One pass over the payload shows that; the push is then counted,
  // recorded and versioned as Push would, and add_pending is set. Any other push (and a
  // payload holding NaN or Inf, refused as Push refuses it) is handled exactly as Push.
  // FinishAdd applies the add, in place unless the storage says a reply still reads the
  // values (ValueStorage::values_shared: then out of place into the staging buffer, made
  // current), leaving the bits Push would have left.
  //
  // REQUIRES: info.op == kPush. Between the two calls the payload stays valid and the host
  // makes no other call on the core (InvariantError); values() reads the values before
  // the push, version() the version after it.
  Result PushReplyFirst(const RequestInfo& info, Payload payload);
  void FinishAdd();
  bool add_pending() const { return pending_.active; }

  // A dense push applied out of place, piece by piece, for a rule with an element-wise
  // scale (ServerRule::ElementwiseAddScale) and a storage that stages: how a host applies
  // a push it receives in chunks while the next chunk is still arriving.
  //
  //   if (core.BeginStaged(info)) {
  //     for each piece, in order: core.StagePiece(piece);
  //     result = core.FinishStaged();   // or core.AbortStaged() if the rest never came
  //   }
  //
  // BeginStaged is false (and nothing starts) when the rule gives no scale, the storage
  // does not stage, non-finite pushes are not rejected, or a staged push is already
  // open; the host then gathers the pieces and calls Push. `info` is validated by the
  // host for the whole push (offset, count). Pieces must be contiguous from info.offset
  // and add up to info.count (InvariantError otherwise: the host checks what a peer
  // sends). Each is added into the staging buffer in one pass that also checks every
  // result is finite. FinishStaged copies the elements outside the push, makes the
  // buffer current and then counts, records and answers exactly as Push would; a piece
  // with a NaN or Inf payload or result makes it refuse the whole push instead
  // (kNonFinite, counted in rejected, the shard unchanged), as does a Restore in between.
  // AbortStaged drops the push: nothing changes, nothing is counted.
  //
  // Between BeginStaged and FinishStaged/AbortStaged the host makes no other call that
  // changes the values or the version (pushes, clocks, Tick, Membership); pulls and
  // Snapshot read the values as they were before the push.
  bool BeginStaged(const RequestInfo& info);
  void StagePiece(const Payload::Piece& piece);
  Result FinishStaged();
  void AbortStaged();
  bool staging() const { return staged_.active; }

  // Holds a request outside the rule (e.g. a barrier); released through Release/Fail.
  uint64_t Hold(const RequestInfo& info);
  // Fails every held request, in token order.
  void FailAll(ErrorCode code, const std::string& message);

  // Values, version and rule state. Restore starts the rule first (Start once), then
  // loads its state: InputError if the rule cannot read it (nothing changed then);
  // InvariantError for a snapshot of another size. The shard id is the host's to check.
  ShardSnapshot Snapshot() const;
  void Restore(const ShardSnapshot& snapshot);

  const ServerRule& rule() const { return *rule_; }
  ShardCoreStats stats() const;

  // ShardContext.
  uint32_t shard() const override { return options_.shard; }
  int64_t size() const override { return size_; }
  uint64_t version() const override { return version_; }
  void AdvanceVersion(uint64_t by = 1) override { version_ += by; }
  std::span<const float> values() const override { return storage_->values(); }
  // A rule's write: the values are no longer known to be finite (PushReplyFirst).
  std::span<float> mutable_values() override {
    values_known_finite_ = false;
    return storage_->mutable_values();
  }
  Duration Now() const override { return options_.clock->Now(); }
  void Release(uint64_t token) override { ReleaseHeld(token, nullptr); }
  void Release(uint64_t token, ReplyBuffer payload) override { ReleaseHeld(token, &payload); }
  void Fail(uint64_t token, std::string message) override;
  std::size_t held() const override { return held_.size(); }

 private:
  struct Counters {
    std::atomic<uint64_t> pushes_applied{0}, pushes_accepted{0}, pushes_dropped{0}, pulls{0},
        push_pulls{0}, clocks{0}, rejected{0}, records{0}, staleness_sum{0}, staleness_max{0};
  };
  // One writer (the core's thread): a relaxed load and store, no read-modify-write.
  static void Bump(std::atomic<uint64_t>& c, uint64_t by = 1) {
    c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }

  // An open staged push (BeginStaged .. FinishStaged).
  struct Staged {
    bool active = false;
    RequestInfo info;
    uint64_t arrival = 0;
    int64_t staleness = 0;
    float scale = 1.0f;
    int64_t next = 0;  // the shard-local element the next piece starts at
    std::span<float> out;
    ErrorCode error = ErrorCode::kNone;  // set by the first refused piece (or a Restore)
    std::string message;
  };

  // A push decided by PushReplyFirst whose add FinishAdd has not applied yet.
  struct PendingAdd {
    bool active = false;
    float scale = 1.0f;
    Payload payload;
  };

  // InvariantError while a push decided by PushReplyFirst waits for FinishAdd.
  void CheckNoPendingAdd() const;
  Result PushOrPushPull(const RequestInfo& info, Payload payload);
  Result DecodeThenPush(const RequestInfo& info, const EncodedPayload& encoded);
  Result ReadOrClock(const RequestInfo& info);
  void ReleaseHeld(uint64_t token, ReplyBuffer* payload);
  void Record(const RequestInfo& info, PushOutcome outcome, uint64_t applied_version,
              int64_t staleness);

  Options options_;
  std::unique_ptr<ServerRule> rule_;
  ValueStorage* storage_;
  ReplySink* replies_;
  const int64_t size_;
  const bool check_non_finite_;
  uint64_t version_ = 0;
  uint64_t next_token_ = 1;
  bool started_ = false;
  std::unordered_map<uint64_t, HeldRequest> held_;
  Counters counters_;
  std::vector<float> decoded_;  // a compressed push's dense form, reused
  Staged staged_;
  // Every value is finite, checked by a push of the whole shard (PushReplyFirst).
  bool values_known_finite_ = false;
  PendingAdd pending_;
};

}  // namespace asgd::ps
