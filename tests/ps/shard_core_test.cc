// ShardCore::PushReplyFirst and FinishAdd (shard_core.h): a push whose outcome is certain
// before its add is decided first and added after the host's reply, and must leave
// exactly what Push leaves -- the same bits, version, counters and staleness records --
// while any push whose outcome is not certain (values not known finite, a payload with
// NaN or Inf or near overflow, a partial push, a rule without an element-wise scale) is
// handled exactly as Push handles it. Driven without a transport: a vector storage that
// can pretend a reply still reads its values.
#include "ps/shard_core.h"

#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/clock.h"
#include "core/error.h"
#include "ps/server_rule.h"
#include "ps/staleness.h"

namespace asgd::ps {
namespace {

constexpr int64_t kSize = 6;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFloatMax = std::numeric_limits<float>::max();

std::vector<uint32_t> Bits(std::span<const float> values) {
  std::vector<uint32_t> out;
  for (float f : values) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

// A vector and a staging vector, counting how the core writes them; `shared` plays a
// zero-copy reply that still reads the values (the ZeroMQ server's copy-on-write blocks).
class TestStorage final : public ValueStorage {
 public:
  explicit TestStorage(std::vector<float> values) : values_(std::move(values)) {}
  std::span<const float> values() const override { return values_; }
  std::span<float> mutable_values() override {
    ++mutable_calls;
    return values_;
  }
  std::span<float> staging_values() override {
    staging_.resize(values_.size());
    return staging_;
  }
  void CommitStaging() override {
    ++commits;
    values_.swap(staging_);
  }
  bool values_shared() const override { return shared; }

  bool shared = false;
  int mutable_calls = 0;
  int commits = 0;

 private:
  std::vector<float> values_;
  std::vector<float> staging_;
};

class NoReplies final : public ReplySink {
 public:
  void Release(uint64_t, const HeldRequest&, ReplyBuffer*) override {}
  void Fail(uint64_t, const HeldRequest&, ErrorCode, const std::string&) override {}
};

// values += scale * payload through OnPush, stating it as an element-wise scale or not:
// with 0.5 and the promise, DynSGD's shape (a scaled add the core may take over); with 1
// and no promise, the add rule as a rule that sees every push.
class TestAddRule final : public ServerRule {
 public:
  TestAddRule(float scale, bool elementwise) : scale_(scale), elementwise_(elementwise) {}
  std::string Name() const override { return "test_add"; }
  PushOutcome OnPush(ShardContext& ctx, ServerCall& call) override {
    for (const Payload::Piece& piece : call.payload().pieces()) {
      AddScaledTo(
          ctx.mutable_values().subspan(static_cast<std::size_t>(piece.offset), piece.values.size()),
          scale_, piece.values);
    }
    ctx.AdvanceVersion();
    return PushOutcome::kApplied;
  }
  std::optional<float> ElementwiseAddScale(const RequestInfo&, int64_t) const override {
    if (!elementwise_) return std::nullopt;
    return scale_;
  }

 private:
  float scale_;
  bool elementwise_;
};

std::unique_ptr<ServerRule> MakeRule(const std::string& name) {
  if (name == "half_add") return std::make_unique<TestAddRule>(0.5f, true);
  if (name == "opaque_add") return std::make_unique<TestAddRule>(1.0f, false);
  return NewAddRule();
}

struct Host {
  explicit Host(const std::string& rule,
                std::vector<float> initial = std::vector<float>(kSize, 0.25f))
      : clock(NewSystemClock()), storage(std::move(initial)) {
    ShardCore::Options o;
    o.clock = clock.get();
    o.staleness_sink = &sink;
    core = std::make_unique<ShardCore>(o, MakeRule(rule), &storage, &replies);
    core->Start();
  }
  RequestInfo Info(int64_t offset = 0, int64_t count = kSize) const {
    RequestInfo info;
    info.op = Op::kPush;
    info.worker = 2;
    info.version = core->version();
    info.offset = offset;
    info.count = count;
    return info;
  }
  // The payload as two pieces, as a push of two frames arrives.
  static Payload TwoPieces(const std::vector<float>& update, int64_t offset = 0) {
    const std::span<const float> all(update);
    const std::size_t half = update.size() / 2;
    return Payload(offset, {{offset, all.first(half)},
                            {offset + static_cast<int64_t>(half), all.subspan(half)}});
  }
  ShardCore::Result Push(const std::vector<float>& update) {
    return core->Push(Info(), TwoPieces(update));
  }
  // PushReplyFirst, and FinishAdd when it left the add pending.
  ShardCore::Result PushReplyFirst(const std::vector<float>& update, int64_t offset = 0) {
    ShardCore::Result r = core->PushReplyFirst(Info(offset, static_cast<int64_t>(update.size())),
                                               TwoPieces(update, offset));
    if (r.add_pending) core->FinishAdd();
    return r;
  }

  std::unique_ptr<Clock> clock;
  TestStorage storage;
  MemoryStalenessSink sink;
  NoReplies replies;
  std::unique_ptr<ShardCore> core;
};

std::vector<float> Update(float base) {
  std::vector<float> u(kSize);
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = base + 0.375f * static_cast<float>(i);
  return u;
}

class PushReplyFirstRules : public ::testing::TestWithParam<std::string> {};

// The same pushes through Push on one core and PushReplyFirst + FinishAdd on another leave
// the same bits, versions, counters and staleness records; once the values are known
// finite (after the first push of the whole shard) every push is decided before its add.
TEST_P(PushReplyFirstRules, LeavesExactlyWhatPushLeaves) {
  Host push(GetParam()), first(GetParam());
  const bool elementwise = GetParam() != "opaque_add";
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE(step);
    const std::vector<float> u = Update(0.1f * static_cast<float>(step) - 0.2f);
    // Every other push finds a reply still reading the values: out of place then.
    first.storage.shared = step % 2 == 1;
    const ShardCore::Result a = push.Push(u);
    const ShardCore::Result b = first.PushReplyFirst(u);
    ASSERT_TRUE(a.ok()) << a.message;
    ASSERT_TRUE(b.ok()) << b.message;
    EXPECT_EQ(b.add_pending, elementwise && step > 0) << "the first push establishes finiteness";
    EXPECT_EQ(b.outcome, a.outcome);
    EXPECT_EQ(Bits(first.storage.values()), Bits(push.storage.values()));
    EXPECT_EQ(first.core->version(), push.core->version());
  }
  const ShardCoreStats sa = push.core->stats(), sb = first.core->stats();
  EXPECT_EQ(sb.pushes_applied, sa.pushes_applied);
  EXPECT_EQ(sb.records, sa.records);
  EXPECT_EQ(sb.rejected, 0u);
  const std::vector<StalenessRecord> ra = push.sink.records(), rb = first.sink.records();
  ASSERT_EQ(rb.size(), ra.size());
  for (std::size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(rb[i].applied_version, ra[i].applied_version);
    EXPECT_EQ(rb[i].staleness, ra[i].staleness);
    EXPECT_EQ(rb[i].outcome, ra[i].outcome);
  }
}

std::string RuleName(const ::testing::TestParamInfo<std::string>& p) { return p.param; }

INSTANTIATE_TEST_SUITE_P(Rules, PushReplyFirstRules,
                         ::testing::Values("add", "half_add", "opaque_add"), RuleName);

// Decided: the version and the counters move at once, the values only at FinishAdd; in
// place when nothing reads them, out of place (staging) when a reply does.
TEST(PushReplyFirst, DecidesFirstAndAddsAtFinishAdd) {
  Host h("add");
  ASSERT_TRUE(h.PushReplyFirst(Update(1.0f)).ok());  // establishes finiteness
  for (const bool shared : {false, true}) {
    SCOPED_TRACE(shared);
    h.storage.shared = shared;
    const std::vector<float> before(h.storage.values().begin(), h.storage.values().end());
    const uint64_t version = h.core->version();
    const int commits = h.storage.commits;
    const std::vector<float> u = Update(-0.5f);
    const ShardCore::Result r = h.core->PushReplyFirst(h.Info(), Host::TwoPieces(u));
    ASSERT_TRUE(r.ok()) << r.message;
    ASSERT_TRUE(r.add_pending);
    EXPECT_TRUE(h.core->add_pending());
    EXPECT_EQ(r.outcome, PushOutcome::kApplied);
    EXPECT_EQ(h.core->version(), version + 1);
    EXPECT_EQ(Bits(h.storage.values()), Bits(before)) << "nothing added before FinishAdd";
    // Nothing may read or change the shard in between.
    EXPECT_THROW(h.core->Snapshot(), InvariantError);
    EXPECT_THROW(h.core->Push(h.Info(), Host::TwoPieces(u)), InvariantError);
    RequestInfo pull = h.Info();
    pull.op = Op::kPull;
    EXPECT_THROW(h.core->Pull(pull), InvariantError);
    h.core->FinishAdd();
    EXPECT_FALSE(h.core->add_pending());
    std::vector<float> expected = before;
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = before[i] + u[i];
    EXPECT_EQ(Bits(h.storage.values()), Bits(expected));
    EXPECT_EQ(h.storage.commits, commits + (shared ? 1 : 0));
  }
  EXPECT_THROW(h.core->FinishAdd(), InvariantError);
}

// Not certain before the add: handled exactly as Push, with its refusals and messages,
// and the shard unchanged by a refused push.
TEST(PushReplyFirst, PushesNotCertainAreHandledAsPush) {
  // Values not known finite: the first push of the whole shard goes the checked way,
  // and a NaN in the values makes it refused as Push refuses it.
  {
    std::vector<float> initial(kSize, 1.0f);
    initial[4] = kNaN;
    Host h("add", initial);
    const ShardCore::Result r = h.PushReplyFirst(Update(0.5f));
    EXPECT_FALSE(r.add_pending);
    EXPECT_EQ(r.error, ErrorCode::kNonFinite) << r.message;
    EXPECT_NE(r.message.find("element 4"), std::string::npos) << r.message;
    EXPECT_EQ(h.core->version(), 0u);
  }
  Host h("add");
  ASSERT_TRUE(h.PushReplyFirst(Update(1.0f)).ok());
  const std::vector<float> good(h.storage.values().begin(), h.storage.values().end());
  // A NaN in the payload: refused, naming the element, as Push does.
  std::vector<float> nan = Update(0.5f);
  nan[kSize - 1] = kNaN;
  ShardCore::Result r = h.PushReplyFirst(nan);
  EXPECT_FALSE(r.add_pending);
  EXPECT_EQ(r.error, ErrorCode::kNonFinite);
  EXPECT_NE(r.message.find("NaN at shard-local element 5"), std::string::npos) << r.message;
  // Near overflow: the checked add decides, and refuses a result of Inf.
  std::vector<float> huge(kSize, 0.0f);
  huge[2] = kFloatMax;
  r = h.PushReplyFirst(huge);
  EXPECT_FALSE(r.add_pending);
  ASSERT_TRUE(r.ok()) << "FLT_MAX onto a small value is finite";
  r = h.PushReplyFirst(huge);
  EXPECT_FALSE(r.add_pending);
  EXPECT_EQ(r.error, ErrorCode::kNonFinite) << r.message;
  EXPECT_EQ(h.core->version(), 2u);
  EXPECT_EQ(h.core->stats().rejected, 2u);
  // A part of the shard only.
  r = h.PushReplyFirst({1.0f, 2.0f}, 3);
  EXPECT_FALSE(r.add_pending);
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(h.core->version(), 3u);
}

// A write the core did not check (a restore, here of a NaN) makes the values unknown
// again, until a push of the whole shard checks every one of them.
TEST(PushReplyFirst, ARestoreMakesTheValuesUnknownAgain) {
  Host h("add");
  ASSERT_TRUE(h.PushReplyFirst(Update(1.0f)).ok());
  ASSERT_TRUE(h.PushReplyFirst(Update(1.0f)).add_pending);
  ShardSnapshot s = h.core->Snapshot();
  s.values[1] = kNaN;
  h.core->Restore(s);
  ShardCore::Result r = h.PushReplyFirst(Update(1.0f));
  EXPECT_FALSE(r.add_pending);
  EXPECT_EQ(r.error, ErrorCode::kNonFinite) << r.message;
  s.values[1] = 0.0f;
  h.core->Restore(s);
  r = h.PushReplyFirst(Update(1.0f));
  EXPECT_FALSE(r.add_pending) << "checked, since the restore was not";
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_TRUE(h.PushReplyFirst(Update(1.0f)).add_pending);
}

}  // namespace
}  // namespace asgd::ps
