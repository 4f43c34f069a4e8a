#include "sim/network_model.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "sim/scheduler.h"

namespace asgd::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

NetworkOptions Link(Duration latency, double bytes_per_s) {
  NetworkOptions o;
  o.latency = latency;
  o.link_bandwidth = bytes_per_s;
  o.goodput = 1;  // payload at the line rate: the closed forms below in whole ns
  return o;
}

// k simultaneous messages of b bytes on one link of bandwidth B: latency + i·b/B.
TEST(NetworkModel, SimultaneousMessagesOnOneLinkQueueFifo) {
  constexpr double kB = 1e9;           // 1 GB/s: 1 byte per ns
  constexpr int64_t kBytes = 250'000;  // 250 µs each
  const Duration latency = microseconds(40);
  for (int k : {1, 2, 5, 16}) {
    NetworkModel net(Link(latency, kB), 1, 1);
    for (int i = 1; i <= k; ++i) {
      EXPECT_EQ(net.SendToShard(0, 0, kBytes, Duration::zero()), latency + i * microseconds(250))
          << "k=" << k << " i=" << i;
    }
    // The other direction is independent (full duplex).
    EXPECT_EQ(net.SendToWorker(0, 0, kBytes, Duration::zero()), latency + microseconds(250));
  }
}

TEST(NetworkModel, TheShardNicIsSharedByItsLinks) {
  // k workers send to one shard at once: the shard's NIC serialises them exactly as one
  // link would; another shard is not affected.
  const Duration latency = microseconds(10);
  NetworkModel net(Link(latency, 1e9), 8, 2);
  for (int w = 0; w < 8; ++w) {
    EXPECT_EQ(net.SendToShard(w, 0, 1000, Duration::zero()), latency + (w + 1) * nanoseconds(1000));
  }
  EXPECT_EQ(net.SendToShard(0, 1, 1000, Duration::zero()),
            latency + 2 * nanoseconds(1000));  // worker 0's own NIC sent one before
  EXPECT_EQ(net.shard_stats(0).bytes_in, 8000);
  EXPECT_EQ(net.shard_stats(0).nic_wait, nanoseconds(1000 * (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7)));
  // A message sent once the NIC is idle again does not wait.
  EXPECT_EQ(net.SendToShard(3, 0, 1000, microseconds(100)),
            microseconds(100) + latency + nanoseconds(1000));
}

TEST(NetworkModel, TheSlowerEndSetsTheRate) {
  NetworkOptions o = Link(Duration::zero(), 2e9);
  o.shard_nic_bandwidth = 1e9;
  NetworkModel net(o, 1, 1);
  EXPECT_EQ(net.TransferTime(5000), nanoseconds(5000));
}

TEST(NetworkModel, ServerWorkQueuesPerShard) {
  NetworkOptions o;
  o.server_per_message = microseconds(5);
  o.server_ns_per_element = 0.5;
  NetworkModel net(o, 1, 2);
  // 2,000 elements: 5 us + 2,000 x 0.5 ns.
  EXPECT_EQ(net.Serve(0, 2000, Duration::zero()), microseconds(6));
  EXPECT_EQ(net.Serve(0, 2000, microseconds(1)), microseconds(12));  // behind the first
  EXPECT_EQ(net.Serve(1, 0, microseconds(1)), microseconds(6));      // another shard
}

// The goodput applies to both rates: payload moves at min(link, shard NIC) x goodput.
TEST(NetworkModel, GoodputScalesTheSlowerLineRate) {
  NetworkOptions o = Link(Duration::zero(), 4e9);
  o.shard_nic_bandwidth = 2e9;
  o.goodput = 0.5;
  NetworkModel net(o, 1, 1);
  EXPECT_DOUBLE_EQ(net.payload_rate(), 1e9);
  EXPECT_EQ(net.TransferTime(5000), nanoseconds(5000));
  EXPECT_DOUBLE_EQ(NetworkModel(NetworkPreset("dc_10gbe"), 1, 1).payload_rate(),
                   10e9 / 8 * 1448 / 1538);
  EXPECT_DOUBLE_EQ(NetworkModel(NetworkPreset("loopback"), 1, 1).payload_rate(), 3.67e9);
}

TEST(NetworkModel, ZeroPresetCostsNothing) {
  NetworkModel net(NetworkPreset("zero"), 4, 4);
  EXPECT_EQ(net.SendToShard(1, 2, 1 << 30, microseconds(7)), microseconds(7));
  EXPECT_EQ(net.Serve(2, 1 << 30, microseconds(7)), microseconds(7));
}

