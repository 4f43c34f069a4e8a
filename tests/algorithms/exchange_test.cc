// The worker's exchange (algorithms/exchange.h): the store family's over the in-memory
// store and the group family's over gloo ranks on 127.0.0.1, and each strategy's family as
// the registry declares it.
#include "algorithms/exchange.h"

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/memory_store.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "core/clock.h"
#include "tests/collective/run_ranks.h"

namespace asgd::algorithms {
namespace {

constexpr int kN = 6;

std::unique_ptr<MemoryStore> Store(std::vector<float> initial) {
  return std::make_unique<MemoryStore>(std::move(initial),
                                       FindStrategy("async_sgd").server_rule(StrategyOptions{}, 0));
}

struct Opened {
  std::unique_ptr<Clock> clock = NewSystemClock();
  Duration comm{0};
  ExchangeContext context;
  Opened() {
    context.clock = clock.get();
    context.comm_total = &comm;
  }
};

TEST(StoreExchange, OpensTheChainIntoTheEnvAndCountsWhatReachedTheStore) {
  auto store = Store(std::vector<float>(kN, 1.0f));
  auto client = store->NewClient(0, ps::Role::kWorker);
  auto exchange = NewStoreExchange(client.get());
  EXPECT_TRUE(exchange->GradientUsedBeforeNextCall());
  EXPECT_FALSE(exchange->Traffic().has_value()) << "nothing to count before Open";

  Opened o;
  WorkerEnv env;
  exchange->Open(o.context, env);
  ASSERT_NE(env.ps, nullptr);
  EXPECT_NE(env.ps, client.get()) << "the rule talks to the chain, not the store's client";
  EXPECT_EQ(env.collective, nullptr);
  EXPECT_EQ(exchange->compressing(), nullptr) << "compression none: no compressing layer";

  std::vector<float> theta(kN);
  ASSERT_TRUE(env.ps->Pull(theta).ok());
  EXPECT_EQ(theta, std::vector<float>(kN, 1.0f));
  const std::vector<float> update(kN, 0.5f);
  ASSERT_TRUE(env.ps->Push(update, 1).ok());
  const std::optional<ExchangeTraffic> t = exchange->Traffic();
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->bytes_pulled, client->traffic().bytes_pulled);
  EXPECT_EQ(t->bytes_pushed, client->traffic().bytes_pushed);
  EXPECT_GE(t->bytes_pushed, static_cast<int64_t>(kN * sizeof(float)));
  EXPECT_EQ(t->dense_bytes_pushed, t->bytes_pushed);
  EXPECT_EQ(t->dropped_pushes, 0);
  EXPECT_EQ(exchange->PeersFirstNonFinite(), -1);
}

TEST(StoreExchange, WithCompressionTheChainHasACompressingLayer) {
  auto store = Store(std::vector<float>(kN, 0.0f));
  auto client = store->NewClient(0, ps::Role::kWorker);
  auto exchange = NewStoreExchange(client.get());
  Opened o;
  o.context.compression.name = "topk";
  WorkerEnv env;
  exchange->Open(o.context, env);
  EXPECT_NE(exchange->compressing(), nullptr);
}

TEST(StoreExchange, NamesTheFirstNonFiniteValueOfTheStore) {
  std::vector<float> initial(kN, 0.0f);
  initial[3] = std::numeric_limits<float>::quiet_NaN();
  initial[5] = std::numeric_limits<float>::infinity();
  auto store = Store(initial);
  auto client = store->NewClient(0, ps::Role::kWorker);
  auto exchange = NewStoreExchange(client.get());
  EXPECT_EQ(exchange->PeersFirstNonFinite(), -1) << "not open: nothing to pull from";
  Opened o;
  WorkerEnv env;
  exchange->Open(o.context, env);
  EXPECT_EQ(exchange->PeersFirstNonFinite(), 3);
}

TEST(GroupExchange, OpensTheRankIntoTheEnvAndCountsItsPayload) {
  collective::testing::RunRanks(2, collective::Algorithm::kRing, [](collective::Collective& c) {
    const std::vector<float> initial(kN, static_cast<float>(c.rank()));
    auto exchange = NewGroupExchange(&c, initial);
    EXPECT_FALSE(exchange->GradientUsedBeforeNextCall());
    Opened o;
    WorkerEnv env;
    exchange->Open(o.context, env);
    EXPECT_EQ(env.collective, &c);
    EXPECT_EQ(env.initial.data(), initial.data());
    EXPECT_EQ(env.ps, nullptr);
    EXPECT_EQ(exchange->compressing(), nullptr);
    EXPECT_EQ(exchange->PeersFirstNonFinite(), -1);
    std::vector<float> v(kN, 1.0f);
    c.Allreduce(v, collective::ReduceOp::kSum);
    const std::optional<ExchangeTraffic> t = exchange->Traffic();
    ASSERT_TRUE(t.has_value());
    const collective::CollectiveCounters counters = c.Counters();
    EXPECT_EQ(t->bytes_pushed, static_cast<int64_t>(counters.bytes_sent));
    EXPECT_EQ(t->bytes_pulled, static_cast<int64_t>(counters.bytes_received));
    EXPECT_GT(t->bytes_pushed, 0);
    EXPECT_EQ(t->dense_bytes_pushed, t->bytes_pushed);
  });
}

// The family is declared once, and a strategy's rules fit it: a store's has a server rule,
// a group's has none, the baseline has neither.
TEST(StrategyFamily, TheRulesFitTheDeclaredFamily) {
  int groups = 0;
  for (const Strategy* s : Strategies()) {
    SCOPED_TRACE(s->name);
    switch (s->family) {
      case Family::kSequential:
        EXPECT_FALSE(s->worker_rule);
        EXPECT_FALSE(s->server_rule);
        break;
      case Family::kStore:
        EXPECT_TRUE(s->worker_rule);
        EXPECT_TRUE(s->server_rule);
        break;
      case Family::kGroup:
        ++groups;
        EXPECT_TRUE(s->worker_rule);
        EXPECT_FALSE(s->server_rule);
        break;
    }
  }
  EXPECT_EQ(groups, 3);  // allreduce_sgd, local_sgd, dpsgd
  EXPECT_EQ(FindStrategy("allreduce_sgd").family, Family::kGroup);
  EXPECT_EQ(FindStrategy("sgd").family, Family::kSequential);
  EXPECT_EQ(FindStrategy("async_sgd").family, Family::kStore);
  EXPECT_STREQ(FamilyName(Family::kGroup), "group");
}

}  // namespace
}  // namespace asgd::algorithms
