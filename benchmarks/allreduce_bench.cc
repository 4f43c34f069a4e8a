// Allreduce of a float vector among N ranks (threads of this process) over gloo's TCP
// transport on 127.0.0.1: asgd's collective layer against gloo called directly, in the
// same iteration.
//
//   BM_Allreduce/<algorithm>/<bytes>/ranks:<N>
//       Each iteration runs one allreduce (sum) through asgd::collective::Collective, on a
//       vector bound to it (Collective::Bind, as the strategies bind the vectors they
//       allreduce every round), and one
//       through gloo directly on a second, separately connected set of gloo contexts
//       (ring: gloo::allreduce with the ring algorithm; ring_chunked and halving_doubling:
//       the gloo algorithm object built once, then run()), alternating which goes first.
//       Rank 0 runs the benchmark loop and times both; ranks 1..N-1 run the same sequence
//       on their own threads. The iteration count is fixed per size so the peers know it;
//       one untimed warm-up iteration precedes it.
//   BM_AllreduceUnbound/<algorithm>/<bytes>/ranks:<N>   (ring_chunked, halving_doubling)
//       The same without the binding: asgd copies the vector into the buffer of its
//       cached gloo algorithm object and the result out.
//
// Counters (rank 0's view; nccl-tests' definitions):
//   algbw       vector bytes / time of one allreduce through asgd, GB/s
//   busbw       algbw x 2(N-1)/N: the per-link rate a bandwidth-optimal ring would need
//   gloo_algbw  the same for gloo called directly
//   vs_gloo     gloo's time / asgd's time over the same iterations (> 1: asgd faster);
//               the goal is >= 0.95 at >= 1 MiB. gloo direct runs on gloo's default
//               (asynchronous) pairs; asgd runs ring_chunked and halving_doubling on
//               synchronous pairs up to 256 KiB (collective/README.md, "Per-call cost"),
//               so there vs_gloo is that change's speed-up against the old path, in the
//               same run
//   real_time   asgd's time per allreduce (manual timing)
//
//   allreduce_bench --benchmark_format=csv > raw.csv
#include <benchmark/benchmark.h>

#include <gloo/algorithm.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "benchmarks/rank_threads.h"
#include "collective/collective.h"

namespace {

using asgd::collective::Algorithm;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kTimeout = asgd::bench::kRankTimeout;

// One rank's two handles on the same vector size: asgd's and a raw gloo context.
struct Rank {
  std::unique_ptr<asgd::collective::Collective> ours;
  std::shared_ptr<gloo::Context> gloo;
  std::vector<float> ours_data;
  std::vector<float> gloo_data;
  std::unique_ptr<gloo::Algorithm> gloo_algorithm;  // ring_chunked, halving_doubling
};

std::vector<Rank> ConnectRanks(Algorithm algorithm, int size, std::size_t count, bool bind) {
  std::vector<Rank> ranks(size);
  auto rendezvous = asgd::collective::NewInMemoryRendezvous();
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      ranks[r].ours = asgd::collective::Connect(asgd::bench::LoopbackRank(r, size, algorithm),
                                                rendezvous);
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(r, size);
      context->setTimeout(kTimeout);
      context->connectFullMesh(store, device);
      ranks[r].gloo = context;
      ranks[r].ours_data.assign(count, 0.0f);
      if (bind) ranks[r].ours->Bind(ranks[r].ours_data);
      ranks[r].gloo_data.assign(count, 0.0f);
      const std::vector<float*> ptrs{ranks[r].gloo_data.data()};
      const int n = static_cast<int>(count);
      if (algorithm == Algorithm::kRingChunked) {
        ranks[r].gloo_algorithm =
            std::make_unique<gloo::AllreduceRingChunked<float>>(context, ptrs, n);
      } else if (algorithm == Algorithm::kHalvingDoubling) {
        ranks[r].gloo_algorithm =
            std::make_unique<gloo::AllreduceHalvingDoubling<float>>(context, ptrs, n);
      }
    });
  }
  for (auto& t : threads) t.join();
  return ranks;
}