TEST(NetworkModel, PresetsAreValidAndOrdered) {
  for (const std::string& name : NetworkPresetNames()) {
    EXPECT_NO_THROW(NetworkPreset(name).Validate()) << name;
  }
  EXPECT_GT(NetworkPreset("dc_100gbe").link_bandwidth, NetworkPreset("dc_10gbe").link_bandwidth);
  EXPECT_GT(NetworkPreset("wan").latency, NetworkPreset("dc_10gbe").latency);
  EXPECT_DOUBLE_EQ(NetworkPreset("dc_10gbe").link_bandwidth, 1.25e9);  // the line rate
  EXPECT_DOUBLE_EQ(NetworkPreset("dc_10gbe").goodput, kEthernetGoodput);
  EXPECT_EQ(NetworkPreset("dc_10gbe").server_ns_per_element, 1.0);
}

TEST(NetworkModel, BadOptionsNameTheirKey) {
  auto expect_key = [](const NetworkOptions& o, const std::string& key) {
    try {
      NetworkModel net(o, 1, 1);
      ADD_FAILURE() << key << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), key);
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  NetworkOptions o;
  o.link_bandwidth = -1.25e9;
  expect_key(o, "network.link_gbps");
  o = {};
  o.link_bandwidth = 0;
  expect_key(o, "network.link_gbps");
  o = {};
  o.shard_nic_bandwidth = -1;
  expect_key(o, "network.shard_nic_gbps");
  o = {};
  o.latency = microseconds(-1);
  expect_key(o, "network.latency_us");
  o = {};
  o.server_ns_per_element = -0.1;
  expect_key(o, "network.server_ns_per_element");
  for (double g : {0.0, -0.5, 1.01}) {
    o = {};
    o.goodput = g;
    expect_key(o, "network.goodput");
  }
  o = {};
  o.server_per_message = microseconds(-2);
  expect_key(o, "network.server_us_per_message");
  try {
    NetworkPreset("infiniband");
    ADD_FAILURE() << "unknown preset accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "network.preset");
  }
}

// ---- Fair sharing (network.sharing = fair) ------------------------------------------

// One message for the asynchronous sends: handed over at `at` by a worker to a shard
// (to_shard) or the other way, `bytes` payload bytes.
struct Message {
  Duration at;
  bool to_shard;
  int worker, shard;
  int64_t bytes;
};

// Sends every message through the asynchronous API at its instant, runs the scheduler,
// and returns each message's arrival (in the order of `messages`).
std::vector<Duration> Arrivals(NetworkModel& net, const std::vector<Message>& messages) {
  Scheduler sched;
  std::vector<Duration> arrived(messages.size(), Duration::min());
  for (std::size_t i = 0; i < messages.size(); ++i) {
    sched.At(messages[i].at, [&, i] {
      const Message& m = messages[i];
      auto done = [&, i] { arrived[i] = sched.Now(); };
      if (m.to_shard) {
        net.SendToShard(sched, m.worker, m.shard, m.bytes, done);
      } else {
        net.SendToWorker(sched, m.shard, m.worker, m.bytes, done);
      }
    });
  }
  sched.Run();
  return arrived;
}

