// The simulated store and client (sim/sim_store.h) under the real worker and
// server rules: closed forms of virtual time and staleness, the SSP bound at every step,
// and equivalence with the MemoryStore (issue 13, validation).
#include "sim/sim_store.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/memory_store.h"
#include "algorithms/strategy.h"
#include "compression/compressor.h"
#include "core/rng.h"
#include "ps/placement.h"
#include "ps/staleness.h"
#include "sim/network_model.h"
#include "sim/scheduler.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {

using ps::ParamClient;
using ps::Status;
namespace {

using sim::SimParamClient;
using sim::SimStore;
using std::chrono::milliseconds;
using testing::kDim;
using testing::kInit;
using testing::Quadratic;

// Keeps every staleness record, and passes each one to on_record as it comes (one
// thread: the scheduler's).
struct RecordingSink final : ps::StalenessSink {
  void Record(const ps::StalenessRecord& r) override {
    all.push_back(r);
    if (on_record) on_record(r);
  }
  std::vector<ps::StalenessRecord> records() const { return all; }

  std::vector<ps::StalenessRecord> all;
  std::function<void(const ps::StalenessRecord&)> on_record;
};

// n workers of one strategy as scheduler tasks, against a SimStore (or, for the
// reference, a MemoryStore: only for rules that never hold a request, since its held
// requests block the thread). Worker w sleeps compute[w] of virtual time after each
// gradient: the step-time model reduced to a constant per worker.
struct Cluster {
  Quadratic q{kDim};
  sim::Scheduler sched;
  sim::NetworkModel net;
  RecordingSink sink;
  std::unique_ptr<SimStore> store;
  std::unique_ptr<MemoryStore> memory;
  std::vector<std::unique_ptr<ParamClient>> clients;
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  std::vector<std::unique_ptr<WorkerRule>> rules;
  std::vector<WorkerEnv> envs;
  std::vector<Duration> compute;
  std::vector<Duration> finished;  // per worker: when its last step ended
  // Called at the start of every gradient (worker, its iteration), before the sleep.
  std::function<void(int, int)> on_gradient;

  Cluster(const std::string& name, int workers, StrategyOptions so, sim::NetworkOptions n = {},
          int shards = 1, bool memory_reference = false)
      : net(n, workers, shards) {
    const Strategy& s = FindStrategy(name);
    so.num_workers = workers;
    if (memory_reference) {
      memory = std::make_unique<MemoryStore>(kInit, s.server_rule(so, 0), nullptr, &sink);
    } else {
      // Contiguous pieces, the last shard taking the remainder.
      std::vector<std::vector<Range>> ranges;
      const int64_t per = kDim / shards;
      for (int i = 0; i < shards; ++i) {
        const int64_t begin = i * per;
        ranges.push_back({Range{begin, i == shards - 1 ? kDim - begin : per}});
      }
      store = std::make_unique<SimStore>(
          &sched, &net, ps::Placement::FromRanges(kDim, ranges), kInit,
          [&](uint32_t shard) { return s.server_rule(so, shard); }, &sink);
    }
    envs.resize(static_cast<std::size_t>(workers));
    compute.assign(static_cast<std::size_t>(workers), milliseconds(1));
    finished.assign(static_cast<std::size_t>(workers), Duration::zero());
    for (int w = 0; w < workers; ++w) {
      if (memory) {
        clients.push_back(std::make_unique<MemoryClient>(memory.get(), static_cast<uint32_t>(w)));
      } else {
        clients.push_back(std::make_unique<SimParamClient>(store.get(), static_cast<uint32_t>(w)));
      }
      optimizers.push_back(testing::MakeOptimizer("sgd"));
      rules.push_back(s.worker_rule(so));
      envs[static_cast<std::size_t>(w)] =
          testing::MakeEnv(w, workers, clients.back().get(), optimizers.back().get(), so);
    }
  }

  // Every worker takes `steps` Steps (ending early on kShuttingDown).
  void Run(int steps) {
    for (std::size_t w = 0; w < rules.size(); ++w) {
      sched.Spawn("worker", [this, w, steps] {
        auto iteration = std::make_shared<int>(0);
        envs[w].gradient = [this, w, iteration](std::span<const float> p, std::span<float> g) {
          if (on_gradient) on_gradient(static_cast<int>(w), (*iteration)++);
          const float loss = q.Fn()(p, g);
          sched.Sleep(compute[w]);
          return loss;
        };
        const Status st = rules[w]->Start(envs[w]);
        ASSERT_TRUE(st.ok()) << st.ToString();
        for (int i = 0; i < steps; ++i) {
          const StepResult r = rules[w]->Step(envs[w]);
          if (r.status.error_code() == ps::ErrorCode::kShuttingDown) break;
          ASSERT_TRUE(r.status.ok()) << "worker " << w << ": " << r.status.ToString();
        }
        finished[w] = sched.Now();
      });
    }
    sched.Run();
  }

