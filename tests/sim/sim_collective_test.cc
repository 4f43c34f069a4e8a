// The simulated collective (sim/sim_collective.h): the same bits and byte counters as
// gloo's algorithms on the same vectors, and the exact virtual time of its schedules.
#include "sim/sim_collective.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "collective/collective.h"
#include "core/error.h"
#include "sim/network_model.h"
#include "sim/scheduler.h"

namespace asgd::sim {
namespace {

namespace col = ::asgd::collective;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// Values of very different magnitudes and both signs, so that the order of the additions
// shows in the rounding.
std::vector<std::vector<float>> RandomVectors(int ranks, std::size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> exponent(0.0f, 6.0f);
  std::uniform_int_distribution<int> sign(0, 1);
  std::vector<std::vector<float>> v(static_cast<std::size_t>(ranks), std::vector<float>(count));
  for (auto& x : v) {
    for (float& e : x) e = (sign(rng) ? 1.0f : -1.0f) * std::exp2(exponent(rng));
  }
  return v;
}

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float x : v) b.push_back(std::bit_cast<uint32_t>(x));
  return b;
}

struct Case {
  std::size_t count;
  col::ReduceOp op;
};

// Every case's vectors after gloo's allreduce (one thread per rank over loopback TCP), and
// each rank's counters.
struct GlooResult {
  std::vector<std::vector<std::vector<float>>> data;  // [case][rank]
  std::vector<col::CollectiveCounters> counters;      // [rank]
};

GlooResult RunGloo(col::Algorithm algorithm, int ranks, const std::vector<Case>& cases) {
  GlooResult result;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    result.data.push_back(RandomVectors(ranks, cases[c].count, 100 + c));
  }
  result.counters.resize(static_cast<std::size_t>(ranks));
  const auto rendezvous = col::NewInMemoryRendezvous();
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      col::CollectiveOptions o;
      o.rank = r;
      o.size = ranks;
      o.algorithm = algorithm;
      o.timeout = milliseconds(20000);
      const auto c = col::Connect(o, rendezvous);
      for (std::size_t k = 0; k < cases.size(); ++k) {
        c->Allreduce(result.data[k][static_cast<std::size_t>(r)], cases[k].op);
      }
      c->Barrier();
      result.counters[static_cast<std::size_t>(r)] = c->Counters();
    });
  }
  for (auto& t : threads) t.join();
  return result;
}

// The same on the simulated group: one task per rank.
GlooResult RunSim(col::Algorithm algorithm, int ranks, const std::vector<Case>& cases,
                  const NetworkOptions& network = {}) {
  GlooResult result;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    result.data.push_back(RandomVectors(ranks, cases[c].count, 100 + c));
  }
  result.counters.resize(static_cast<std::size_t>(ranks));
  Scheduler sched;
  SimCollectiveGroup group(&sched, network, ranks, algorithm);
  for (int r = 0; r < ranks; ++r) {
    sched.Spawn("rank", [&, r] {
      const auto c = group.Rank(r);
      for (std::size_t k = 0; k < cases.size(); ++k) {
        c->Allreduce(result.data[k][static_cast<std::size_t>(r)], cases[k].op);
      }
      c->Barrier();
      result.counters[static_cast<std::size_t>(r)] = c->Counters();
    });
  }
  sched.Run();
  EXPECT_EQ(sched.unfinished_tasks(), 0);
  return result;
}

class SimCollectiveVsGloo : public ::testing::TestWithParam<std::tuple<col::Algorithm, int>> {};

