// ps::ShardCore driven directly with every built-in server rule (one suite for all
// hosts: the ZeroMQ server and the in-process store are adapters of this core, tested as
// such in tests/transport and strategies_test). Checks the bookkeeping every rule gets:
// non-finite rejection leaves the shard unchanged, outcomes and staleness records are
// counted, refusals change nothing, a push whose result would overflow is refused as
// non_finite with the shard and rule state unchanged, and Snapshot/Restore round-trips
// values, version and rule state. Strategies with a choice of server rule (downpour's
// server_optimizer) are a case per rule ("downpour/adagrad").
#include <cctype>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/strategy.h"
#include "core/clock.h"
#include "ps/shard_core.h"
#include "ps/staleness.h"

namespace asgd::algorithms {
namespace {

using ps::ErrorCode;
using ps::Op;
using ps::ShardCore;

constexpr int64_t kSize = 8;

// Counts the replies the core releases or fails.
class CountingReplies final : public ps::ReplySink {
 public:
  void Release(uint64_t, const ps::HeldRequest&, ps::ReplyBuffer*) override { ++released; }
  void Fail(uint64_t, const ps::HeldRequest&, ErrorCode, const std::string&) override { ++failed; }
  int released = 0, failed = 0;
};

struct Host {
  // name: a strategy, or "strategy/server_optimizer".
  explicit Host(const std::string& name)
      : clock(NewSystemClock()), storage(std::vector<float>(kSize, 0.5f)) {
    StrategyOptions o;
    o.num_workers = 1;
    const std::size_t slash = name.find('/');
    if (slash != std::string::npos) o.settings.Set("server_optimizer", name.substr(slash + 1));
    ShardCore::Options co;
    co.clock = clock.get();
    co.staleness_sink = &sink;
    core = std::make_unique<ShardCore>(co, FindStrategy(name.substr(0, slash)).server_rule(o, 0),
                                       &storage, &replies);
    core->Start();
  }
  ps::RequestInfo Info(Op op) const {
    ps::RequestInfo info;
    info.op = op;
    info.version = core->version();
    info.count = kSize;
    return info;
  }
  // A push of `update`, or a push-pull if the rule refuses plain pushes.
  ShardCore::Result Push(const std::vector<float>& update) {
    const ps::Payload payload(0, {{0, update}});
    ShardCore::Result r = core->Push(Info(Op::kPush), payload);
    if (r.error == ErrorCode::kRejectedByRule) r = core->PushPull(Info(Op::kPushPull), payload);
    return r;
  }

