// The collective layer with N ranks as threads of this process, over gloo's TCP transport
// on 127.0.0.1 with an in-memory rendezvous; and with two processes through the file
// store (collective_file_peer).

#include "collective/collective.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "tests/collective/run_ranks.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_util.h"

namespace asgd::collective {
namespace {

using std::chrono::milliseconds;

using testing::RunRanks;

CollectiveOptions Options(int rank, int size, Algorithm algorithm = Algorithm::kRing,
                          milliseconds timeout = milliseconds(10000)) {
  return testing::RankOptions(rank, size, algorithm, timeout);
}

class AllreduceTest : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

TEST_P(AllreduceTest, SumOfSmallIntegersIsExact) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  // Lengths: one element, an odd length below every chunk size, and one spanning many
  // chunks with a ragged end.
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{3001}}) {
    RunRanks(size, algorithm, [&, n](Collective& c) {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((c.rank() + 1) * (i % 13));
      c.Allreduce(v, ReduceOp::kSum);
      const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(v[i], ranks_sum * static_cast<float>(i % 13)) << "element " << i;
      }
      // Same buffer again (the cached gloo algorithm is reused).
      c.Allreduce(v, ReduceOp::kSum);
      ASSERT_EQ(v[n - 1], size * ranks_sum * static_cast<float>((n - 1) % 13));
    });
  }
}

TEST_P(AllreduceTest, MeanOfSmallIntegersIsExact) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  RunRanks(size, algorithm, [&](Collective& c) {
    // Element i of rank r holds i + N*r: the sum over ranks is N*i + N*N(N-1)/2, so the
    // mean is the integer i + N(N-1)/2.
    std::vector<float> v(100);
    for (std::size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<float>(static_cast<int>(i) + size * c.rank());
    }
    c.Allreduce(v, ReduceOp::kMean);
    for (std::size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(v[i], static_cast<float>(static_cast<int>(i) + size * (size - 1) / 2));
    }
  });
}

TEST_P(AllreduceTest, MaxIsElementwiseAndSeparateFromSum) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  RunRanks(size, algorithm, [&](Collective& c) {
    // Element i's largest value sits on rank i mod N; the other ranks hold negatives.
    for (std::size_t n : {std::size_t{3}, std::size_t{1001}}) {
      std::vector<float> v(n), w(n);
      for (std::size_t i = 0; i < n; ++i) {
        const bool top = static_cast<int>(i % static_cast<std::size_t>(size)) == c.rank();
        v[i] = top ? static_cast<float>(i) + 0.5f : -static_cast<float>(c.rank()) - 1.0f;
        w[i] = 1.0f;
      }
      c.Allreduce(v, ReduceOp::kMax);
      // The same length summed next: a sum must not reuse the max's algorithm, or the
      // other way round.
      c.Allreduce(w, ReduceOp::kSum);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(v[i], static_cast<float>(i) + 0.5f) << "element " << i;
        ASSERT_EQ(w[i], static_cast<float>(size)) << "element " << i;
      }
    }
  });
}

TEST_P(AllreduceTest, CountersFollowTheAlgorithmsSchedule) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  const std::size_t n = 4096;
  RunRanks(size, algorithm, [&](Collective& c) {
    std::vector<float> v(n, 1.0f);
    c.Allreduce(v);
    c.Allreduce(v);
    const auto counters = c.Counters();
    const Traffic one = ExpectedAllreduceBytes(algorithm, c.rank(), size, n);
    EXPECT_EQ(counters.bytes_sent, 2 * one.sent);
    EXPECT_EQ(counters.bytes_received, 2 * one.received);
    EXPECT_EQ(counters.allreduces, 2u);
  });
}

// A run's round boundaries allreduce fresh vectors, which each rank's allocator places
// where it likes: rank 0 here reuses one vector while the other ranks allocate a new one
// (while the old one is still alive, so at a new address) for every call. Every rank
// must still meet its peers in the same operation, with the sums right, and then go on
// with a vector of another length and the first length again.
TEST_P(AllreduceTest, FreshVectorsAtDifferentAddressesOnEachRank) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  RunRanks(size, algorithm, [&](Collective& c) {
    constexpr std::size_t kN = 1000;
    const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
    std::vector<float> reused(kN);
    std::vector<std::vector<float>> kept;
    for (int call = 0; call < 6; ++call) {
      std::vector<float>* v = &reused;
      if (c.rank() != 0) {
        kept.emplace_back(kN);
        v = &kept.back();
      }
      std::fill(v->begin(), v->end(), static_cast<float>(c.rank() + 1));
      c.Allreduce(*v, ReduceOp::kSum);
      for (std::size_t i = 0; i < kN; ++i) ASSERT_EQ((*v)[i], ranks_sum) << "call " << call;
      std::vector<float> other(static_cast<std::size_t>(7 + call), static_cast<float>(c.rank()));
      c.Allreduce(other, ReduceOp::kSum);
      ASSERT_EQ(other.back(), static_cast<float>(size * (size - 1) / 2)) << "call " << call;
    }
  });
}

