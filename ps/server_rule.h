// The server-rule interface: how a shard treats what it receives
// (docs/architecture.md#strategies-a-worker-rule-and-a-server-rule).
//
// transport/ owns the sockets, the codec, versions and bookkeeping; a ServerRule owns the
// arithmetic and the timing of replies. Rules are implemented in algorithms/ (which must
// not depend on ZeroMQ: this header includes no ZeroMQ or MessagePack header) and plugged
// into a ShardServer by experiments/. One rule object serves one shard, so a rule keeps
// per-shard state (optimizer slots, per-worker backups, aggregation buffers) in plain
// members.
//
// Calling contract (what the server guarantees a rule):
//   - Every method runs on the shard's one serving thread, one call at a time; a rule
//     needs no locking. Snapshot/Restore from other threads are serialised with it.
//   - The request was fully validated before the call: shard id, op, [offset,
//     offset + count) inside the shard, payload of exactly `count` finite float32 values
//     (finite unless the rule's ChecksNonFinite() is true).
//   - Payload spans and the spans from ShardContext::values()/mutable_values() are valid
//     only during the call. On inproc:// a payload piece points straight into the
//     client's buffer; copy what must outlive the call.
//   - After the call the server replies for the rule, unless the rule deferred the reply:
//       push       ack carrying the outcome and the shard version after the call
//       pull       the values [offset, offset + count) and the version, read after OnPull
//       push-pull  as pull, read after OnPushPull, or the rule's ReplyBuffer
//       clock      ack with the version
//
// What a rule must guarantee the server:
//   - To refuse a request, throw InputError (the client gets an error reply with the
//     message) *before* changing anything. Any other exception is a bug: the request
//     gets an error reply and the server stops, rethrowing it from Run()/Join().
//   - Call ctx.AdvanceVersion() once per update it counts (the default add rule does
//     per push; an aggregating rule once per applied round). The version is the shard's
//     update counter (docs/architecture.md#staleness).
//   - Release (or Fail) every deferred token eventually; tokens still held when the
//     server stops get an error reply kShuttingDown.
//
// Examples the interface is shaped for (docs/algorithms.md has each strategy's rule):
//   add / DOWNPOUR / Hogwild   OnPush adds the payload; AdvanceVersion().
//   server optimizer           OnPush runs Adagrad/Adam/SGD with slots as members.
//   DynSGD                     OnPush scales by 1 / (call.staleness() + 1).
//   ADAG distance / DC-ASGD    OnPull saves a copy of ctx.values() per info().worker;
//                              OnPush uses w_now - w_backup(worker) element-wise.
//   sync SGD, N-of-M backups   OnPush drops (returns kDropped for) info().version older
//                              than the round, accumulates fresh pushes and Defer()s their
//                              replies; the N-th applies the mean, AdvanceVersion(),
//                              Release()s the held tokens. OnTick closes late rounds.
//   SSP                        OnClock tracks worker clocks and Defer()s the clock reply
//                              of a worker more than S ahead of the slowest; releases it
//                              when the slowest catches up.
//   elastic averaging          OnPushPull: E = a(x - x~) into a ReplyBuffer, x~ += E,
//                              call.ReplyWith(E).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "ps/message.h"

namespace asgd::ps {

// The request a rule is asked to handle, as decoded and validated by the server.
struct RequestInfo {
  Op op = Op::kPush;
  Role role = Role::kWorker;
  uint32_t worker = 0;      // sender id
  uint64_t request_id = 0;  // per client
  uint64_t version = 0;     // push/push-pull: the shard version the sender computed from
                            // (its last pull: the newest parameters of the push)
  // Push/push-pull: the version of the oldest parameters the push's gradients were
  // computed on, when the sender pulled again inside its push window (DOWNPOUR with
  // n_fetch < n_push); unset means version. At most version (the codec checks it).
  std::optional<uint64_t> oldest_version;
  int64_t clock = 0;        // sender's clock (step)
  int64_t offset = 0;       // first shard-local element addressed
  int64_t count = 0;        // elements addressed
  uint64_t aux = 0;         // op-specific value from the header