// Bit for bit: every rank's vector after the simulated allreduce equals gloo's, for sums,
// means and maxima, lengths below one chunk, across chunk and segment boundaries, several
// ring_chunked chunks and more ring segments than 2N; and the byte counters are the gloo
// path's.
TEST_P(SimCollectiveVsGloo, SameBitsAndBytes) {
  const auto [algorithm, ranks] = GetParam();
  const std::vector<Case> cases = {
      {1, col::ReduceOp::kSum},
      {7, col::ReduceOp::kSum},
      {1000, col::ReduceOp::kSum},
      {1000, col::ReduceOp::kMean},
      {5003, col::ReduceOp::kSum},
      {5003, col::ReduceOp::kMean},
      {777, col::ReduceOp::kMax},
      {300000, col::ReduceOp::kSum},
      // 6.4 MB: more than gloo's ring's 2N segments of at most 1 MiB for N <= 3.
      {1600000, col::ReduceOp::kSum},
  };
  const GlooResult gloo = RunGloo(algorithm, ranks, cases);
  const GlooResult sim = RunSim(algorithm, ranks, cases);
  for (std::size_t k = 0; k < cases.size(); ++k) {
    for (int r = 0; r < ranks; ++r) {
      const auto i = static_cast<std::size_t>(r);
      ASSERT_EQ(Bits(sim.data[k][i]), Bits(gloo.data[k][i]))
          << "case " << k << " (" << cases[k].count << " floats), rank " << r;
    }
  }
  for (int r = 0; r < ranks; ++r) {
    const auto i = static_cast<std::size_t>(r);
    EXPECT_EQ(sim.counters[i].bytes_sent, gloo.counters[i].bytes_sent) << "rank " << r;
    EXPECT_EQ(sim.counters[i].bytes_received, gloo.counters[i].bytes_received) << "rank " << r;
    EXPECT_EQ(sim.counters[i].allreduces, gloo.counters[i].allreduces);
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, SimCollectiveVsGloo,
                         ::testing::Combine(::testing::Values(col::Algorithm::kRing,
                                                              col::Algorithm::kRingChunked,
                                                              col::Algorithm::kHalvingDoubling),
                                            ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8)),
                         [](const auto& p) {
                           return std::string(col::AlgorithmName(std::get<0>(p.param))) + "_" +
                                  std::to_string(std::get<1>(p.param));
                         });

// The comparison above can fail: the order matters on these vectors. Summing the ranks in
// rank order gives other bits than gloo's ring for 3 ranks and more.
TEST(GlooOrderAllreduce, OrderMattersOnTheTestVectors) {
  for (int ranks : {3, 5, 8}) {
    auto v = RandomVectors(ranks, 1000, 7);
    std::vector<float> naive(1000, 0.0f);
    for (const auto& x : v) {
      for (std::size_t i = 0; i < x.size(); ++i) naive[i] += x[i];
    }
    std::vector<std::span<float>> spans(v.begin(), v.end());
    GlooOrderAllreduce(col::Algorithm::kRing, spans, col::ReduceOp::kSum);
    EXPECT_NE(Bits(v[0]), Bits(naive)) << ranks << " ranks";
    for (const auto& x : v) EXPECT_EQ(Bits(x), Bits(v[0]));  // every rank the same bits
  }
}

// The chains of the ring algorithms as their comments state them, one chunk at a time:
// chunk c of the ring starts at rank c−1 and goes down the ranks to c; chunk k of
// ring_chunked starts at rank ⌊k/2⌋ and goes up to ⌊k/2⌋−1. Each hop is gloo's
// sum(local, received) or max(local, received).
std::vector<float> ChainReference(col::Algorithm algorithm,
                                  const std::vector<std::vector<float>>& v, col::ReduceOp op) {
  const std::size_t n = v.size(), count = v[0].size();
  std::vector<float> out(count);
  auto fold = [&](std::size_t begin, std::size_t end, std::size_t start, bool down) {
    for (std::size_t i = begin; i < std::min(end, count); ++i) {
      std::size_t r = start;
      float acc = v[r][i];
      for (std::size_t hop = 1; hop < n; ++hop) {
        r = down ? (r + n - 1) % n : (r + 1) % n;
        acc = op == col::ReduceOp::kMax ? std::max(v[r][i], acc) : v[r][i] + acc;
      }
      out[i] = acc;
    }
  };
  if (algorithm == col::Algorithm::kRing) {
    const std::size_t chunk =
        col::GlooRingSegments(static_cast<int>(n), count).chunk_bytes / sizeof(float);
    for (std::size_t c = 0; c < n; ++c) fold(c * chunk, (c + 1) * chunk, (c + n - 1) % n, true);
  } else {
    const std::size_t chunk = std::max<std::size_t>(256, (count + 2 * n - 1) / (2 * n));
    for (std::size_t k = 0; k < 2 * n; ++k) fold(k * chunk, (k + 1) * chunk, k / 2, false);
  }
  return out;
}