  std::vector<float> values() const { return memory ? memory->values() : store->values(); }
};

std::vector<std::string> AsynchronousStrategies() {
  return testing::StrategiesWhere([](const Strategy& s) {
    return s.can_simulate && s.family != Family::kGroup && !s.synchronous;
  });
}
std::vector<std::string> SimulableStrategies() {
  return testing::StrategiesWhere(
      [](const Strategy& s) { return s.can_simulate && s.family != Family::kGroup; });
}

StrategyOptions Options() {
  StrategyOptions so = testing::Options(0.05, 1);
  return so;
}

class Asynchronous : public ::testing::TestWithParam<std::string> {};

// Constant compute time and a free network: each round every worker pushes once, in
// worker order, and pulls right after its push, so from the second round on each push
// finds exactly workers - 1 other pushes applied since its worker's pull.
TEST_P(Asynchronous, StalenessIsWorkersMinusOneAfterWarmUp) {
  constexpr int kWorkers = 5, kSteps = 6;
  Cluster c(GetParam(), kWorkers, Options());
  ASSERT_TRUE(c.store->inline_service());
  c.Run(kSteps);
  const auto records = c.sink.records();
  ASSERT_EQ(records.size(), static_cast<std::size_t>(kWorkers * kSteps));
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    EXPECT_EQ(r.worker, i % kWorkers) << "push " << i << " out of round-robin order";
    const int64_t want = i < kWorkers ? static_cast<int64_t>(i) : kWorkers - 1;
    EXPECT_EQ(r.staleness, want) << GetParam() << ": push " << i;
  }
  EXPECT_EQ(c.sched.Now(), kSteps * milliseconds(1));
}

// Zero delays and the scheduler's round-robin order: the simulated store's values equal
// the MemoryStore's, bit for bit, and so do the staleness records (time aside).
TEST_P(Asynchronous, EqualsTheMemoryStoreBitForBit) {
  constexpr int kWorkers = 3, kSteps = 7;
  StrategyOptions so = Options();
  so.worker.window = 2;
  so.worker.fetch_window = 2;
  Cluster sim(GetParam(), kWorkers, so);
  Cluster mem(GetParam(), kWorkers, so, {}, 1, /*memory_reference=*/true);
  for (Cluster* c : {&sim, &mem}) {
    c->compute = {Duration::zero(), Duration::zero(), Duration::zero()};
    c->Run(kSteps);
  }
  const std::vector<float> a = sim.values(), b = mem.values();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i], b[i]) << GetParam() << ": element " << i;
  }
  auto ra = sim.sink.records(), rb = mem.sink.records();
  ASSERT_EQ(ra.size(), rb.size());
  for (std::size_t i = 0; i < ra.size(); ++i) {
    ra[i].wall_time_s = rb[i].wall_time_s = 0;
    EXPECT_EQ(ra[i], rb[i]) << GetParam() << ": record " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, Asynchronous, ::testing::ValuesIn(AsynchronousStrategies()));

// Synchronous rounds take the slowest worker's time: with compute times 1, 2, 3 and 4 ms,
// 5 rounds of sync_sgd end at 5 x 4 ms, for every worker.
TEST(SyncSgd, RoundTimeIsTheSlowestWorkersCompute) {
  constexpr int kSteps = 5;
  Cluster c("sync_sgd", 4, Options());
  c.compute = {milliseconds(1), milliseconds(2), milliseconds(3), milliseconds(4)};
  c.Run(kSteps);
  for (Duration f : c.finished) EXPECT_EQ(f, kSteps * milliseconds(4));
  EXPECT_EQ(c.store->version(0), static_cast<uint64_t>(kSteps));
}