// 400 messages, seeded: each direction, up to 2 MB, among 5 workers and 3 shards, handed
// over up to 200 µs apart.
std::vector<Message> SeededMix() {
  std::mt19937_64 rng(42);
  std::vector<Message> messages;
  Duration t{};
  for (int i = 0; i < 400; ++i) {
    t += nanoseconds(static_cast<int64_t>(rng() % 200'000));
    messages.push_back({t, rng() % 2 == 0, static_cast<int>(rng() % 5), static_cast<int>(rng() % 3),
                        static_cast<int64_t>(rng() % 2'000'000)});
  }
  return messages;
}

NetworkOptions FairLink(Duration latency, double bytes_per_s) {
  NetworkOptions o = Link(latency, bytes_per_s);
  o.sharing = NetworkSharing::kFair;
  return o;
}

// Two messages of b bytes handed to one shard's receive side at once: fair sharing ends
// both at 2b/r; FIFO ends the first at b/r and the second at 2b/r.
TEST(FairSharing, TwoEqualFlowsOnOneSideEndTogether) {
  const Duration latency = microseconds(10);
  const std::vector<Message> two = {{Duration::zero(), true, 0, 0, 1000},
                                    {Duration::zero(), true, 1, 0, 1000}};
  NetworkModel fair(FairLink(latency, 1e9), 2, 1);  // 1 byte per ns
  EXPECT_EQ(Arrivals(fair, two),
            (std::vector<Duration>{latency + nanoseconds(2000), latency + nanoseconds(2000)}));
  NetworkModel fifo(Link(latency, 1e9), 2, 1);
  EXPECT_EQ(Arrivals(fifo, two),
            (std::vector<Duration>{latency + nanoseconds(1000), latency + nanoseconds(2000)}));
  // nic_wait: each fair message took 2,000 ns for 1,000 ns of transfer; under FIFO the
  // second waited 1,000 ns.
  EXPECT_EQ(fair.shard_stats(0).nic_wait, nanoseconds(2000));
  EXPECT_EQ(fifo.shard_stats(0).nic_wait, nanoseconds(1000));
  EXPECT_EQ(fair.shard_stats(0).bytes_in, 2000);
  // The same holds for the shard's transmit side (replies to two workers).
  NetworkModel replies(FairLink(latency, 1e9), 2, 1);
  EXPECT_EQ(Arrivals(replies, {{Duration::zero(), false, 0, 0, 1000},
                               {Duration::zero(), false, 1, 0, 1000}}),
            (std::vector<Duration>{latency + nanoseconds(2000), latency + nanoseconds(2000)}));
  EXPECT_EQ(replies.shard_stats(0).bytes_out, 2000);
}

// A flow joining halfway: A (1,000 bytes) alone for 500 ns moves 500 bytes; then A and B
// share, A's last 500 bytes take 1,000 ns (A ends at 1,500), and B, which moved 500 by
// then, has the side alone for its last 500 (ends at 2,000).
TEST(FairSharing, AFlowJoiningHalfway) {
  NetworkModel net(FairLink(Duration::zero(), 1e9), 2, 1);
  EXPECT_EQ(
      Arrivals(net, {{Duration::zero(), true, 0, 0, 1000}, {nanoseconds(500), true, 1, 0, 1000}}),
      (std::vector<Duration>{nanoseconds(1500), nanoseconds(2000)}));
}

// Max-min, not an equal split: worker 0 sends to three shards at once, so its transmit
// side holds each of its flows to r/3; worker 1's flow to shard 0 takes the rest of shard
// 0's receive side, 2r/3 (an equal split there would give it r/2 and end it at 2,400 ns).
// 1,200 bytes at 2r/3 end at 1,800 ns; worker 0's flows have 600 bytes left then and stay
// at r/3 (its own side is their bottleneck): 3,600 ns.
TEST(FairSharing, AFlowHeldBackElsewhereLeavesTheRestToTheOthers) {
  NetworkModel net(FairLink(Duration::zero(), 1e9), 2, 3);
  EXPECT_EQ(Arrivals(net, {{Duration::zero(), true, 0, 0, 1200},
                           {Duration::zero(), true, 0, 1, 1200},
                           {Duration::zero(), true, 0, 2, 1200},
                           {Duration::zero(), true, 1, 0, 1200}}),
            (std::vector<Duration>{nanoseconds(3600), nanoseconds(3600), nanoseconds(3600),
                                   nanoseconds(1800)}));
}

// A shard NIC twice as fast as the links: two workers sending to it at once are each
// held by their own link, both at the full link rate (FIFO would serialise them at the
// link rate: one message after the other).
TEST(FairSharing, AFasterShardNicCarriesTwoLinksAtOnce) {
  NetworkOptions o = FairLink(Duration::zero(), 1e9);
  o.shard_nic_bandwidth = 2e9;
  NetworkModel net(o, 2, 1);
  EXPECT_EQ(
      Arrivals(net, {{Duration::zero(), true, 0, 0, 1000}, {Duration::zero(), true, 1, 0, 1000}}),
      (std::vector<Duration>{nanoseconds(1000), nanoseconds(1000)}));
  EXPECT_EQ(net.shard_stats(0).nic_wait, Duration::zero());
}

// Work conservation: a side with flows on it always moves at its capacity, so when the
// shard's receive side is never idle the last message ends at (total bytes) / r, as under
// FIFO, whatever the order in which they end.
TEST(FairSharing, ABusySideIsWorkConserving) {
  const std::vector<Message> staggered = {{Duration::zero(), true, 0, 0, 3000},
                                          {nanoseconds(100), true, 1, 0, 1000},
                                          {nanoseconds(200), true, 2, 0, 2500},
                                          {nanoseconds(300), true, 3, 0, 500}};
  NetworkModel fair(FairLink(Duration::zero(), 1e9), 4, 1);
  NetworkModel fifo(Link(Duration::zero(), 1e9), 4, 1);
  const std::vector<Duration> f = Arrivals(fair, staggered);
  const std::vector<Duration> g = Arrivals(fifo, staggered);
  EXPECT_EQ(*std::max_element(f.begin(), f.end()), nanoseconds(7000));
  EXPECT_EQ(*std::max_element(g.begin(), g.end()), nanoseconds(7000));
  // Fair sharing: the short messages do not wait behind the first one. The 500-byte one
  // shares with three from 300 ns on (the others have moved 100+100/2+100/3 = 183.3,
  // 83.3 and 33.3 bytes): it ends at 300 + 4 x 500 = 2,300 ns.
  EXPECT_EQ(f[3], nanoseconds(2300));
  EXPECT_EQ(g[3], nanoseconds(7000));
}

// Capacity is per side and per direction: a worker's request and its reply, and two
// shards' flows on different sides, do not share.
TEST(FairSharing, SidesAreIndependent) {
  NetworkModel net(FairLink(Duration::zero(), 1e9), 2, 2);
  EXPECT_EQ(Arrivals(net, {{Duration::zero(), true, 0, 0, 1000},
                           {Duration::zero(), false, 0, 0, 1000},
                           {Duration::zero(), true, 1, 1, 1000}}),
            (std::vector<Duration>{nanoseconds(1000), nanoseconds(1000), nanoseconds(1000)}));
}

// Zero bytes, or an infinite rate: the message arrives after the latency alone.
TEST(FairSharing, FreeMessagesTakeTheLatency) {
  const Duration latency = microseconds(3);
  NetworkModel net(FairLink(latency, 1e9), 1, 1);
  EXPECT_EQ(Arrivals(net, {{nanoseconds(5), true, 0, 0, 0}}),
            (std::vector<Duration>{nanoseconds(5) + latency}));
  NetworkModel fast(FairLink(latency, std::numeric_limits<double>::infinity()), 2, 1);
  EXPECT_EQ(Arrivals(fast, {{nanoseconds(5), true, 0, 0, 1 << 20},
                            {nanoseconds(5), true, 1, 0, 1 << 20}}),
            (std::vector<Duration>{nanoseconds(5) + latency, nanoseconds(5) + latency}));
}

// Under fair sharing the synchronous sends cannot know a message's end.
TEST(FairSharing, SynchronousSendsAreFifoOnly) {
  NetworkModel net(FairLink(Duration::zero(), 1e9), 1, 1);
  EXPECT_THROW(net.SendToShard(0, 0, 1000, Duration::zero()), InvariantError);
  EXPECT_THROW(net.SendToWorker(0, 0, 1000, Duration::zero()), InvariantError);
}

// network.sharing = fifo (the default): the asynchronous sends deliver at exactly the
// synchronous sends' arrivals (the formulas of the header comment), with the same
// counters, on a seeded mix of directions, sizes, workers, shards and instants.
TEST(FairSharing, FifoAsynchronousSendsGiveTheSynchronousTimes) {
  NetworkOptions o = NetworkPreset("dc_10gbe");
  o.shard_nic_bandwidth = 2.5e9;
  const std::vector<Message> messages = SeededMix();
  NetworkModel async(o, 5, 3);
  const std::vector<Duration> got = Arrivals(async, messages);
  NetworkModel sync(o, 5, 3);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    const Duration want = m.to_shard ? sync.SendToShard(m.worker, m.shard, m.bytes, m.at)
                                     : sync.SendToWorker(m.shard, m.worker, m.bytes, m.at);
    EXPECT_EQ(got[i], want) << i;
  }
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(async.shard_stats(s).bytes_in, sync.shard_stats(s).bytes_in);
    EXPECT_EQ(async.shard_stats(s).bytes_out, sync.shard_stats(s).bytes_out);
    EXPECT_EQ(async.shard_stats(s).nic_wait, sync.shard_stats(s).nic_wait);
  }
}