// The ring algorithms' one result, computed by two sweeps over the ranks, folds every
// chunk in its chain's order, at sizes gloo cannot be run at here (up to 1,024 ranks, where
// most of the ring's chunks are a segment or empty), for sums and maxima; GlooOrderReduce
// leaves the ranks' vectors alone and GlooOrderAllreduce gives every rank that result.
TEST(GlooOrderReduce, FoldsEveryChunkInItsChainsOrder) {
  for (col::Algorithm algorithm : {col::Algorithm::kRing, col::Algorithm::kRingChunked}) {
    for (const auto& [ranks, count] : std::vector<std::pair<int, std::size_t>>{{2, 1},
                                                                               {3, 1000},
                                                                               {9, 300000},
                                                                               {37, 100003},
                                                                               {256, 70001},
                                                                               {1024, 3000},
                                                                               {1024, 40000}}) {
      for (col::ReduceOp op : {col::ReduceOp::kSum, col::ReduceOp::kMax}) {
        auto v = RandomVectors(ranks, count, 11 + static_cast<uint64_t>(ranks));
        const std::vector<float> want = ChainReference(algorithm, v, op);
        const auto before = v;
        std::vector<std::span<float>> spans(v.begin(), v.end());
        std::vector<float> out(count);
        GlooOrderReduce(algorithm, spans, op, out);
        const std::string what = std::string(col::AlgorithmName(algorithm)) + ", " +
                                 std::to_string(ranks) + " ranks, " + std::to_string(count) +
                                 (op == col::ReduceOp::kMax ? " floats, max" : " floats, sum");
        ASSERT_EQ(Bits(out), Bits(want)) << what;
        ASSERT_EQ(v, before) << what;
        GlooOrderAllreduce(algorithm, spans, op);
        for (const auto& x : v) ASSERT_EQ(Bits(x), Bits(want)) << what;
      }
    }
  }
}

// 1 Gbyte/s of payload and 10 µs of latency.
NetworkOptions KnownLink() {
  NetworkOptions n;
  n.latency = microseconds(10);
  n.link_bandwidth = 1e9;
  n.goodput = 1.0;
  return n;
}

// Ring on N ranks: 2(N−1) steps of n/N floats, each L + bytes/rate: with n = 4000 floats
// on 4 ranks, 6 steps of 10 µs + 4000 B / 1 GB/s = 14 µs, 84 µs in all.
TEST(SimCollectiveTime, RingIsTwoNMinusOneStepsOfOneNthOnEveryLink) {
  EXPECT_EQ(AllreduceTime(col::Algorithm::kRing, 4, 4000, microseconds(10), 1e9), microseconds(84));
  EXPECT_EQ(AllreduceTime(col::Algorithm::kRingChunked, 4, 4000, microseconds(10), 1e9),
            microseconds(84));
  // Halving-doubling on 4 ranks: halves of 2000 and 1000 floats, there and back:
  // 2·(10 + 8) + 2·(10 + 4) = 64 µs.
  EXPECT_EQ(AllreduceTime(col::Algorithm::kHalvingDoubling, 4, 4000, microseconds(10), 1e9),
            microseconds(64));
  // 5 = 4 + 1: the block of one sends its whole vector up and gets it back: + 2·(10 + 16).
  EXPECT_EQ(AllreduceTime(col::Algorithm::kHalvingDoubling, 5, 4000, microseconds(10), 1e9),
            microseconds(64 + 52));
  EXPECT_EQ(AllreduceTime(col::Algorithm::kRing, 1, 4000, microseconds(10), 1e9), Duration{});
}

// The ring's step is gloo's chunk of segments, not n/N: 5,000,003 floats on 4 ranks are 20
// segments of 1,000,004 bytes (20,000,012 / 20 rounded up to whole floats), chunks of
// 5,000,020 bytes where ⌈n/4⌉·4 is 5,000,004: with no latency at 1 GB/s, 6 steps of
// 5,000,020 ns. A vector shorter than a chunk (1 float on 4 ranks: chunks of 2 segments of
// 4 bytes) is sent whole in each step.
// halving_doubling reduces a vector longer than 256 KiB as pieces of 256 KiB, one after the
// other (collective::AllreducePieceFloats): its time is its pieces'. ring_chunked sends it
// whole: one schedule of 2(N-1) steps.
TEST(SimCollectiveTime, HalvingDoublingTakesItsPiecesInTurn) {
  const auto hd = col::Algorithm::kHalvingDoubling;
  const std::size_t piece = col::AllreducePieceFloats(hd, 4);
  ASSERT_EQ(piece, 65536u);
  EXPECT_EQ(AllreduceTime(hd, 4, 3 * piece + 100, microseconds(10), 1e9),
            3 * AllreduceTime(hd, 4, piece, microseconds(10), 1e9) +
                AllreduceTime(hd, 4, 100, microseconds(10), 1e9));
  EXPECT_EQ(col::AllreducePieceFloats(col::Algorithm::kRingChunked, 4), 0u);
  // 6 steps of 10 µs + 75,000 floats (300 KB) at 1 GB/s.
  EXPECT_EQ(AllreduceTime(col::Algorithm::kRingChunked, 4, 300000, microseconds(10), 1e9),
            microseconds(6 * 310));
}