// One worker slowed k-fold: without backups every round takes k times as long; with one
// backup worker (replicas_to_aggregate = workers - 1) the rounds go at the others' pace
// and the straggler's late pushes are dropped.
TEST(SyncSgd, StragglerSlowsRoundsKFoldUnlessOneBackup) {
  constexpr int kWorkers = 4, kSteps = 6, kSlow = 3;
  const Duration base = milliseconds(2);
  auto run = [&](int replicas, bool straggler) {
    StrategyOptions so = Options();
    so.settings.Set("replicas_to_aggregate", replicas);
    auto c = std::make_unique<Cluster>("sync_sgd", kWorkers, so);
    c->compute.assign(kWorkers, base);
    if (straggler) c->compute[kWorkers - 1] = kSlow * base;
    c->Run(kSteps);
    return c;
  };
  auto even = run(0, false);
  auto slow = run(0, true);
  auto backup = run(kWorkers - 1, true);
  EXPECT_EQ(even->finished[0], kSteps * base);
  EXPECT_EQ(slow->finished[0], kSlow * kSteps * base);  // k times the rounds of `even`
  for (int w = 0; w < kWorkers - 1; ++w) {
    EXPECT_EQ(backup->finished[static_cast<std::size_t>(w)], kSteps * base) << "worker " << w;
  }
  EXPECT_GT(backup->store->stats().pushes_dropped, 0u);
  EXPECT_EQ(slow->store->stats().pushes_dropped, 0u);
}

// SSP (docs/algorithms.md#ssp): when a worker starts iteration c, every worker's pushes of
// clocks <= c - S - 1 have been applied, at every step, however slow the straggler.
TEST(Ssp, BoundHoldsAtEveryStep) {
  constexpr int kWorkers = 4, kBound = 2, kSteps = 20;
  StrategyOptions so = Options();
  so.settings.Set("ssp_bound", kBound);
  Cluster c("ssp", kWorkers, so, sim::NetworkPreset("dc_10gbe"));
  c.compute = {milliseconds(1), milliseconds(1), milliseconds(2), milliseconds(7)};
  int violations = 0, checks = 0;
  c.on_gradient = [&](int /*w*/, int iteration) {
    std::map<uint32_t, int> applied;
    for (const auto& r : c.sink.records()) ++applied[r.worker];
    for (int k = 0; k < kWorkers; ++k) {
      ++checks;
      if (applied[static_cast<uint32_t>(k)] < iteration - kBound) ++violations;
    }
  };
  c.Run(kSteps);
  EXPECT_EQ(violations, 0) << "of " << checks;
  int64_t max_staleness = 0;
  for (const auto& r : c.sink.records()) max_staleness = std::max(max_staleness, r.staleness);
  EXPECT_LE(max_staleness, kBound);
  EXPECT_GT(max_staleness, 0) << "the straggler never held anyone back";
  // The fast workers were held: they finish near the straggler, not at 20 x 1 ms.
  EXPECT_GT(c.finished[0], kSteps * milliseconds(7) - (kBound + 2) * milliseconds(7));
}

// Every strategy that can be simulated runs on a real network model over two shards
// and reaches the quadratic's minimum neighbourhood; messages take time.
class EveryStrategy : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryStrategy, RunsOverTwoShardsOnALoopbackNetwork) {
  constexpr int kWorkers = 3, kSteps = 40;
  Cluster c(GetParam(), kWorkers, Options(), sim::NetworkPreset("loopback"), /*shards=*/2);
  ASSERT_FALSE(c.store->inline_service());
  c.Run(kSteps);
  EXPECT_EQ(c.sched.unfinished_tasks(), 0);
  EXPECT_GT(c.sched.Now(), kSteps * milliseconds(1));  // compute plus the messages
  EXPECT_GT(c.net.shard_stats(0).bytes_in, 0);
  EXPECT_GT(c.net.shard_stats(1).bytes_out, 0);
  const std::vector<float> v = c.values();
  double before = 0, after = 0;
  for (int i = 0; i < kDim; ++i) {
    before += std::abs(kInit[static_cast<std::size_t>(i)] - c.q.c[static_cast<std::size_t>(i)]);
    after += std::abs(v[static_cast<std::size_t>(i)] - c.q.c[static_cast<std::size_t>(i)]);
  }
  EXPECT_LT(after, before) << GetParam() << " did not move towards the minimum";
}

INSTANTIATE_TEST_SUITE_P(Strategies, EveryStrategy, ::testing::ValuesIn(SimulableStrategies()));

// A round trip on the network model: latency both ways plus the transfers and the
// server's cost, as sim/README.md draws it.
TEST(SimStore, PullTakesTheModelledRoundTrip) {
  sim::NetworkOptions n;
  n.latency = std::chrono::microseconds(50);
  n.link_bandwidth = 1e9;  // bytes per second
  n.goodput = 1;
  n.server_per_message = std::chrono::microseconds(5);
  Cluster c("async_sgd", 1, Options(), n);
  std::vector<float> out(kDim);
  Duration took{};
  c.sched.Spawn("reader", [&] {
    const Duration t0 = c.sched.Now();
    ASSERT_TRUE(c.clients[0]->Pull(out).ok());
    took = c.sched.Now() - t0;
  });
  c.sched.Run();
  // Request: 0 payload bytes; reply: kDim floats at 1 GB/s (24 ns).
  EXPECT_EQ(took, std::chrono::microseconds(105) + std::chrono::nanoseconds(24));
  for (int i = 0; i < kDim; ++i)
    EXPECT_EQ(out[static_cast<std::size_t>(i)], kInit[static_cast<std::size_t>(i)]);
}