// A bound vector (Collective::Bind) is reduced in place, round after round, and equals
// what the unbound path gives; a vector of the same length that is not the bound one, a
// bound vector used with another op, and a rebinding after the vector moved still meet
// their peers with the right sums.
TEST_P(AllreduceTest, BoundVectorsReduceInPlaceAndOthersStillWork) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  RunRanks(size, algorithm, [&](Collective& c) {
    constexpr std::size_t kN = 3001;
    const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
    std::vector<float> bound(kN), other(kN);
    c.Bind(bound, ReduceOp::kMean);
    c.Bind(other, ReduceOp::kSum);  // a second binding of the same length
    for (int round = 0; round < 3; ++round) {
      for (std::size_t i = 0; i < kN; ++i) {
        bound[i] = static_cast<float>(static_cast<int>(i % 7) + size * c.rank());
      }
      const float* where = bound.data();
      c.Allreduce(bound, ReduceOp::kMean);
      ASSERT_EQ(bound.data(), where);
      for (std::size_t i = 0; i < kN; ++i) {
        ASSERT_EQ(bound[i], static_cast<float>(static_cast<int>(i % 7) + size * (size - 1) / 2))
            << "round " << round << " element " << i;
      }
      std::fill(other.begin(), other.end(), static_cast<float>(c.rank() + 1));
      c.Allreduce(other, ReduceOp::kSum);
      ASSERT_EQ(other.front(), ranks_sum);
      ASSERT_EQ(other.back(), ranks_sum);
      // The bound vector with an op it was not bound for, and a fresh vector of its length.
      std::fill(bound.begin(), bound.end(), static_cast<float>(c.rank()));
      c.Allreduce(bound, ReduceOp::kMax);
      ASSERT_EQ(bound[kN / 2], static_cast<float>(size - 1));
      std::vector<float> fresh(kN, 1.0f);
      c.Allreduce(fresh, ReduceOp::kMean);
      ASSERT_EQ(fresh[kN - 1], 1.0f);
    }
    // The vector moves (a reallocation): bound again at its new address.
    bound = std::vector<float>(kN, static_cast<float>(c.rank() + 1));
    c.Bind(bound, ReduceOp::kSum);
    c.Allreduce(bound, ReduceOp::kSum);
    ASSERT_EQ(bound[kN - 1], ranks_sum);
  });
}

// ring_chunked and halving_doubling reduce vectors up to 256 KiB on the synchronous pairs
// and larger ones on the asynchronous pairs (gloo_collective.cc): calls on either side of
// the limit, bound and not, interleaved, meet their peers with exact sums.
TEST_P(AllreduceTest, VectorsEitherSideOfTheSynchronousLimitInterleave) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  RunRanks(size, algorithm, [&](Collective& c) {
    constexpr std::size_t kLimit = (std::size_t{256} << 10) / sizeof(float);
    const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
    std::vector<float> at_limit(kLimit), above(kLimit + 1), small(1000);
    c.Bind(at_limit);
    for (int round = 0; round < 2; ++round) {
      for (std::vector<float>* v : {&above, &small, &at_limit, &above}) {
        std::fill(v->begin(), v->end(), static_cast<float>(c.rank() + 1));
        c.Allreduce(*v, ReduceOp::kSum);
        ASSERT_EQ(v->front(), ranks_sum) << v->size();
        ASSERT_EQ(v->back(), ranks_sum) << v->size();
      }
    }
  });
}