TEST(FairSharing, TheKeyTakesFifoFairOrInterleaved) {
  EXPECT_EQ(ParseNetworkSharing("fifo"), NetworkSharing::kFifo);
  EXPECT_EQ(ParseNetworkSharing("fair"), NetworkSharing::kFair);
  EXPECT_EQ(ParseNetworkSharing("interleaved"), NetworkSharing::kInterleaved);
  EXPECT_EQ(NetworkSharingName(NetworkSharing::kFair), "fair");
  EXPECT_EQ(NetworkSharingName(NetworkSharing::kInterleaved), "interleaved");
  EXPECT_EQ(NetworkSharingName(NetworkSharing::kFifo), "fifo");
  EXPECT_EQ(NetworkOptions().sharing, NetworkSharing::kFifo);
  for (const char* bad : {"FIFO", "round_robin", ""}) {
    try {
      ParseNetworkSharing(bad);
      ADD_FAILURE() << bad << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), "network.sharing");
      EXPECT_NE(std::string(e.what()).find("fifo, fair or interleaved"), std::string::npos)
          << e.what();
    }
  }
}

// ---- Interleaved chunks (network.sharing = interleaved) ------------------------------

NetworkOptions Interleaved(Duration latency, double bytes_per_s, int64_t chunk_bytes) {
  NetworkOptions o = Link(latency, bytes_per_s);
  o.sharing = NetworkSharing::kInterleaved;
  o.chunk_bytes = chunk_bytes;
  return o;
}

