// Encode and decode throughput of each compressor (compression/compressor.h) against
// memcpy, and topk against a full sort, each measured in the same iteration as its
// baseline so that the ratios hold on a shared, noisy machine (issue 17 item 6).
//
//   BM_Encode/<name>/<size>: Encode of a float32 vector of <size> bytes (normal values),
//     then, timed apart, a memcpy of the same bytes. Counters: bytes_per_second (input
//     bytes / encode time), vs_memcpy (memcpy time / encode time: the encoder's bandwidth
//     as a fraction of memcpy's), wire_ratio (input bytes / encoded bytes).
//   BM_Decode/<name>/<size>: Decode of that encoding into <size> bytes, then a memcpy of
//     <size> bytes; the same counters (bytes_per_second of the decoded output).
//   BM_TopKVsSort/<size>: topk at k = 1 %, then std::sort of a copy of the magnitudes (the
//     cheapest full sort that finds the same k). Counter vs_sort: sort time / topk time.
//
// Goals: encode and decode of sign and qsgd >= 0.25x memcpy; topk (k = 1 %) >= 10x faster
// than the full sort.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "compression/compressor.h"
#include "core/rng.h"

namespace asgd::compression {
namespace {

using Steady = std::chrono::steady_clock;
// Every case reports the same counters (nan where one does not apply): Google Benchmark's
// CSV reporter keeps only the columns of the first case.
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<float> Input(std::size_t bytes) {
  std::vector<float> x(bytes / sizeof(float));
  Rng rng(2026);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  return x;
}

std::unique_ptr<Compressor> Make(const std::string& name) {
  CompressionOptions o;
  o.name = name;
  o.ratio = 0.01;
  o.levels = 15;
  return NewCompressor(o);
}

double Seconds(Steady::time_point a, Steady::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

const char* const kNames[] = {"topk", "randk", "qsgd", "sign", "terngrad"};

// Each iteration runs `op`, then `baseline`, timed apart; the manual time is op's. Sets
// the counters: bytes_per_second of op over `bytes`, and baseline time / op time under
// `ratio_name` ("vs_memcpy" or "vs_sort"; the other one nan), wire_ratio = bytes / wire.
template <typename Op, typename Baseline>
void TimeAgainst(benchmark::State& state, std::size_t bytes, const char* ratio_name, Op op,
                 Baseline baseline, const Encoded& e) {
  double op_s = 0, ref_s = 0;
  for (auto _ : state) {
    const auto t0 = Steady::now();
    op();
    const auto t1 = Steady::now();
    baseline();
    const auto t2 = Steady::now();
    op_s += Seconds(t0, t1);
    ref_s += Seconds(t1, t2);
    state.SetIterationTime(Seconds(t0, t1));
  }
  state.counters["bytes_per_second"] = static_cast<double>(bytes) * state.iterations() / op_s;
  state.counters["vs_memcpy"] = kNaN;
  state.counters["vs_sort"] = kNaN;
  state.counters[ratio_name] = ref_s / op_s;
  state.counters["wire_ratio"] = static_cast<double>(bytes) / static_cast<double>(e.bytes());
}

void BM_Encode(benchmark::State& state, const std::string& name) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::vector<float> x = Input(bytes);
  std::vector<float> copy(x.size());
  const auto c = Make(name);
  Rng rng(1);
  Encoded e;
  c->Encode(x, rng, &e);  // sizes the buffers once
  TimeAgainst(
      state, bytes, "vs_memcpy",
      [&] {
        c->Encode(x, rng, &e);
        benchmark::DoNotOptimize(e.frames.data());
      },
      [&] {
        std::memcpy(copy.data(), x.data(), bytes);
        benchmark::DoNotOptimize(copy.data());
      },
      e);
}

void BM_Decode(benchmark::State& state, const std::string& name) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::vector<float> x = Input(bytes);
  std::vector<float> out(x.size()), copy(x.size());
  const auto c = Make(name);
  Rng rng(1);
  Encoded e;
  c->Encode(x, rng, &e);
  const std::vector<std::span<const std::byte>> frames(e.frames.begin(), e.frames.end());
  TimeAgainst(
      state, bytes, "vs_memcpy",
      [&] {
        const std::string problem = Decode(e.encoding, frames, out);
        if (!problem.empty()) state.SkipWithError(problem.c_str());
        benchmark::DoNotOptimize(out.data());
      },
      [&] {
        std::memcpy(copy.data(), x.data(), bytes);
        benchmark::DoNotOptimize(copy.data());
      },
      e);
}

void BM_TopKVsSort(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::vector<float> x = Input(bytes);
  std::vector<float> magnitudes(x.size());
  const auto c = Make("topk");
  Rng rng(1);
  Encoded e;
  TimeAgainst(
      state, bytes, "vs_sort",
      [&] {
        c->Encode(x, rng, &e);
        benchmark::DoNotOptimize(e.frames.data());
      },
      [&] {
        for (std::size_t i = 0; i < x.size(); ++i) magnitudes[i] = std::fabs(x[i]);
        std::sort(magnitudes.begin(), magnitudes.end(), std::greater<float>());
        benchmark::DoNotOptimize(magnitudes.data());
      },
      e);
}

constexpr int64_t kMiB = int64_t{1} << 20;

void Register() {
  for (const char* name : kNames) {
    benchmark::RegisterBenchmark((std::string("BM_Encode/") + name).c_str(), BM_Encode, name)
        ->Arg(kMiB)
        ->Arg(64 * kMiB)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("BM_Decode/") + name).c_str(), BM_Decode, name)
        ->Arg(kMiB)
        ->Arg(64 * kMiB)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_TopKVsSort", BM_TopKVsSort)
      ->Arg(kMiB)
      ->Arg(64 * kMiB)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace asgd::compression

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  asgd::compression::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