  uint64_t OldestVersion() const { return oldest_version.value_or(version); }
};

// The float32 payload of a push, in shard-local order: one or more pieces, each a
// contiguous run of elements starting at a shard-local offset. Together they cover
// [offset(), offset() + count()) exactly once, in order.
class Payload {
 public:
  struct Piece {
    int64_t offset = 0;  // shard-local index of values[0]
    std::span<const float> values;
  };

  Payload() = default;
  // REQUIRES: pieces contiguous and in order starting at offset (checked).
  Payload(int64_t offset, std::vector<Piece> pieces);

  int64_t offset() const { return offset_; }
  int64_t count() const { return count_; }
  bool empty() const { return count_ == 0; }
  std::span<const Piece> pieces() const { return pieces_; }
  // Copies the payload into out. REQUIRES: out.size() == count() (checked).
  void CopyTo(std::span<float> out) const;

 private:
  int64_t offset_ = 0;
  int64_t count_ = 0;
  std::vector<Piece> pieces_;
};

// A rule-chosen reply payload (e.g. the elastic difference). Allocated with
// ShardContext::NewReplyBuffer or directly; sent without a further copy.
class ReplyBuffer {
 public:
  ReplyBuffer() = default;
  explicit ReplyBuffer(int64_t count);  // zero-filled, 64-byte aligned
  ReplyBuffer(ReplyBuffer&&) noexcept = default;
  ReplyBuffer& operator=(ReplyBuffer&&) noexcept = default;
  ~ReplyBuffer();

  std::span<float> values() { return {data_.get(), static_cast<std::size_t>(count_)}; }
  std::span<const float> values() const { return {data_.get(), static_cast<std::size_t>(count_)}; }
  int64_t count() const { return count_; }
  bool empty() const { return count_ == 0; }

  // Gives up ownership of the storage (for the sender's free callback; transport
  // internals). Free it with ReplyBuffer::Free.
  float* Release();
  static void Free(float* data);

 private:
  struct Deleter {
    void operator()(float* p) const { Free(p); }
  };
  std::unique_ptr<float, Deleter> data_;
  int64_t count_ = 0;
};

// One request being handled. Built by the server (or by a test's fake store) and passed
// to the rule, which may defer its reply or choose its payload.
class ServerCall {
 public:
  // staleness: shard version when the request arrived minus info.version (negative
  // only if a peer claims a version from the future, e.g. after a restore).
  ServerCall(uint64_t token, RequestInfo info, Payload payload, int64_t staleness)
      : token_(token), info_(info), payload_(std::move(payload)), staleness_(staleness) {}

  const RequestInfo& info() const { return info_; }
  const Payload& payload() const { return payload_; }
  int64_t staleness() const { return staleness_; }
  // Restates the push's staleness in the unit the algorithm counts (SSP: clocks ahead of
  // the slowest worker, docs/algorithms.md#staleness); the staleness record carries the
  // value the call
  // holds when the rule returns. Default: PS updates, as computed by the server.
  void set_staleness(int64_t staleness) { staleness_ = staleness; }
  uint64_t token() const { return token_; }

  // Holds the reply: the server sends nothing now and keeps the request's return
  // address under the returned token until ShardContext::Release/Fail(token). The token
  // is registered when the call returns, so a rule cannot release the call it is
  // handling: to answer it now, do not defer it.
  uint64_t Defer() {
    deferred_ = true;
    return token_;
  }
  bool deferred() const { return deferred_; }

  // Replies (now, or at release if deferred) with this payload instead of the shard's
  // values. For pull and push-pull only. REQUIRES: buffer.count() == info().count.
  void ReplyWith(ReplyBuffer buffer) { reply_ = std::move(buffer); }
  bool has_reply_payload() const { return !reply_.empty(); }
  ReplyBuffer TakeReplyPayload() { return std::move(reply_); }