// More lengths than the collective keeps gloo objects for (four): every call evicts an
// object, possibly before its peers' last notifications to it were read.
TEST_P(AllreduceTest, EvictedObjectsLeaveNoMessageBehind) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  RunRanks(size, algorithm, [&](Collective& c) {
    const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
    for (int round = 0; round < 20; ++round) {
      for (std::size_t n : {std::size_t{300}, std::size_t{301}, std::size_t{3000},
                            std::size_t{3001}, std::size_t{30000}, std::size_t{30001}}) {
        std::vector<float> v(n, static_cast<float>(c.rank() + 1));
        c.Allreduce(v, ReduceOp::kSum);
        ASSERT_EQ(v.front(), ranks_sum) << n;
        ASSERT_EQ(v.back(), ranks_sum) << n;
      }
    }
  });
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<Algorithm, int>>& info) {
  return std::string(AlgorithmName(std::get<0>(info.param))) + "_" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AlgorithmsAndSizes, AllreduceTest,
                         ::testing::Combine(::testing::Values(Algorithm::kRing,
                                                              Algorithm::kRingChunked,
                                                              Algorithm::kHalvingDoubling),
                                            ::testing::Range(1, 6)),
                         ParamName);

// The closed form the issue states: a ring allreduce moves 2(N-1)/N x the vector's bytes
// per rank (exactly, when the vector splits evenly into 2N segments of at most 1 MiB).
TEST(AllreduceBytes, RingMovesTwoTimesNMinusOneOverNOfTheVector) {
  for (int size = 2; size <= 5; ++size) {
    const std::size_t n = 2 * static_cast<std::size_t>(size) * 1000;  // 2N segments of 1000
    const uint64_t bytes = n * sizeof(float);
    for (int rank = 0; rank < size; ++rank) {
      const Traffic t = ExpectedAllreduceBytes(Algorithm::kRing, rank, size, n);
      EXPECT_EQ(t.sent, 2 * (size - 1) * bytes / size) << size << " ranks, rank " << rank;
      EXPECT_EQ(t.received, t.sent);
      const Traffic c = ExpectedAllreduceBytes(Algorithm::kRingChunked, rank, size, n);
      EXPECT_EQ(c.sent, 2 * (size - 1) * bytes / size);
    }
  }
  EXPECT_EQ(ExpectedAllreduceBytes(Algorithm::kRing, 0, 1, 100).sent, 0u);
}

// Above 2N MiB gloo's ring cuts the vector into S = roundUp(ceil(bytes / 1 MiB), N)
// segments of roundUp(ceil(bytes / S), 4) bytes, S/N to a rank's chunk, and sends S - S/N
// of them per phase: every segment but its own chunk's (reduce-scatter) and its left
// neighbour's (allgather). Hand-derived from gloo/allreduce.cc; ring_wire_bytes_test.cc
// checks the same schedule against the bytes on the sockets.
TEST(AllreduceBytes, RingAboveTwoNMiBSendsTwiceTheVectorLessTwoChunks) {
  // N = 2, 16 MiB: 16 segments of 1 MiB, 8 per rank; 8 sent per phase.
  for (int rank = 0; rank < 2; ++rank) {
    const Traffic t = ExpectedAllreduceBytes(Algorithm::kRing, rank, 2, 4u << 20);
    EXPECT_EQ(t.sent, 16u << 20);
    EXPECT_EQ(t.received, 16u << 20);
  }
  // N = 2, 64 MiB: 64 segments of 1 MiB, 32 sent per phase: the vector once.
  EXPECT_EQ(ExpectedAllreduceBytes(Algorithm::kRing, 0, 2, 16u << 20).sent, 64u << 20);
  // N = 3, 16 MiB = 16,777,216 bytes: S = 18, segments of 932,068 bytes, chunks of
  // 5,592,408, 5,592,408 and 5,592,400 bytes; rank r sends 2 x 16 MiB less chunks r and r-1.
  const uint64_t two = 2 * (16u << 20);
  EXPECT_EQ(ExpectedAllreduceBytes(Algorithm::kRing, 0, 3, 4u << 20).sent,
            two - 5'592'408 - 5'592'400);
  EXPECT_EQ(ExpectedAllreduceBytes(Algorithm::kRing, 1, 3, 4u << 20).sent,
            two - 5'592'408 - 5'592'408);
  EXPECT_EQ(ExpectedAllreduceBytes(Algorithm::kRing, 2, 3, 4u << 20).sent,
            two - 5'592'400 - 5'592'408);
  // Each rank receives what its right neighbour sends.
  EXPECT_EQ(ExpectedAllreduceBytes(Algorithm::kRing, 0, 3, 4u << 20).received,
            two - 5'592'408 - 5'592'408);
  // N = 4, 5,000,003 floats = 20,000,012 bytes: S = 20, segments of 1,000,004 bytes
  // (rounded up from 1,000,000.6), chunks of 5,000,020 bytes, the last 4,999,952.
  const uint64_t v = 20'000'012;
  EXPECT_EQ(ExpectedAllreduceBytes(Algorithm::kRing, 0, 4, 5'000'003).sent,
            2 * v - 5'000'020 - 4'999'952);
  EXPECT_EQ(ExpectedAllreduceBytes(Algorithm::kRing, 1, 4, 5'000'003).sent, 2 * v - 2 * 5'000'020);
  EXPECT_EQ(ExpectedAllreduceBytes(Algorithm::kRing, 3, 4, 5'000'003).sent,
            2 * v - 4'999'952 - 5'000'020);
}