// Causality on a network that takes time (issue 30): latency, a slow link, NIC and
// server queues, four workers at different speeds over two shards. Every request is
// served (a push applied) no earlier than its send + latency + its transfer + its
// server time, and each push's staleness is the number of applies its shard made
// between the service of the worker's last read (its pull, or its push-pull's read)
// and the push's apply, counted from the shards' own order of events.
class Causality : public ::testing::TestWithParam<std::string> {};

TEST_P(Causality, AppliesFollowTheirSendsAndStalenessCountsTheAppliesBetween) {
  constexpr int kWorkers = 4, kSteps = 12, kShards = 2;
  const Duration latency = std::chrono::microseconds(50);
  const Duration per_message = std::chrono::microseconds(5);
  constexpr int64_t kNsPerByte = 10'000;     // a payload rate of 100 kB/s ...
  constexpr int64_t kNsPerElement = 20'000;  // ... and 20 us of server work per element
  sim::NetworkOptions n;
  n.latency = latency;
  n.link_bandwidth = 2e5;  // line rate, bytes per second
  n.goodput = 0.5;         // payload: 1e5 bytes per second
  n.server_per_message = per_message;
  n.server_ns_per_element = kNsPerElement;
  Cluster c(GetParam(), kWorkers, Options(), n, kShards);
  c.compute = {milliseconds(1), std::chrono::microseconds(1300), std::chrono::microseconds(2100),
               std::chrono::microseconds(3700)};
  // What the shards did, in the order they did it: staleness records (written while the
  // rule applies a push) and services (reported right after the rule ran).
  struct Entry {
    bool is_record = false;
    ps::StalenessRecord record;
    SimStore::Service service;
  };
  std::vector<Entry> log;
  c.sink.on_record = [&](const ps::StalenessRecord& r) { log.push_back({true, r, {}}); };
  c.store->SetServiceObserver([&](const SimStore::Service& s) { log.push_back({false, {}, s}); });
  c.Run(kSteps);
  ASSERT_EQ(c.sched.unfinished_tasks(), 0);

  auto reads = [](ps::Op op) { return op == ps::Op::kPull || op == ps::Op::kPushPull; };
  auto pushes = [](ps::Op op) { return op == ps::Op::kPush || op == ps::Op::kPushPull; };
  // (worker, shard) -> index in log of its last read's service; -1: none yet (version 0).
  std::map<std::pair<uint32_t, int>, std::ptrdiff_t> last_read;
  int pushes_checked = 0, services = 0;
  int64_t max_staleness = 0;
  for (std::size_t i = 0; i < log.size(); ++i) {
    if (log[i].is_record) continue;
    const SimStore::Service& s = log[i].service;
    ++services;
    const Duration earliest = s.sent + latency +
                              std::chrono::nanoseconds(s.request_bytes * kNsPerByte) + per_message +
                              std::chrono::nanoseconds(s.elements * kNsPerElement);
    EXPECT_GE(s.served, earliest) << "worker " << s.worker << " shard " << s.shard << " "
                                  << ps::OpName(s.op) << " sent at " << s.sent.count();
    const auto key = std::make_pair(s.worker, s.shard);
    if (pushes(s.op)) {
      ASSERT_GE(i, 1u);
      ASSERT_TRUE(log[i - 1].is_record) << "a push served without its record";
      const ps::StalenessRecord& r = log[i - 1].record;
      ASSERT_EQ(r.worker, s.worker);
      ASSERT_EQ(r.shard, static_cast<uint32_t>(s.shard));
      const auto it = last_read.find(key);
      const std::ptrdiff_t from = it == last_read.end() ? -1 : it->second;
      int64_t applies = 0;
      for (std::ptrdiff_t j = from + 1; j < static_cast<std::ptrdiff_t>(i) - 1; ++j) {
        const Entry& e = log[static_cast<std::size_t>(j)];
        if (e.is_record && e.record.shard == r.shard &&
            e.record.outcome == ps::PushOutcome::kApplied) {
          ++applies;
        }
      }
      EXPECT_EQ(r.staleness, applies) << GetParam() << ": worker " << s.worker << " shard "
                                      << s.shard << " push at " << s.served.count() << " ns";
      max_staleness = std::max(max_staleness, r.staleness);
      ++pushes_checked;
    }
    if (reads(s.op)) last_read[key] = static_cast<std::ptrdiff_t>(i);
  }
  EXPECT_EQ(static_cast<std::size_t>(pushes_checked), c.sink.records().size());
  EXPECT_GT(pushes_checked, 0);
  EXPECT_GT(max_staleness, 0) << "the workers never overlapped";
}

