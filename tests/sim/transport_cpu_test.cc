// The transport's CPU on the host's cores (sim.transport_us_per_message,
// sim.transport_ns_per_byte; sim/sim_store.h): each message costs
// c(b) = per_message + b x ns_per_byte at its sender and at its receiver, taken from the
// CorePool the gradients use. Closed forms on a free network (latency 0, infinite
// bandwidth, no server time), where every microsecond comes from the cores.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/strategy.h"
#include "ps/placement.h"
#include "sim/core_pool.h"
#include "sim/network_model.h"
#include "sim/scheduler.h"
#include "sim/sim_store.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {

using ps::Status;
namespace {

using sim::CorePool;
using sim::SimParamClient;
using sim::SimStore;
using sim::TransportCpu;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using testing::kDim;
using testing::kInit;

TransportCpu Charge(Duration per_message, double ns_per_byte = 0) {
  TransportCpu cpu;
  cpu.per_message = per_message;
  cpu.ns_per_byte = ns_per_byte;
  return cpu;
}

// n workers on a host of `cores` cores (0: a machine each) and a free network, against
// `shards` shards of one strategy's server rule. Each worker's step, as the simulated
// run's: a gradient of d on the pool, then a push-pull of its kDim elements (kDim x 4
// bytes each way, split over the shards).
struct Host {
  sim::Scheduler sched;
  sim::NetworkModel net;
  CorePool cores;
  std::unique_ptr<SimStore> store;
  std::vector<std::unique_ptr<SimParamClient>> clients;
  std::vector<std::vector<Duration>> step_ends;  // per worker, per step

  Host(int workers, int cores_n, const TransportCpu& cpu, int shards = 1,
       const std::string& strategy = "async_sgd")
      : net(sim::NetworkOptions{}, workers, shards), cores(cores_n) {
    StrategyOptions so = testing::Options(0.05, 1);
    so.num_workers = workers;
    const Strategy& s = FindStrategy(strategy);
    std::vector<std::vector<Range>> ranges;
    const int64_t per = kDim / shards;
    for (int i = 0; i < shards; ++i) {
      const int64_t begin = i * per;
      ranges.push_back({Range{begin, i == shards - 1 ? kDim - begin : per}});
    }
    store = std::make_unique<SimStore>(&sched, &net, ps::Placement::FromRanges(kDim, ranges), kInit,
                                       [&](uint32_t shard) { return s.server_rule(so, shard); });
    store->ChargeTransportCpu(&cores, cpu);
    for (int w = 0; w < workers; ++w) {
      clients.push_back(std::make_unique<SimParamClient>(store.get(), static_cast<uint32_t>(w)));
    }
    step_ends.resize(static_cast<std::size_t>(workers));
  }

