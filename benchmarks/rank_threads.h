// The ranks of a collective as threads of this process, for the benchmarks that time
// collective steps (allreduce_bench, round_bench, overlap_bench): each rank connects over
// 127.0.0.1 through one in-memory rendezvous, as `asgd run` connects its workers.
#pragma once

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "collective/collective.h"

namespace asgd::bench {

// Long enough for a loaded machine; a benchmark that waits this long has failed anyway.
inline constexpr std::chrono::milliseconds kRankTimeout{60000};

// Rank `rank` of `size` on loopback with `algorithm`.
inline collective::CollectiveOptions LoopbackRank(
    int rank, int size,
    collective::Algorithm algorithm = collective::CollectiveOptions{}.algorithm) {
  collective::CollectiveOptions o;
  o.rank = rank;
  o.size = size;
  o.algorithm = algorithm;
  o.timeout = kRankTimeout;
  o.host = "127.0.0.1";
  return o;
}

// Runs body(rank, collective) on `size` threads, rank r connected as LoopbackRank(r, size,
// algorithm), and returns when every thread has ended. After body returns (and has
// destroyed whatever used the collective, e.g. a worker rule's communication thread) the
// rank passes a barrier before its handle closes: no rank closes its connections while a
// peer may still read its last message (collective.h).
template <typename Body>
void RunRanks(int size, collective::Algorithm algorithm, Body&& body) {
  const auto rendezvous = collective::NewInMemoryRendezvous();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto c = collective::Connect(LoopbackRank(r, size, algorithm), rendezvous);
      body(r, *c);
      c->Barrier();
    });
  }
  for (auto& t : threads) t.join();
}

// Replays times measured on the ranks' threads (one a step, in seconds; as many as the
// benchmark's fixed iteration count) as its manual iteration times. Returns their mean.
inline double ReplayTimes(benchmark::State& state, const std::vector<double>& times) {
  double total = 0;
  std::size_t i = 0;
  for (auto _ : state) {
    state.SetIterationTime(times[i]);
    total += times[i];
    ++i;
  }
  return total / static_cast<double>(i);
}

}  // namespace asgd::bench