 private:
  uint64_t token_;
  RequestInfo info_;
  Payload payload_;
  int64_t staleness_;
  bool deferred_ = false;
  ReplyBuffer reply_;
};

// The shard as a rule sees it. Implemented by the server; tests of rules implement it
// with a plain vector (see tests/transport for an example).
class ShardContext {
 public:
  virtual ~ShardContext() = default;

  virtual uint32_t shard() const = 0;
  // Elements the shard owns.
  virtual int64_t size() const = 0;
  // Updates applied so far (docs/architecture.md#staleness).
  virtual uint64_t version() const = 0;
  virtual void AdvanceVersion(uint64_t by = 1) = 0;

  virtual std::span<const float> values() const = 0;
  // The shard's values for writing. The storage may move between calls (the server
  // copies on write while a pull reply still references the old values), so never keep
  // the span past the current call.
  virtual std::span<float> mutable_values() = 0;

  // The server's injected Clock.
  virtual Duration Now() const = 0;

  // Sends a deferred reply now: push and clock are acknowledged with the current
  // version; pull and push-pull carry the current values of the requested range and the
  // current version, or `payload` when given. Unknown or already released tokens are
  // ignored (the peer may have been dropped).
  virtual void Release(uint64_t token) = 0;
  virtual void Release(uint64_t token, ReplyBuffer payload) = 0;
  // Answers a deferred request with an error reply (kRejectedByRule, message).
  virtual void Fail(uint64_t token, std::string message) = 0;
  // Replies currently deferred.
  virtual std::size_t held() const = 0;

  ReplyBuffer NewReplyBuffer(int64_t count) { return ReplyBuffer(count); }
};

class ServerRule {
 public:
  virtual ~ServerRule() = default;

  // The rule's registry name, e.g. "add".
  virtual std::string Name() const = 0;

  // Once, on the serving thread, before the first request (values already set).
  virtual void Start(ShardContext& ctx) { (void)ctx; }

  // A push. Returns what happened to it: kApplied or kAccepted produce a staleness
  // record; kDropped is counted as a dropped stale push.
  virtual PushOutcome OnPush(ShardContext& ctx, ServerCall& call) = 0;

  // A pull, before its values are read (save per-worker copies here; or Defer()).
  virtual void OnPull(ShardContext& ctx, ServerCall& call) {
    (void)ctx;
    (void)call;
  }

  // A push-pull, atomically: no other request is handled between this call and the
  // reading of the reply values. Default: OnPush, then reply with the values.
  virtual PushOutcome OnPushPull(ShardContext& ctx, ServerCall& call) { return OnPush(ctx, call); }

  // A worker announces it finished clock info().clock. Default: acknowledge.
  virtual void OnClock(ShardContext& ctx, ServerCall& call) {
    (void)ctx;
    (void)call;
  }

  // How often OnTick runs (real time between polls; read ctx.Now() for decisions).
  // Zero (default) means never.
  virtual Duration TickInterval() const { return Duration::zero(); }
  virtual void OnTick(ShardContext& ctx) { (void)ctx; }
  // The run now has live_workers workers (a worker was lost, or came back): a rule that
  // waits for every worker (a synchronous round) re-forms its rounds with that many;
  // it may release held calls here. Called on the serving thread, under the shard's lock
  // (ShardServer::SetLiveWorkers). Default: nothing.
  virtual void OnMembership(ShardContext& ctx, int live_workers) {
    (void)ctx;
    (void)live_workers;
  }

  // Rule state as bytes for checkpoints (optimizer slots, per-worker backups, ...).
  // LoadState throws InputError for bytes it cannot read. Defaults: stateless.
  virtual std::string SaveState() const { return {}; }
  virtual void LoadState(std::string_view state);

  // False (default): the server rejects pushes holding NaN or Inf before OnPush, so a
  // NaN gradient never reaches the shard. True: the rule checks (or allows) them itself.
  virtual bool ChecksNonFinite() const { return false; }