  // Every worker takes `steps` steps with gradients of d.
  void Run(int steps, Duration d) {
    for (std::size_t w = 0; w < clients.size(); ++w) {
      sched.Spawn("worker", [this, w, steps, d] {
        std::vector<float> update(kDim, 0.5f), out(kDim);
        for (int i = 0; i < steps; ++i) {
          const Duration now = sched.Now();
          sched.Sleep(cores.Run(now, d) - now);
          const Status st = clients[w]->PushPull(update, out, i + 1);
          ASSERT_TRUE(st.ok()) << st.ToString();
          step_ends[w].push_back(sched.Now());
        }
      });
    }
    sched.Run();
    ASSERT_EQ(sched.unfinished_tasks(), 0);
  }
};

// The closed form: 1 worker, 1 core, a free network, constant step time d: each
// step takes exactly d + the four charges of its round trip (client send, shard receive,
// shard reply send, client receive), here of kDim x 4 = 24 payload bytes each way. A
// machine of its own (cores = 0) gives the same: one worker contends with no one.
TEST(TransportCpu, OneWorkerOnOneCoreStepsTakeComputePlusFourCharges) {
  const Duration d = milliseconds(1);
  const TransportCpu cpu = Charge(microseconds(10), 1000);  // c(24 B) = 10 + 24 us
  const Duration c = microseconds(34);
  ASSERT_EQ(cpu.Cost(kDim * 4), c);
  for (int cores : {1, 0}) {
    Host h(1, cores, cpu);
    EXPECT_FALSE(h.store->inline_service());
    h.Run(5, d);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(h.step_ends[0][i], (i + 1) * (d + 4 * c)) << cores;
    EXPECT_EQ(h.cores.waited(), Duration::zero()) << cores;
  }
}

// 2 workers on 1 core: every gradient and every message's CPU queue for the one core,
// which is never idle, so the two complete one step per (d + 4c) between them: the last
// of 2k steps ends at 2k (d + 4c), and the pool reports the waits.
TEST(TransportCpu, TwoWorkersOnOneCoreRunAtOneStepPerStepsCpu) {
  const Duration d = microseconds(700);
  const Duration c = microseconds(50);
  constexpr int kSteps = 10;
  Host h(2, 1, Charge(c));
  h.Run(kSteps, d);
  const Duration last = std::max(h.step_ends[0].back(), h.step_ends[1].back());
  EXPECT_EQ(last, 2 * kSteps * (d + 4 * c));
  EXPECT_GT(h.cores.waited(), Duration::zero());
  // Two cores are not a bound here: the workers overlap, and finish sooner.
  Host two(2, 2, Charge(c));
  two.Run(kSteps, d);
  EXPECT_LT(std::max(two.step_ends[0].back(), two.step_ends[1].back()), last);
}

// The charge takes its core from the pool the gradients use (a charge that bypassed it
// would let both run at once): a worker's round trip sent at time 0 and another task's
// gradient of d asked for at the same instant, on one core. The round trip's send has the
// core first, so the gradient starts at c and ends at c + d; the shard's receive waits
// for it, and the round trip ends at d + 4c.
TEST(TransportCpu, MessagesAndGradientsShareTheCores) {
  const Duration d = milliseconds(2);
  const Duration c = microseconds(100);
  Host h(1, 1, Charge(c));
  Duration round_trip{}, gradient{};
  h.sched.Spawn("messages", [&] {
    std::vector<float> update(kDim, 0.5f), out(kDim);
    ASSERT_TRUE(h.clients[0]->PushPull(update, out, 1).ok());
    round_trip = h.sched.Now();
  });
  h.sched.Spawn("gradient", [&] {
    const Duration now = h.sched.Now();
    h.sched.Sleep(h.cores.Run(now, d) - now);
    gradient = h.sched.Now();
  });
  h.sched.Run();
  EXPECT_EQ(gradient, c + d);
  EXPECT_EQ(round_trip, d + 4 * c);
}

// sim.cores = 0: each end's CPU is its own machine's. Two workers never wait for a core,
// but the shard's receives and reply sends run on its one I/O thread, one after the
// other: two requests arriving together at d + c are received by d + 2c and d + 3c, the
// replies leave at d + 4c and d + 5c and are received at d + 5c and d + 6c.
TEST(TransportCpu, AMachineEachAddsTimeWithoutContentionButTheShardsIoIsSerial) {
  const Duration d = milliseconds(1);
  const Duration c = microseconds(40);
  Host h(2, 0, Charge(c));
  h.Run(1, d);
  std::vector<Duration> first = {h.step_ends[0][0], h.step_ends[1][0]};
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first[0], d + 5 * c);
  EXPECT_EQ(first[1], d + 6 * c);
  EXPECT_EQ(h.cores.waited(), Duration::zero());
}

// Two shards: the client sends shard after shard (its thread), the shards receive and
// reply on their own I/O threads. On 2 cores one push-pull pipelines: send 0, then send 1
// beside shard 0's receive, ... the step ends at d + 5c'; on 1 core all eight charges
// queue: d + 8c'. c' = c(12 bytes), each shard's half of the vector.
TEST(TransportCpu, TwoShardsPipelineOnTwoCoresAndQueueOnOne) {
  const Duration d = microseconds(500);
  const TransportCpu cpu = Charge(microseconds(20), 500);
  const Duration c = cpu.Cost(kDim / 2 * 4);
  ASSERT_EQ(c, microseconds(26));
  Host two(1, 2, cpu, 2);
  two.Run(1, d);
  EXPECT_EQ(two.step_ends[0][0], d + 5 * c);
  Host one(1, 1, cpu, 2);
  one.Run(1, d);
  EXPECT_EQ(one.step_ends[0][0], d + 8 * c);
}

// A rule that releases held requests (sync_sgd's round) sends their replies one after the
// other on the shard's I/O thread, each after the previous one's CPU. Two workers, a core
// each (8 cores): both requests arrive at d + c; the first is received and held
// (d + 2c), the second received (d + 3c) and the round released: replies at d + 4c and
// d + 5c, received at d + 5c and d + 6c.
TEST(TransportCpu, ReleasedRepliesLeaveOneAfterTheOther) {
  const Duration d = milliseconds(1);
  const Duration c = microseconds(30);
  Host h(2, 8, Charge(c), 1, "sync_sgd");
  h.Run(1, d);
  std::vector<Duration> ends = {h.step_ends[0][0], h.step_ends[1][0]};
  std::sort(ends.begin(), ends.end());
  EXPECT_EQ(ends[0], d + 5 * c);
  EXPECT_EQ(ends[1], d + 6 * c);
}

// Without a charge nothing changes: a free network is still served inline, and the pool
// is never asked.
TEST(TransportCpu, NoChargeLeavesTheStoreAsItWas) {
  Host h(2, 1, TransportCpu{});
  EXPECT_TRUE(h.store->inline_service());
  h.Run(3, milliseconds(1));
  // The gradients alone on one core: 2 x 3 steps of 1 ms.
  EXPECT_EQ(std::max(h.step_ends[0].back(), h.step_ends[1].back()), milliseconds(6));
}

}  // namespace
}  // namespace asgd::algorithms
