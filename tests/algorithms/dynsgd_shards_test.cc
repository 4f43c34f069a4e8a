// DynSGD on a sharded server: each shard damps a push by its own staleness (issue 21's
// invariant "DynSGD with 2 shards"). A shard's version counts the pushes that shard has
// applied, so when two workers' pushes reach the shards in different orders the same push
// is damped differently on each shard. That is what a parameter server with per-server
// clocks does (the anchors' PS keeps one clock per server process; Jiang et al.'s servers
// each hold a partition), and it is what asgd runs: there is no global clock to agree on.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "algorithms/strategy.h"
#include "core/clock.h"
#include "ps/shard_core.h"
#include "ps/staleness.h"

namespace asgd::algorithms {
namespace {

using ps::Op;
using ps::ShardCore;

constexpr int64_t kSize = 3;

class NoReplies final : public ps::ReplySink {
 public:
  void Release(uint64_t, const ps::HeldRequest&, ps::ReplyBuffer*) override {}
  void Fail(uint64_t, const ps::HeldRequest&, ps::ErrorCode, const std::string&) override {}
};

// One DynSGD shard holding kSize elements, all 0.
struct Shard {
  Shard() : clock(NewSystemClock()), storage(std::vector<float>(kSize, 0.0f)) {
    StrategyOptions o;
    o.num_workers = 2;
    ShardCore::Options co;
    co.clock = clock.get();
    co.staleness_sink = &sink;
    core = std::make_unique<ShardCore>(co, FindStrategy("dynsgd").server_rule(o, 0), &storage,
                                       &replies);
    core->Start();
  }
  // Worker `worker` pushes `delta` computed on the values of version `pulled`.
  void Push(uint32_t worker, uint64_t pulled, float delta) {
    ps::RequestInfo info;
    info.op = Op::kPush;
    info.worker = worker;
    info.version = pulled;
    info.count = kSize;
    const ShardCore::Result r =
        core->Push(info, ps::Payload(0, {{0, std::vector<float>(kSize, delta)}}));
    ASSERT_EQ(r.error, ps::ErrorCode::kNone) << r.message;
  }
  float value() const { return storage.values()[0]; }

  std::unique_ptr<Clock> clock;
  ps::VectorStorage storage;
  ps::MemoryStalenessSink sink;
  NoReplies replies;
  std::unique_ptr<ShardCore> core;
};

TEST(DynSgdShards, EachShardDampsByItsOwnStaleness) {
  // Both workers pulled version 0 of both shards. Worker 0's push (Δ = 1) reaches shard 0
  // first and shard 1 second; worker 1's (Δ = 4) the other way round.
  Shard s0, s1;
  s0.Push(0, 0, 1.0f);  // staleness 0: + 1
  s0.Push(1, 0, 4.0f);  // staleness 1: + 4/2
  s1.Push(1, 0, 4.0f);  // staleness 0: + 4
  s1.Push(0, 0, 1.0f);  // staleness 1: + 1/2
  EXPECT_FLOAT_EQ(s0.value(), 1.0f + 2.0f);
  EXPECT_FLOAT_EQ(s1.value(), 4.0f + 0.5f);
  EXPECT_EQ(s0.core->version(), 2u);
  EXPECT_EQ(s1.core->version(), 2u);
  // Each shard records the staleness it damped by: worker 0 was fresh on shard 0 and one
  // update stale on shard 1.
  ASSERT_EQ(s0.sink.records().size(), 2u);
  ASSERT_EQ(s1.sink.records().size(), 2u);
  EXPECT_EQ(s0.sink.records()[0].worker, 0u);
  EXPECT_EQ(s0.sink.records()[0].staleness, 0);
  EXPECT_EQ(s1.sink.records()[1].worker, 0u);
  EXPECT_EQ(s1.sink.records()[1].staleness, 1);
}

}  // namespace
}  // namespace asgd::algorithms