TEST(SimCollectiveTime, RingStepIsGloosChunk) {
  EXPECT_EQ(AllreduceTime(col::Algorithm::kRing, 4, 5'000'003, Duration{}, 1e9),
            std::chrono::nanoseconds(6 * 5'000'020));
  EXPECT_EQ(AllreduceTime(col::Algorithm::kRing, 4, 1, Duration{}, 1e9),
            std::chrono::nanoseconds(6 * 4));
}

// A straggler holds the synchronous round back: every rank resumes at the slowest one's
// arrival plus the collective's cost, and the others' wait is counted.
TEST(SimCollectiveTime, StragglerHoldsTheRoundBack) {
  Scheduler sched;
  SimCollectiveGroup group(&sched, KnownLink(), 4, col::Algorithm::kRing);
  std::vector<Duration> resumed(4);
  for (int r = 0; r < 4; ++r) {
    sched.Spawn("rank", [&, r] {
      const auto c = group.Rank(r);
      std::vector<float> v(4000, 1.0f);
      sched.Sleep(r == 2 ? milliseconds(5) : milliseconds(1));  // rank 2 straggles
      c->Allreduce(v, col::ReduceOp::kSum);
      resumed[static_cast<std::size_t>(r)] = sched.Now();
      EXPECT_EQ(v[0], 4.0f);
    });
  }
  sched.Run();
  for (Duration t : resumed) EXPECT_EQ(t, milliseconds(5) + microseconds(84));
  EXPECT_EQ(group.stats().operations, 1);
  EXPECT_EQ(group.stats().time, microseconds(84));
  EXPECT_EQ(group.stats().waited, 3 * milliseconds(4));
}

// Point to point: a Send waits for its Recv; the message books both links and arrives a
// latency after its bytes left.
TEST(SimCollectiveTime, SendWaitsForTheReceiveAndArrivesAfterTheLink) {
  Scheduler sched;
  SimCollectiveGroup group(&sched, KnownLink(), 3, col::Algorithm::kRing);
  Duration sent{}, received{};
  std::vector<float> got(1000, 0.0f);
  sched.Spawn("sender", [&] {
    const auto c = group.Rank(0);
    std::vector<float> v(1000, 2.5f);
    c->Send(1, v, 3);
    sent = sched.Now();
  });
  sched.Spawn("receiver", [&] {
    const auto c = group.Rank(1);
    sched.Sleep(microseconds(100));
    c->Recv(0, got, 3);
    received = sched.Now();
    EXPECT_EQ(c->Counters().bytes_received, 4000u);
  });
  sched.Run();
  EXPECT_EQ(sent, microseconds(104));
  EXPECT_EQ(received, microseconds(114));
  EXPECT_EQ(got, std::vector<float>(1000, 2.5f));
}