  std::unique_ptr<Clock> clock;
  ps::VectorStorage storage;
  ps::MemoryStalenessSink sink;
  CountingReplies replies;
  std::unique_ptr<ShardCore> core;
};

std::vector<std::string> StoreStrategies() {
  std::vector<std::string> names;
  for (const std::string& name : StrategyNames()) {
    const Strategy& s = FindStrategy(name);
    if (!s.shared_memory && s.server_rule) names.push_back(name);
  }
  names.push_back("downpour/adagrad");  // downpour's other server rule
  return names;
}

class ShardCoreRules : public ::testing::TestWithParam<std::string> {};

TEST_P(ShardCoreRules, NonFinitePushChangesNothing) {
  Host h(GetParam());
  if (h.core->rule().ChecksNonFinite()) GTEST_SKIP() << "the rule checks non-finite itself";
  const ps::ShardSnapshot before = h.core->Snapshot();
  std::vector<float> update(kSize, 0.01f);
  update[3] = std::numeric_limits<float>::quiet_NaN();
  const ShardCore::Result r = h.core->Push(h.Info(Op::kPush), ps::Payload(0, {{0, update}}));
  EXPECT_EQ(r.error, ErrorCode::kNonFinite);
  EXPECT_NE(r.message.find("element 3"), std::string::npos) << r.message;
  const ps::ShardSnapshot after = h.core->Snapshot();
  EXPECT_EQ(after.values, before.values);
  EXPECT_EQ(after.version, before.version);
  EXPECT_EQ(after.rule_state, before.rule_state);
  EXPECT_EQ(h.core->stats().rejected, 1u);
  EXPECT_EQ(h.core->stats().records, 0u);
  EXPECT_EQ(h.sink.size(), 0u);
}

// Issue 22 item 4: finite pushes whose result would overflow (FLT_MAX again and again:
// the add rules at the second, dc_asgd's and Adagrad's g⊙g at the first, the rate-scaled
// rules after a few hundred; then -FLT_MAX: the elastic rules' x − centre) are refused as
// non_finite, counted, with values, version and rule state unchanged, and what is applied
// stays finite. Model averaging cannot overflow (its centre is the mean of pushed models,
// each finite), nor can signsgd_vote (a round moves each coordinate by ±η whatever the
// pushes' magnitudes: only their signs vote).
TEST_P(ShardCoreRules, OverflowingPushIsRefusedAsNonFinite) {
  Host h(GetParam());
  constexpr float kMax = std::numeric_limits<float>::max();
  std::vector<float> pushes(400, kMax);
  pushes.insert(pushes.end(), {-kMax, -kMax});
  int refused = 0;
  for (std::size_t i = 0; i < pushes.size(); ++i) {
    const ps::ShardSnapshot before = h.core->Snapshot();
    const uint64_t rejected_before = h.core->stats().rejected;
    const ShardCore::Result r = h.Push(std::vector<float>(kSize, pushes[i]));
    h.core->FailAll(ErrorCode::kShuttingDown, "next round");  // a rule that holds replies
    if (r.ok()) {
      for (const float v : h.core->Snapshot().values) ASSERT_TRUE(std::isfinite(v)) << v;
      continue;
    }
    ++refused;
    EXPECT_EQ(r.error, ErrorCode::kNonFinite) << r.message;
    EXPECT_NE(r.message.find("would be"), std::string::npos) << r.message;
    const ps::ShardSnapshot after = h.core->Snapshot();
    ASSERT_EQ(after.values, before.values);
    ASSERT_EQ(after.version, before.version);
    ASSERT_EQ(after.rule_state, before.rule_state);
    EXPECT_GT(h.core->stats().rejected, rejected_before);
    if (pushes[i] > 0) i = 399;  // on to the negative pushes
  }
  if (GetParam() != "model_averaging" && GetParam() != "signsgd_vote") {
    EXPECT_GT(refused, 0) << "no push of +-FLT_MAX overflowed";
  }
}

TEST_P(ShardCoreRules, PushesAreCountedAndRecorded) {
  Host h(GetParam());
  const ps::ShardSnapshot before = h.core->Snapshot();
  const ShardCore::Result r = h.Push(std::vector<float>(kSize, 0.25f));
  if (!r.ok()) {
    // A refusal changes nothing (ServerRule contract).
    EXPECT_EQ(r.error, ErrorCode::kRejectedByRule);
    EXPECT_EQ(h.core->Snapshot().values, before.values);
    EXPECT_EQ(h.core->stats().rejected, 2u);
    return;
  }
  const ps::ShardCoreStats s = h.core->stats();
  EXPECT_EQ(s.pushes_applied + s.pushes_accepted + s.pushes_dropped, 1u);
  EXPECT_EQ(s.records, s.pushes_applied + s.pushes_accepted);
  // A record for the push whatever its outcome; the counters hold applied and accepted.
  ASSERT_EQ(h.sink.size(), 1u);
  for (const auto& rec : h.sink.records()) {
    EXPECT_EQ(rec.pulled_version, before.version);
    EXPECT_EQ(rec.applied_version, before.version);
    EXPECT_EQ(rec.outcome, r.outcome);
    EXPECT_EQ(rec.oldest_version(), rec.pulled_version);  // no window: the two ends agree
  }
  EXPECT_EQ(h.core->held(), r.deferred ? 1u : 0u);
  // Held requests are failed, in order, when the host asks.
  h.core->FailAll(ErrorCode::kShuttingDown, "stopping");
  EXPECT_EQ(h.core->held(), 0u);
  EXPECT_EQ(h.replies.failed, r.deferred ? 1 : 0);
}

// A push that names an older oldest version is recorded with both ends, whatever the rule.
TEST_P(ShardCoreRules, RecordsTheOldestVersionAPushNames) {
  Host h(GetParam());
  h.core->AdvanceVersion(6);
  ps::RequestInfo info = h.Info(Op::kPush);
  info.version = 4;
  info.oldest_version = 1;
  const std::vector<float> update(kSize, 0.25f);
  ShardCore::Result r = h.core->Push(info, ps::Payload(0, {{0, update}}));
  if (r.error == ErrorCode::kRejectedByRule) {
    info.op = Op::kPushPull;
    r = h.core->PushPull(info, ps::Payload(0, {{0, update}}));
  }
  if (!r.ok()) GTEST_SKIP() << "the rule refuses the push: " << r.message;
  ASSERT_EQ(h.sink.size(), 1u);
  const ps::StalenessRecord rec = h.sink.records()[0];
  EXPECT_EQ(rec.pulled_version, 4u);
  EXPECT_EQ(rec.oldest_version(), 1u);
  EXPECT_EQ(rec.oldest_lag, 3u);
  // In the rule's unit (ssp restates it in clocks), plus the window's lag.
  EXPECT_EQ(rec.oldest_staleness(), rec.staleness + 3);
  h.core->FailAll(ErrorCode::kShuttingDown, "stopping");
}

TEST_P(ShardCoreRules, SnapshotRestoresValuesVersionAndRuleState) {
  Host a(GetParam());
  for (int i = 0; i < 3; ++i) (void)a.Push(std::vector<float>(kSize, 0.125f * (i + 1)));
  const ps::ShardSnapshot snap = a.core->Snapshot();
  Host b(GetParam());
  b.core->Restore(snap);
  const ps::ShardSnapshot got = b.core->Snapshot();
  EXPECT_EQ(got.values, snap.values);
  EXPECT_EQ(got.version, snap.version);
  EXPECT_EQ(got.rule_state, snap.rule_state);
  // A snapshot of another size is refused before anything changes.
  ps::ShardSnapshot wrong = snap;
  wrong.values.push_back(1.0f);
  EXPECT_ANY_THROW(b.core->Restore(wrong));
  EXPECT_EQ(b.core->Snapshot().values, snap.values);
}

INSTANTIATE_TEST_SUITE_P(Builtin, ShardCoreRules, ::testing::ValuesIn(StoreStrategies()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string id = p.param;
                           for (char& c : id) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return id;
                         });

}  // namespace
}  // namespace asgd::algorithms