// n messages of `bytes` from workers 0..n-1 to shard 0, all handed over at 0.
std::vector<Message> AtOnceToOneShard(int n, int64_t bytes) {
  std::vector<Message> out;
  for (int w = 0; w < n; ++w) out.push_back({Duration::zero(), true, w, 0, bytes});
  return out;
}

// A lone message moves chunk after chunk at the full rate: it arrives as under FIFO, at
// latency + b / r, whether or not the chunk divides it, and waits for nothing.
TEST(InterleavedSharing, ALoneMessageArrivesAsUnderFifo) {
  const Duration latency = microseconds(10);
  for (const int64_t chunk : {int64_t{1}, int64_t{1448}, int64_t{16384}, int64_t{1} << 30}) {
    NetworkModel net(Interleaved(latency, 1e9, chunk), 1, 1);
    EXPECT_EQ(Arrivals(net, {{nanoseconds(7), true, 0, 0, 100'000}}),
              (std::vector<Duration>{nanoseconds(7) + latency + nanoseconds(100'000)}))
        << chunk;
    EXPECT_EQ(net.shard_stats(0).nic_wait, Duration::zero()) << chunk;
    EXPECT_EQ(net.shard_stats(0).bytes_in, 100'000) << chunk;
  }
  // At a rate that does not divide the chunks into whole nanoseconds, the chunks still
  // add up to the message's one transfer time.
  NetworkModel odd(Interleaved(Duration::zero(), 3e8, 1000), 1, 1);
  EXPECT_EQ(Arrivals(odd, {{Duration::zero(), false, 0, 0, 10'001}}),
            (std::vector<Duration>{odd.TransferTime(10'001)}));
}

// Chunks as long as the messages: whole messages one after the other, as FIFO's arrival
// instants, but the ones that waited in a random order, not the order they were handed
// over (the first, handed to an idle side, starts at once); the seed picks it, the same
// seed the same order.
TEST(InterleavedSharing, WholeMessageChunksServeThemInARandomOrder) {
  const Duration latency = microseconds(1);
  std::vector<Duration> fifo_instants;
  for (int i = 1; i <= 4; ++i) fifo_instants.push_back(latency + i * nanoseconds(1000));
  int second_not_second = 0;
  std::vector<std::vector<Duration>> orders;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    NetworkModel net(Interleaved(latency, 1e9, 1000), 4, 1, seed);
    const std::vector<Duration> got = Arrivals(net, AtOnceToOneShard(4, 1000));
    if (std::find(orders.begin(), orders.end(), got) == orders.end()) orders.push_back(got);
    EXPECT_EQ(got[0], fifo_instants[0]) << seed;
    if (got[1] != fifo_instants[1]) ++second_not_second;
    std::vector<Duration> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, fifo_instants) << "seed " << seed;
    NetworkModel again(Interleaved(latency, 1e9, 1000), 4, 1, seed);
    EXPECT_EQ(Arrivals(again, AtOnceToOneShard(4, 1000)), got) << seed;
  }
  EXPECT_GE(orders.size(), 4u);     // of the 6 orders of the three that waited
  EXPECT_GE(second_not_second, 8);  // 2 in 3 with even draws
}

// Small chunks: two equal messages handed over together share the side and end within a
// chunk of each other, the last at 2b / r (the side never idles); neither arrives at
// FIFO's b / r.
TEST(InterleavedSharing, SmallChunksShareTheSide) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    NetworkModel net(Interleaved(Duration::zero(), 1e9, 100), 2, 1, seed);
    const std::vector<Duration> got = Arrivals(net, AtOnceToOneShard(2, 10'000));
    const auto [lo, hi] = std::minmax_element(got.begin(), got.end());
    EXPECT_EQ(*hi, nanoseconds(20'000)) << seed;
    // The first to end waited for at least ten of the other's 100 chunks (with even draws,
    // for about 90 of them).
    EXPECT_GE(*lo, nanoseconds(10'000 + 10 * 100)) << seed;
    // nic_wait: each message's time beyond its unshared 10,000 ns.
    EXPECT_EQ(net.shard_stats(0).nic_wait, *lo + *hi - 2 * nanoseconds(10'000)) << seed;
  }
}

// The side a chunk frees is offered to every message waiting on it, the one whose chunk
// it was among them: a message that started first does not keep the side (as it would
// if the freed transmit side, where it is alone, chose first). With two messages of ten
// chunks, the first one ends at its unshared 10 chunks only if it wins nine draws of two
// in a row.
TEST(InterleavedSharing, AFreedSideDoesNotFavourTheMessageThatFreedIt) {
  int kept_the_side = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    NetworkModel net(Interleaved(Duration::zero(), 1e9, 100), 2, 1, seed);
    const std::vector<Duration> got =
        Arrivals(net, {{Duration::zero(), true, 0, 0, 1000}, {nanoseconds(1), true, 1, 0, 1000}});
    if (got[0] == nanoseconds(1000)) ++kept_the_side;
    EXPECT_EQ(std::max(got[0], got[1]), nanoseconds(2000)) << seed;
  }
  EXPECT_LE(kept_the_side, 2);
}

// Work conservation, with both ends held: the staggered messages of the fair test end,
// last, at (total bytes) / r for every chunk and seed; and a worker sending to two shards
// at once keeps its transmit side busy: both end by 2b / r.
TEST(InterleavedSharing, ABusySideIsWorkConserving) {
  const std::vector<Message> staggered = {{Duration::zero(), true, 0, 0, 3000},
                                          {nanoseconds(100), true, 1, 0, 1000},
                                          {nanoseconds(200), true, 2, 0, 2500},
                                          {nanoseconds(300), true, 3, 0, 500}};
  for (const int64_t chunk : {int64_t{50}, int64_t{300}, int64_t{5000}}) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      NetworkModel net(Interleaved(Duration::zero(), 1e9, chunk), 4, 1, seed);
      const std::vector<Duration> got = Arrivals(net, staggered);
      EXPECT_EQ(*std::max_element(got.begin(), got.end()), nanoseconds(7000)) << chunk;
      NetworkModel two(Interleaved(Duration::zero(), 1e9, chunk), 1, 2, seed);
      const std::vector<Duration> both = Arrivals(
          two, {{Duration::zero(), true, 0, 0, 1000}, {Duration::zero(), true, 0, 1, 1000}});
      EXPECT_EQ(*std::max_element(both.begin(), both.end()), nanoseconds(2000)) << chunk;
    }
  }
}

// The same options and seed give the same arrivals on a seeded mix of directions, sizes,
// workers, shards and instants; another seed gives others (the choices are the model's).
TEST(InterleavedSharing, TheSeedFixesEveryArrival) {
  NetworkOptions o = NetworkPreset("dc_10gbe");
  o.sharing = NetworkSharing::kInterleaved;
  const std::vector<Message> messages = SeededMix();
  NetworkModel a(o, 5, 3, 7), b(o, 5, 3, 7), c(o, 5, 3, 8);
  const std::vector<Duration> got = Arrivals(a, messages);
  EXPECT_EQ(got, Arrivals(b, messages));
  EXPECT_NE(got, Arrivals(c, messages));
  for (int s = 0; s < 3; ++s) EXPECT_EQ(a.shard_stats(s).nic_wait, b.shard_stats(s).nic_wait);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    EXPECT_GE(got[i], messages[i].at + o.latency + a.TransferTime(messages[i].bytes)) << i;
  }
}

// Zero bytes, or an infinite rate: the message arrives after the latency alone; the
// synchronous sends are refused, as under fair sharing.
TEST(InterleavedSharing, FreeMessagesAndSynchronousSends) {
  const Duration latency = microseconds(3);
  NetworkModel net(Interleaved(latency, 1e9, 100), 1, 1);
  EXPECT_EQ(Arrivals(net, {{nanoseconds(5), true, 0, 0, 0}}),
            (std::vector<Duration>{nanoseconds(5) + latency}));
  NetworkModel fast(Interleaved(latency, std::numeric_limits<double>::infinity(), 100), 2, 1);
  EXPECT_EQ(Arrivals(fast, AtOnceToOneShard(2, 1 << 20)),
            (std::vector<Duration>{latency, latency}));
  EXPECT_THROW(net.SendToShard(0, 0, 1000, Duration::zero()), InvariantError);
  EXPECT_THROW(net.SendToWorker(0, 0, 1000, Duration::zero()), InvariantError);
}

// ---- Interleaved chunks on a side faster than one flow ------------------------------

// Interleaved options with links of 1 byte per ns and shard NICs `ratio` times as fast.
NetworkOptions FasterShardNic(double ratio, int64_t chunk_bytes) {
  NetworkOptions o = Interleaved(Duration::zero(), 1e9, chunk_bytes);
  o.shard_nic_bandwidth = ratio * 1e9;
  return o;
}

// ∫ min(places, U(t)) dt in ns, U(t) the messages handed over and not yet arrived (no
// latency): what a side of `places` whole places moves at 1 byte per ns if it never
// leaves a place free while a message on it waits (each message is one flow: at most
// one place).
int64_t WorkConservingBytes(const std::vector<Message>& messages,
                            const std::vector<Duration>& arrivals, int places) {
  std::vector<std::pair<Duration, int>> steps;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    steps.emplace_back(messages[i].at, +1);
    steps.emplace_back(arrivals[i], -1);
  }
  std::sort(steps.begin(), steps.end());
  int64_t moved = 0;
  int on = 0;
  Duration last{};
  for (const auto& [t, d] : steps) {
    moved += std::min(on, places) * (t - last).count();
    on += d;
    last = t;
  }
  return moved;
}

// A shard NIC k times as fast as the links carries k chunks at once, each at the link's
// rate: k messages handed to it together all arrive after b / r, as k flows of the fair
// model do (and unlike FIFO's one after the other); 2k of them in two waves of k with
// whole-message chunks. The same holds for a worker's transmit side k times as fast as
// the shards' NICs, sending to k shards at once.
TEST(InterleavedFasterSide, KMessagesMoveAsKParallelFlows) {
  for (const int k : {2, 4}) {
    for (const int64_t chunk : {int64_t{100}, int64_t{1000}}) {
      for (uint64_t seed = 1; seed <= 5; ++seed) {
        NetworkModel net(FasterShardNic(k, chunk), 2 * k, 1, seed);
        NetworkOptions fair_options = FasterShardNic(k, chunk);
        fair_options.sharing = NetworkSharing::kFair;
        NetworkModel fair(fair_options, k, 1);
        const std::vector<Duration> parallel = Arrivals(fair, AtOnceToOneShard(k, 1000));
        EXPECT_EQ(parallel, std::vector<Duration>(static_cast<std::size_t>(k), nanoseconds(1000)));
        EXPECT_EQ(Arrivals(net, AtOnceToOneShard(k, 1000)), parallel) << k << " " << chunk;
        EXPECT_EQ(net.shard_stats(0).nic_wait, Duration::zero());
        NetworkModel waves(FasterShardNic(k, 1000), 2 * k, 1, seed);
        std::vector<Duration> got = Arrivals(waves, AtOnceToOneShard(2 * k, 1000));
        std::sort(got.begin(), got.end());
        std::vector<Duration> expected(static_cast<std::size_t>(k), nanoseconds(1000));
        expected.resize(static_cast<std::size_t>(2 * k), nanoseconds(2000));
        EXPECT_EQ(got, expected) << k << " " << seed;
      }
    }
    // A worker whose link is k times the shards' NICs: its transmit side holds k places.
    NetworkOptions o = Interleaved(Duration::zero(), k * 1e9, 100);
    o.shard_nic_bandwidth = 1e9;
    NetworkModel net(o, 1, k, 3);
    std::vector<Message> to_every_shard;
    for (int s = 0; s < k; ++s) to_every_shard.push_back({Duration::zero(), true, 0, s, 1000});
    EXPECT_EQ(Arrivals(net, to_every_shard),
              std::vector<Duration>(static_cast<std::size_t>(k), nanoseconds(1000)));
  }
}

// Work conservation on a side of k whole places: at every instant it moves min(k, the
// messages on it) flows' worth, so the bytes of staggered messages of mixed lengths
// equal ∫ min(k, U(t)) dt, for every chunk (one that divides nothing, and whole
// messages) and seed; the last one ends no earlier than (total bytes) / (k·r).
TEST(InterleavedFasterSide, ASideOfKPlacesIsWorkConserving) {
  const std::vector<Message> staggered = {
      {Duration::zero(), true, 0, 0, 3000}, {nanoseconds(100), true, 1, 0, 1000},
      {nanoseconds(200), true, 2, 0, 2500}, {nanoseconds(300), true, 3, 0, 500},
      {nanoseconds(350), true, 4, 0, 1700}, {nanoseconds(2000), true, 5, 0, 900}};
  int64_t total = 0;
  for (const Message& m : staggered) total += m.bytes;
  for (const int k : {2, 3}) {
    for (const int64_t chunk : {int64_t{70}, int64_t{300}, int64_t{5000}}) {
      for (uint64_t seed = 1; seed <= 5; ++seed) {
        NetworkModel net(FasterShardNic(k, chunk), 6, 1, seed);
        const std::vector<Duration> got = Arrivals(net, staggered);
        EXPECT_EQ(WorkConservingBytes(staggered, got, k), total)
            << k << " " << chunk << " " << seed;
        EXPECT_GE(*std::max_element(got.begin(), got.end()), nanoseconds(total / k));
        for (std::size_t i = 0; i < got.size(); ++i) {
          EXPECT_GE(got[i], staggered[i].at + nanoseconds(staggered[i].bytes)) << i;
        }
      }
    }
  }
}

// A ratio k that is not whole: floor(k) places at the flow's rate r and a fractional
// one that carries a chunk at r too and then rests, holding it for T / (k - floor(k)),
// so that it moves (k - floor(k))·r on average. At k = 1.5 with whole-message chunks of
// T = 1000 ns, six messages handed over together: the whole place carries one per T,
// the fractional one at 0 and 2T (held for 2T each time): arrivals T, T, 2T, 3T, 3T, 4T
// (6 messages in 4T: 1.5·r; one place would take 6T, two 3T).
TEST(InterleavedFasterSide, AFractionalPlaceCarriesItsShareOnAverage) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    NetworkModel net(FasterShardNic(1.5, 1000), 6, 1, seed);
    std::vector<Duration> got = Arrivals(net, AtOnceToOneShard(6, 1000));
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, (std::vector<Duration>{nanoseconds(1000), nanoseconds(1000), nanoseconds(2000),
                                          nanoseconds(3000), nanoseconds(3000), nanoseconds(4000)}))
        << seed;
  }
  // Small chunks: three messages of 1,200 bytes at k = 1.5 share 1.5·r while two or
  // more remain, then the last moves at r: with t2 and t3 the last two arrivals, the
  // side moved 1.5·t2 by t2 (to within a chunk, the fractional place's last one), and
  // the last message the rest, 3,600 − 1.5·t2, in t3 − t2.
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    NetworkModel net(FasterShardNic(1.5, 100), 3, 1, seed);
    std::vector<Duration> got = Arrivals(net, AtOnceToOneShard(3, 1200));
    std::sort(got.begin(), got.end());
    const double t2 = static_cast<double>(got[1].count()), t3 = static_cast<double>(got[2].count());
    EXPECT_NEAR(t3 + 0.5 * t2, 3600, 100) << seed;
    EXPECT_GE(got[0], nanoseconds(1200));
  }
  // 2.5 (25 Gbit/s behind 10 Gbit/s links): two whole places and half of one: five
  // whole-message chunks at once end at T, T, T (the third on the half place, which
  // rests until 2T), 2T, 2T.
  NetworkModel net(FasterShardNic(2.5, 1000), 5, 1, 1);
  std::vector<Duration> got = Arrivals(net, AtOnceToOneShard(5, 1000));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<Duration>{nanoseconds(1000), nanoseconds(1000), nanoseconds(1000),
                                        nanoseconds(2000), nanoseconds(2000)}));
  // A ratio that misses a whole number only by binary rounding (0.3 / 0.1) is that
  // number: three places, not two and a 0.99999... one.
  NetworkOptions decimal = Interleaved(Duration::zero(), 0.1, 1);
  decimal.shard_nic_bandwidth = 0.3;
  ASSERT_NE(decimal.shard_nic_bandwidth / decimal.link_bandwidth, 3.0);
  NetworkModel snapped(decimal, 6, 1, 1);
  std::vector<Duration> three = Arrivals(snapped, AtOnceToOneShard(6, 1));
  std::sort(three.begin(), three.end());
  const Duration t = snapped.TransferTime(1);
  EXPECT_EQ(three, (std::vector<Duration>{t, t, t, 2 * t, 2 * t, 2 * t}));
}

// Determinism and causality with faster sides both ways (a 2.5x shard NIC, and links
// 2.5x the NICs): the same options and seed give the same arrivals, another seed others,
// and no message arrives before latency + b / r. Equal rates given explicitly are the
// default's model, arrival for arrival.
TEST(InterleavedFasterSide, TheSeedFixesEveryArrival) {
  const std::vector<Message> messages = SeededMix();
  for (const double nic_gbps : {25.0, 4.0}) {
    NetworkOptions o = NetworkPreset("dc_10gbe");
    o.sharing = NetworkSharing::kInterleaved;
    o.shard_nic_bandwidth = nic_gbps * 1e9 / 8;
    NetworkModel a(o, 5, 3, 7), b(o, 5, 3, 7), c(o, 5, 3, 8);
    const std::vector<Duration> got = Arrivals(a, messages);
    EXPECT_EQ(got, Arrivals(b, messages)) << nic_gbps;
    EXPECT_NE(got, Arrivals(c, messages)) << nic_gbps;
    for (int s = 0; s < 3; ++s) EXPECT_EQ(a.shard_stats(s).nic_wait, b.shard_stats(s).nic_wait);
    for (std::size_t i = 0; i < messages.size(); ++i) {
      EXPECT_GE(got[i], messages[i].at + o.latency + a.TransferTime(messages[i].bytes)) << i;
    }
  }
  NetworkOptions same = NetworkPreset("dc_10gbe");
  same.sharing = NetworkSharing::kInterleaved;
  NetworkModel implicit(same, 5, 3, 7);
  same.shard_nic_bandwidth = same.link_bandwidth;
  NetworkModel explicit_nic(same, 5, 3, 7);
  EXPECT_EQ(Arrivals(implicit, messages), Arrivals(explicit_nic, messages));
}

TEST(InterleavedSharing, AChunkBelowOneByteIsRefused) {
  NetworkOptions o = Interleaved(Duration::zero(), 1e9, 0);
  try {
    o.Validate();
    ADD_FAILURE() << "a chunk of 0 bytes accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "network.chunk_kib");
  }
}

}  // namespace
}  // namespace asgd::sim