// The transport's CPU (ChargeHostCpu): every step of an allreduce or barrier takes each
// rank's send charge and, after the wire, each rank's receive charge, on the pool's cores:
// 2·⌈N/C⌉·c(b) + L + b / r per step. Ring on 4 ranks, 4000 floats (the first test's 6
// steps of 1,000 floats, 14 µs each) with c = 5 µs + 4,000 B × 1 ns = 9 µs: on 2 cores
// 6·(14 + 2·2·9) = 300 µs; with a machine per rank (0 cores) 6·(14 + 2·9) = 192 µs. A
// point-to-point message carries one charge at each end.
TEST(SimCollectiveTime, TheTransportsCpuIsChargedPerStepOnTheCores) {
  TransportCpu cpu;
  cpu.per_message = microseconds(5);
  cpu.ns_per_byte = 1.0;
  const auto allreduce_end = [&](int cores_n, col::Algorithm algorithm, const TransportCpu& c) {
    Scheduler sched;
    CorePool cores(cores_n);
    SimCollectiveGroup group(&sched, KnownLink(), 4, algorithm);
    group.ChargeHostCpu(&cores, c);
    std::vector<Duration> resumed(4);
    for (int r = 0; r < 4; ++r) {
      sched.Spawn("rank", [&, r] {
        const auto h = group.Rank(r);
        std::vector<float> v(4000, 1.0f);
        h->Allreduce(v, col::ReduceOp::kSum);
        EXPECT_EQ(v[0], 4.0f);
        resumed[static_cast<std::size_t>(r)] = sched.Now();
        h->Barrier();
      });
    }
    sched.Run();
    for (const Duration t : resumed) EXPECT_EQ(t, resumed[0]);
    return std::pair{resumed[0], sched.Now() - resumed[0]};
  };
  EXPECT_EQ(allreduce_end(2, col::Algorithm::kRing, cpu).first, microseconds(300));
  EXPECT_EQ(allreduce_end(0, col::Algorithm::kRing, cpu).first, microseconds(192));
  EXPECT_EQ(allreduce_end(2, col::Algorithm::kRingChunked, cpu).first, microseconds(300));
  // Halving-doubling: steps of 8,000, 8,000, 4,000 and 4,000 bytes (64 µs of wire) and
  // charges of 13, 13, 9 and 9 µs, four each on 2 cores: 64 + 2·2·(13 + 13 + 9 + 9).
  EXPECT_EQ(allreduce_end(2, col::Algorithm::kHalvingDoubling, cpu).first,
            microseconds(64 + 4 * 44));
  // The barrier: 2·⌈log₂4⌉ = 4 steps of 0 bytes, each 10 µs + 2·2·5 µs.
  EXPECT_EQ(allreduce_end(2, col::Algorithm::kRing, cpu).second, microseconds(4 * 30));
  // No charge: the closed forms, exactly.
  EXPECT_EQ(allreduce_end(2, col::Algorithm::kRing, TransportCpu{}).first, microseconds(84));
  EXPECT_EQ(allreduce_end(2, col::Algorithm::kRing, TransportCpu{}).second, microseconds(40));

  // A send of 1,000 floats (c = 5 + 4 µs): the sender's charge, 4 µs on the wire (it
  // returns at 100 + 9 + 4), the latency, the receiver's charge (113 + 10 + 9).
  Scheduler sched;
  CorePool cores(0);
  SimCollectiveGroup group(&sched, KnownLink(), 2, col::Algorithm::kRing);
  group.ChargeHostCpu(&cores, cpu);
  Duration sent{}, received{};
  sched.Spawn("sender", [&] {
    const auto h = group.Rank(0);
    std::vector<float> v(1000, 2.5f);
    sched.Sleep(microseconds(100));
    h->Send(1, v, 3);
    sent = sched.Now();
  });
  sched.Spawn("receiver", [&] {
    const auto h = group.Rank(1);
    std::vector<float> got(1000);
    h->Recv(0, got, 3);
    received = sched.Now();
  });
  sched.Run();
  EXPECT_EQ(sent, microseconds(113));
  EXPECT_EQ(received, microseconds(132));
}

// Untimed handles: an operation every rank joins through one takes no virtual time, but
// still waits for the last rank and reduces as any other; a rank that joins it through a
// timed handle while the others use untimed ones fails with a CollectiveError, and an
// untimed handle sends nothing.
TEST(SimCollectiveTime, UntimedHandlesTakeNoTime) {
  Scheduler sched;
  SimCollectiveGroup group(&sched, KnownLink(), 4, col::Algorithm::kRing);
  std::vector<Duration> resumed(4);
  for (int r = 0; r < 4; ++r) {
    sched.Spawn("rank", [&, r] {
      const auto timed = group.Rank(r);
      const auto untimed = group.Rank(r, false);
      std::vector<float> v(4000, 1.0f);
      sched.Sleep(r == 2 ? milliseconds(5) : milliseconds(1));
      untimed->Allreduce(v, col::ReduceOp::kSum);
      resumed[static_cast<std::size_t>(r)] = sched.Now();
      EXPECT_EQ(v[0], 4.0f);
      timed->Allreduce(v, col::ReduceOp::kSum);  // 84 µs (the test above)
      untimed->Barrier();
      EXPECT_EQ(sched.Now(), milliseconds(5) + microseconds(84));
      EXPECT_EQ(v[3999], 16.0f);
      EXPECT_THROW(untimed->Send((r + 1) % 4, v, 1), col::CollectiveError);
    });
  }
  sched.Run();
  EXPECT_EQ(sched.unfinished_tasks(), 0);
  for (Duration t : resumed) EXPECT_EQ(t, milliseconds(5));
  EXPECT_EQ(group.stats().operations, 3);
  EXPECT_EQ(group.stats().time, microseconds(84));
  EXPECT_EQ(group.stats().waited, 3 * milliseconds(4));
}