INSTANTIATE_TEST_SUITE_P(Strategies, Causality, ::testing::ValuesIn(AsynchronousStrategies()));

// The shard's server is charged per element it touches (issue 30): a pull for the n
// elements it reads and sends, a push for the n it writes (whatever its encoded size), a
// push-pull for both. Free bandwidth isolates the server: each call takes 2 x latency +
// per message + elements x per element.
struct ServerCost {
  static constexpr int64_t kNsPerElement = 1000;
  static sim::NetworkOptions Network() {
    sim::NetworkOptions n;
    n.latency = std::chrono::microseconds(50);
    n.server_per_message = std::chrono::microseconds(5);
    n.server_ns_per_element = kNsPerElement;
    return n;
  }
  static Duration Expected(int64_t elements) {
    return std::chrono::microseconds(105) + std::chrono::nanoseconds(elements * kNsPerElement);
  }
  // How long `call` takes on worker 0 of a fresh one-shard cluster.
  static Duration Time(const std::function<Status(ParamClient&)>& call) {
    Cluster c("async_sgd", 1, Options(), Network());
    EXPECT_FALSE(c.store->inline_service());
    Duration took{};
    c.sched.Spawn("caller", [&] {
      const Duration t0 = c.sched.Now();
      const Status st = call(*c.clients[0]);
      ASSERT_TRUE(st.ok()) << st.ToString();
      took = c.sched.Now() - t0;
    });
    c.sched.Run();
    return took;
  }
};

TEST(SimStore, APullCostsTheServerPerElementRead) {
  std::vector<float> out(kDim);
  EXPECT_EQ(ServerCost::Time([&](ParamClient& p) { return p.Pull(out); }),
            ServerCost::Expected(kDim));
}

TEST(SimStore, ACompressedPushCostsTheServerAsMuchAsADenseOne) {
  const std::vector<float> update = {0.5f, 0.0f, -3.0f, 0.25f, 0.0f, 1.0f};
  const Duration dense = ServerCost::Time([&](ParamClient& p) { return p.Push(update, 0); });
  EXPECT_EQ(dense, ServerCost::Expected(kDim));
  compression::CompressionOptions co;
  co.name = "topk";
  co.ratio = 0.2;  // k = 1: 8 encoded bytes for 6 elements (24 bytes dense)
  const auto compressor = compression::NewCompressor(co);
  std::vector<compression::Encoded> parts(1);
  Rng rng(1);
  compressor->Encode(update, rng, &parts[0]);
  ASSERT_LT(parts[0].bytes(), kDim * 4);
  EXPECT_EQ(ServerCost::Time([&](ParamClient& p) { return p.PushEncoded(parts, {}, 0); }), dense);
  // A compressed push-pull: the elements written and the elements read.
  std::vector<float> out(kDim);
  EXPECT_EQ(ServerCost::Time([&](ParamClient& p) { return p.PushEncoded(parts, out, 0); }),
            ServerCost::Expected(2 * kDim));
}

TEST(SimStore, APushPullCostsTheServerTheElementsWrittenAndRead) {
  const std::vector<float> update(kDim, 0.5f);
  std::vector<float> out(kDim);
  EXPECT_EQ(ServerCost::Time([&](ParamClient& p) { return p.PushPull(update, out, 0); }),
            ServerCost::Expected(2 * kDim));
}

// Shutdown answers a held request (a round that cannot complete) with kShuttingDown.
TEST(SimStore, ShutdownReleasesHeldRequests) {
  Cluster c("sync_sgd", 2, Options());
  c.compute = {milliseconds(1), milliseconds(1)};
  std::vector<float> update(kDim, 0.0f);
  Status st;
  c.sched.Spawn("lonely", [&] { st = c.clients[0]->Push(update, 0); });
  c.sched.Run();
  EXPECT_EQ(c.sched.unfinished_tasks(), 1);  // held: its peer never pushes
  c.store->Shutdown();
  c.sched.Run();
  EXPECT_EQ(c.sched.unfinished_tasks(), 0);
  EXPECT_EQ(st.error_code(), ps::ErrorCode::kShuttingDown);
}

}  // namespace
}  // namespace asgd::algorithms