  // An element-wise rule may say so: a value s here promises that, for this request,
  // OnPush(ctx, call) is exactly
  //     values[offset + i] += s * payload[i]  (for s == 1: += payload[i]);
  //     ctx.AdvanceVersion();  return kApplied;
  // that OnPushPull is the default (OnPush, then the values), that s depends only on
  // `info` and `staleness` (call.staleness() before any restatement), and that the rule
  // keeps no state of the push. The core may then apply a push without calling OnPush:
  // out of place into a second buffer, in one pass that also checks every result is
  // finite, piece by piece as the pieces arrive (a chunked push, ShardServer), and make
  // it current at the end (all or nothing). nullopt (default): OnPush sees every push.
  virtual std::optional<float> ElementwiseAddScale(const RequestInfo& info,
                                                   int64_t staleness) const {
    (void)info;
    (void)staleness;
    return std::nullopt;
  }
};

// Makes the rule for one shard.
using ServerRuleFactory = std::function<std::unique_ptr<ServerRule>(uint32_t shard)>;

// The default rule: values[offset + i] += payload[i], one version per push; push-pull
// replies with the values after the add.
std::unique_ptr<ServerRule> NewAddRule();

// What AddTo and AddScaledTo throw for an add whose result would not be finite (a finite
// shard plus a finite payload can still overflow to Inf: two pushes of FLT_MAX). The
// shard server answers it as kNonFinite; the range it was given is unchanged.
class NonFiniteResultError : public InputError {
 public:
  using InputError::InputError;
};

// Element-wise helpers for rules (vectorised): dst[i] += src[i]; dst[i] += scale * src[i].
// All or nothing: when a result would be NaN or Inf they throw NonFiniteResultError and
// leave dst unchanged. Checked inside the add: a pass over src alone shows whether any
// result can overflow (only an addend of magnitude 2^102 or more can overflow a finite
// value), and only then is every result computed before any is written. A rule that adds
// several pieces and wants the push all-or-nothing checks them first (AddStaysFinite),
// as the add rule does. With dst already holding NaN or Inf nothing is promised.
void AddTo(std::span<float> dst, std::span<const float> src);
void AddScaledTo(std::span<float> dst, float scale, std::span<const float> src);
// Whether every dst[i] + scale * src[i] is finite, for finite dst. Reads only src unless
// some |scale * src[i]| >= 2^102.
bool AddStaysFinite(std::span<const float> dst, float scale, std::span<const float> src);
namespace internal {
// Between these calls on one thread (the shard server's, around each push) FindNonFinite
// remembers the largest magnitude of each payload span it scans, and the add helpers
// reuse it for a src inside such a span instead of reading src a second time. Outside
// them (other hosts), the helpers read src themselves first.
void ArmPayloadScans();
void DisarmPayloadScans();
}  // namespace internal

// How many adds this thread's helpers refused as non-finite so far (the shard server
// tells a rule's refusal for that reason from others with it).
uint64_t NonFiniteResultsOnThisThread();
// Index of the first NaN or Inf in values, or -1. Vectorised; reads every element once.
int64_t FindNonFinite(std::span<const float> values);
// The same pass; when it finds no NaN or Inf, *max_magnitude is the largest |value| (0
// for none).
int64_t FindNonFinite(std::span<const float> values, float* max_magnitude);
// Whether d + scale * s is finite for every finite float d and every |s| <=
// max_magnitude: the bound the add helpers above use (|scale * s| < 2^102, while only an
// addend of half an ulp of FLT_MAX, 2^103, can round a finite sum to Inf).
bool AddCannotOverflow(float scale, float max_magnitude);
// out[i] = base[i] + scale * src[i] (for scale == 1: base[i] + src[i], the bits AddTo
// gives), in one vectorised pass with no early exit. Returns whether every result is
// finite; when not, out holds what was computed (the caller discards it).
// REQUIRES: the three spans have one size; out overlaps neither input.
bool AddScaledInto(std::span<float> out, std::span<const float> base, float scale,
                   std::span<const float> src);

}  // namespace asgd::ps