// AllreduceView: the bits and bytes of Allreduce; on ring and ring_chunked the one result
// is read where the group keeps it (every rank sees the same address) and the ranks'
// vectors are left as they were; halving_doubling reduces in place and returns the vector.
TEST(SimCollective, AllreduceViewReadsTheOneResult) {
  for (const col::Algorithm algorithm :
       {col::Algorithm::kRing, col::Algorithm::kRingChunked, col::Algorithm::kHalvingDoubling}) {
    const std::vector<std::vector<float>> start = RandomVectors(5, 3000, 7);
    std::vector<std::vector<float>> reduced = start, viewed = start;
    std::vector<std::vector<float>> seen(5);
    std::vector<const float*> where(5);
    std::vector<col::CollectiveCounters> by_allreduce(5), by_view(5);
    Scheduler sched;
    SimCollectiveGroup group(&sched, KnownLink(), 5, algorithm);
    for (int r = 0; r < 5; ++r) {
      sched.Spawn("rank", [&, r] {
        const auto ri = static_cast<std::size_t>(r);
        const auto a = group.Rank(r);
        a->Allreduce(reduced[ri]);
        by_allreduce[ri] = a->Counters();
        const auto b = group.Rank(r);
        const std::span<const float> result = b->AllreduceView(viewed[ri]);
        seen[ri].assign(result.begin(), result.end());
        where[ri] = result.data();
        by_view[ri] = b->Counters();
      });
    }
    sched.Run();
    ASSERT_EQ(sched.unfinished_tasks(), 0);
    const bool one_result = ReducesToOneResult(algorithm);
    for (std::size_t r = 0; r < 5; ++r) {
      EXPECT_EQ(Bits(seen[r]), Bits(reduced[r])) << col::AlgorithmName(algorithm) << " rank " << r;
      EXPECT_EQ(by_view[r].bytes_sent, by_allreduce[r].bytes_sent);
      EXPECT_EQ(by_view[r].bytes_received, by_allreduce[r].bytes_received);
      EXPECT_EQ(by_view[r].allreduces, 1u);
      if (one_result) {
        EXPECT_EQ(Bits(viewed[r]), Bits(start[r]));  // not copied into
        EXPECT_EQ(where[r], where[0]);
      } else {
        EXPECT_EQ(where[r], viewed[r].data());
      }
    }
  }
}

TEST(SimCollective, RanksMustJoinThroughHandlesAlike) {
  Scheduler sched;
  SimCollectiveGroup group(&sched, {}, 2, col::Algorithm::kRing);
  std::vector<std::string> errors;
  for (int r = 0; r < 2; ++r) {
    sched.Spawn("rank", [&, r] {
      std::vector<float> v(10, 1.0f);
      try {
        group.Rank(r, r == 0)->Allreduce(v);
      } catch (const col::CollectiveError& e) {
        errors.push_back(e.what());
      }
    });
  }
  sched.Run();
  ASSERT_EQ(errors.size(), 1u);  // the second to arrive
  EXPECT_NE(errors[0].find("every rank must use handles alike"), std::string::npos) << errors[0];
  group.Shutdown();  // the first one waits for a peer that left
  sched.Run();
  EXPECT_EQ(sched.unfinished_tasks(), 0);
  EXPECT_EQ(errors.size(), 2u);
}

// A rank that never comes: Shutdown fails the blocked ones with one CollectiveError.
TEST(SimCollective, ShutdownFailsTheWaitingRanks) {
  Scheduler sched;
  SimCollectiveGroup group(&sched, {}, 3, col::Algorithm::kRing);
  int failed = 0;
  for (int r = 0; r < 2; ++r) {
    sched.Spawn("rank", [&, r] {
      const auto c = group.Rank(r);
      std::vector<float> v(10, 1.0f);
      try {
        c->Allreduce(v);
      } catch (const col::CollectiveError& e) {
        ++failed;
        EXPECT_EQ(e.operation().rfind("allreduce", 0), 0u) << e.what();
      }
    });
  }
  sched.Run();
  EXPECT_EQ(sched.unfinished_tasks(), 2);
  group.Shutdown();
  sched.Run();
  EXPECT_EQ(sched.unfinished_tasks(), 0);
  EXPECT_EQ(failed, 2);
}

}  // namespace
}  // namespace asgd::sim