TEST(Collective, BroadcastFromEveryRoot) {
  for (int size : {1, 2, 3, 4}) {
    RunRanks(size, Algorithm::kRing, [&](Collective& c) {
      for (int root = 0; root < size; ++root) {
        std::vector<float> v(257, static_cast<float>(c.rank()));
        if (c.rank() == root) {
          for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) + 0.5f;
        }
        c.Broadcast(v, root);
        for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<float>(i) + 0.5f);
      }
      // Each rank was root once (sent to N-1 peers) and received from the N-1 others.
      const auto counters = c.Counters();
      EXPECT_EQ(counters.bytes_sent, uint64_t(size - 1) * 257 * 4);
      EXPECT_EQ(counters.bytes_received, uint64_t(size - 1) * 257 * 4);
    });
  }
}

TEST(Collective, BarrierWaitsForEveryRank) {
  const int size = 3;
  std::mutex mu;
  int arrived = 0;
  RunRanks(size, Algorithm::kRing, [&](Collective& c) {
    if (c.rank() == 2) std::this_thread::sleep_for(milliseconds(200));
    {
      std::lock_guard<std::mutex> lock(mu);
      ++arrived;
    }
    c.Barrier();
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(arrived, size) << "rank " << c.rank() << " left the barrier early";
  });
}

TEST(Collective, SendRecvAroundARingWithTags) {
  const int size = 4;
  RunRanks(size, Algorithm::kRing, [&](Collective& c) {
    const int right = (c.rank() + 1) % size;
    const int left = (c.rank() + size - 1) % size;
    std::vector<float> out(33, static_cast<float>(c.rank()));
    std::vector<float> out2(5, static_cast<float>(100 + c.rank()));
    std::vector<float> in(33), in2(5);
    // Send returns once the peer has posted the matching Recv, so the even ranks send
    // first and the odd ones receive first (in the same tag order) to avoid a deadlock.
    if (c.rank() % 2 == 0) {
      c.Send(right, out, 1);
      c.Send(right, out2, 2);
      c.Recv(left, in, 1);
      c.Recv(left, in2, 2);
    } else {
      c.Recv(left, in, 1);
      c.Recv(left, in2, 2);
      c.Send(right, out, 1);
      c.Send(right, out2, 2);
    }
    for (float x : in) ASSERT_EQ(x, static_cast<float>(left));
    for (float x : in2) ASSERT_EQ(x, static_cast<float>(100 + left));
    const auto counters = c.Counters();
    EXPECT_EQ(counters.bytes_sent, 38u * 4);
    EXPECT_EQ(counters.bytes_received, 38u * 4);
  });
}

TEST(Collective, OptionsNameTheBadKey) {
  auto key_of = [](CollectiveOptions o) -> std::string {
    try {
      o.Validate();
    } catch (const ConfigError& e) {
      return e.key();
    }
    return "";
  };
  EXPECT_EQ(key_of(Options(0, 0)), "collective.size");
  EXPECT_EQ(key_of(Options(2, 2)), "collective.rank");
  EXPECT_EQ(key_of(Options(-1, 2)), "collective.rank");
  EXPECT_EQ(key_of(Options(0, 2, Algorithm::kRing, milliseconds(0))), "collective.timeout_ms");
  auto no_host = Options(0, 2);
  no_host.host.clear();
  EXPECT_EQ(key_of(no_host), "collective.host");
  EXPECT_EQ(key_of(Options(1, 2)), "");
  EXPECT_EQ(ParseAlgorithm("ring_chunked"), Algorithm::kRingChunked);
  try {
    ParseAlgorithm("bcube");
    FAIL() << "bcube accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "collective.algorithm");
  }
  EXPECT_THROW(NewFileRendezvous("/nonexistent-asgd-folder"), ConfigError);
}