void GlooDirect(Rank& rank) {
  if (rank.gloo_algorithm) {
    rank.gloo_algorithm->run();
    return;
  }
  gloo::AllreduceOptions opts(rank.gloo);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setOutput(rank.gloo_data.data(), rank.gloo_data.size());
  opts.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
  opts.setTimeout(kTimeout);
  gloo::allreduce(opts);
}

// One iteration at one rank; returns {asgd seconds, gloo seconds}.
std::pair<double, double> Step(Rank& rank, int64_t iteration) {
  auto time = [](auto&& f) {
    const auto start = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  auto ours = [&] { rank.ours->Allreduce(rank.ours_data); };
  auto direct = [&] { GlooDirect(rank); };
  if (iteration % 2 == 0) {
    const double a = time(ours);
    return {a, time(direct)};
  }
  const double g = time(direct);
  return {time(ours), g};
}

void BM_Allreduce(benchmark::State& state, Algorithm algorithm, std::size_t bytes, int size,
                  bool bind) {
  const int64_t iterations = static_cast<int64_t>(state.max_iterations);
  std::vector<Rank> ranks = ConnectRanks(algorithm, size, bytes / sizeof(float), bind);

  std::vector<std::thread> peers;
  for (int r = 1; r < size; ++r) {
    peers.emplace_back([&, r] {
      Step(ranks[r], 0);  // warm-up
      for (int64_t i = 0; i < iterations; ++i) Step(ranks[r], i);
    });
  }
  // Warm-up, untimed: the first call pays for faulting in fresh pages, and asgd's first
  // ring_chunked or halving_doubling call also builds its gloo algorithm object (the
  // direct path built its own in ConnectRanks). nccl-tests warms up the same way.
  Step(ranks[0], 0);
  double ours_total = 0, gloo_total = 0;
  int64_t i = 0;
  for (auto _ : state) {
    const auto [ours, direct] = Step(ranks[0], i++);
    ours_total += ours;
    gloo_total += direct;
    state.SetIterationTime(ours);
  }
  for (auto& t : peers) t.join();
  // No rank closes while another may still read its last message.
  std::vector<std::thread> closing;
  for (int r = 0; r < size; ++r) closing.emplace_back([&, r] { ranks[r].ours->Barrier(); });
  for (auto& t : closing) t.join();

  const double n = static_cast<double>(i);
  const double algbw = static_cast<double>(bytes) * n / ours_total / 1e9;
  const double gloo_algbw = static_cast<double>(bytes) * n / gloo_total / 1e9;
  state.counters["algbw"] = algbw;
  state.counters["busbw"] = algbw * 2.0 * (size - 1) / size;
  state.counters["gloo_algbw"] = gloo_algbw;
  state.counters["vs_gloo"] = gloo_total / ours_total;
  state.counters["ranks"] = size;
  state.counters["bytes"] = static_cast<double>(bytes);
}

}  // namespace

// The iteration count must be known before the loop (the peers run it on their own
// threads), so each case is registered with its own: about 256 MiB through each path,
// between 5 and 400 allreduces.
int main(int argc, char** argv) {
  for (Algorithm algorithm :
       {Algorithm::kRing, Algorithm::kRingChunked, Algorithm::kHalvingDoubling}) {
    for (int size : {2, 4}) {
      for (std::size_t bytes = 4 << 10; bytes <= (64u << 20); bytes *= 4) {
        const auto iterations = std::clamp<int64_t>((int64_t{256} << 20) / int64_t(bytes), 5, 400);
        for (bool bind : {true, false}) {
          if (!bind && algorithm == Algorithm::kRing) continue;  // nothing to bind
          const std::string name = std::string(bind ? "BM_Allreduce/" : "BM_AllreduceUnbound/") +
                                   std::string(asgd::collective::AlgorithmName(algorithm)) + "/" +
                                   std::to_string(bytes) + "/ranks:" + std::to_string(size);
          benchmark::RegisterBenchmark(name.c_str(), BM_Allreduce, algorithm, bytes, size, bind)
              ->Iterations(iterations)
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