// The connect gives up, naming itself, and not before its timeout. (No upper bound on the
// time: that depends on the machine; a connect that never gave up would hang until
// ctest's TIMEOUT failed the test.)
TEST(Collective, PeerThatNeverJoinsTimesOutInConnect) {
  auto rendezvous = NewInMemoryRendezvous();
  const auto start = std::chrono::steady_clock::now();
  try {
    Connect(Options(0, 2, Algorithm::kRing, milliseconds(500)), rendezvous);
    FAIL() << "connected without rank 1";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.rank(), 0);
    EXPECT_NE(std::string(e.what()).find("connect"), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(400));
}

TEST(Collective, PeerThatStopsCallingTimesOutNamingTheOperation) {
  for (Algorithm algorithm :
       {Algorithm::kRing, Algorithm::kRingChunked, Algorithm::kHalvingDoubling}) {
    auto rendezvous = NewInMemoryRendezvous();
    std::unique_ptr<Collective> c1;
    std::thread peer(
        [&] { c1 = Connect(Options(1, 2, algorithm, milliseconds(500)), rendezvous); });
    auto c0 = Connect(Options(0, 2, algorithm, milliseconds(500)), rendezvous);
    peer.join();
    // Rank 1 is connected but never calls Allreduce.
    std::vector<float> v(1000, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      c0->Allreduce(v);
      FAIL() << "allreduce returned without its peer";
    } catch (const CollectiveError& e) {
      EXPECT_EQ(e.rank(), 0);
      EXPECT_EQ(e.operation().rfind("allreduce", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 0: allreduce"), std::string::npos) << e.what();
    }
    // Not before the timeout (500 ms, less the slack of gloo's deadline). No upper bound:
    // that depends on the machine; a call that never gave up would hang until ctest's
    // TIMEOUT failed the test.
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(400))
        << AlgorithmName(algorithm);
    // The handle stays failed: the next call throws at once.
    EXPECT_THROW(c0->Barrier(), CollectiveError);
  }
}

// A peer whose connections closed is an error at once, not at the timeout: the timeout
// here (an hour) is far beyond ctest's TIMEOUT for this test, so only the closed
// connections can end the call in time, whatever the machine's speed. A small vector
// (ring_chunked, halving_doubling) runs on the synchronous pairs, a large one on the
// asynchronous ones (gloo_collective.cc); both see the close.
TEST(Collective, DeadPeerIsAnErrorNamingTheOperation) {
  constexpr milliseconds kHour(3'600'000);
  for (Algorithm algorithm :
       {Algorithm::kRing, Algorithm::kRingChunked, Algorithm::kHalvingDoubling}) {
    for (std::size_t count : {std::size_t{1000}, std::size_t{1} << 20}) {
      auto rendezvous = NewInMemoryRendezvous();
      std::unique_ptr<Collective> c1;
      std::thread peer([&] { c1 = Connect(Options(1, 2, algorithm, kHour), rendezvous); });
      auto c0 = Connect(Options(0, 2, algorithm, kHour), rendezvous);
      peer.join();
      c1.reset();  // closes rank 1's connections
      std::vector<float> v(count, 1.0f);
      try {
        c0->Allreduce(v);
        FAIL() << "allreduce returned with its peer gone: " << AlgorithmName(algorithm) << ", "
               << count;
      } catch (const CollectiveError& e) {
        EXPECT_EQ(e.rank(), 0);
        EXPECT_EQ(e.operation().rfind("allreduce", 0), 0u) << e.what();
      }
    }
  }
}

// Two processes meeting through the file store.
TEST(Collective, FileRendezvousWithTwoProcesses) {
  asgd::testing::TempDir dir;
  const std::string peer = COLLECTIVE_FILE_PEER;
  const std::string store = dir.File("store");
  std::filesystem::create_directory(store);
  std::vector<std::unique_ptr<asgd::testing::Subprocess>> procs;
  for (int r = 0; r < 2; ++r) {
    procs.push_back(std::make_unique<asgd::testing::Subprocess>(
        std::vector<std::string>{peer, std::to_string(r), "2", store},
        dir.path() + "/out" + std::to_string(r) + ".txt"));
  }
  for (int r = 0; r < 2; ++r) {
    const auto status = procs[r]->Wait(milliseconds(20000));
    ASSERT_TRUE(status.has_value()) << "rank " << r << " did not finish";
    EXPECT_EQ(*status, 0) << procs[r]->Output();
  }
}

}  // namespace
}  // namespace asgd::collective
