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
//   BM_Push/<name>/<size>: end to end over tcp on 127.0.0.1, a PsClient pushing a float32
//     vector of <size> bytes to one ShardServer with the add rule (transport/). Each
//     iteration times apart a push of <name>'s encoding -- Encode on the worker's thread,
//     the send, the server's validation, decode and add, and the ack -- and a dense push
//     of the same vector to the same server (for <name> = dense, that one is the case).
//     Counters: vs_dense (dense push time / compressed push time), wire_bytes (bytes the
//     client sent per compressed push, all frames, header included; ZeroMQ's and TCP's own
//     framing not counted), wire_ratio (the dense push's bytes / wire_bytes),
//     encode_share (the part of the compressed push's time spent in Encode),
//     bytes_per_second (the dense vector's bytes / push time).
//
// Goals: encode and decode of sign and qsgd >= 0.25x memcpy; topk (k = 1 %) >= 10x faster
// than the full sort. Every case reports every counter (nan where one does not apply).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "compression/compressor.h"
#include "core/param_layout.h"
#include "core/rng.h"
#include "ps/placement.h"
#include "ps/server_rule.h"
#include "transport/context.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

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

// Sets every counter: bytes_per_second, the rest nan (the caller sets what applies).
void SetCounters(benchmark::State& state, double bytes_per_second) {
  state.counters["bytes_per_second"] = bytes_per_second;
  for (const char* c :
       {"vs_memcpy", "vs_sort", "vs_dense", "wire_ratio", "wire_bytes", "encode_share"}) {
    state.counters[c] = kNaN;
  }
}

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
  SetCounters(state, static_cast<double>(bytes) * state.iterations() / op_s);
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

// One ShardServer over tcp on 127.0.0.1 with the add rule, and a PsClient of it.
struct PushSetup {
  explicit PushSetup(int64_t n) : context(transport::NewContext()), placement(Build(n)) {
    const std::vector<float> initial(static_cast<std::size_t>(n), 0.0f);
    servers = transport::StartShardServers(
        context, placement, initial, [](uint32_t) { return ps::NewAddRule(); },
        [](int) { return std::string("tcp://127.0.0.1:*"); });
    client =
        std::make_unique<transport::PsClient>(context, transport::Endpoints(servers), placement);
  }
  static ps::Placement Build(int64_t n) {
    ParamLayout layout;
    layout.Add("w", {n});
    return ps::Placement::Build(layout, 1);
  }
  // Waits for the push and fails the case on an error reply.
  static bool Done(benchmark::State& state, transport::RequestHandle h) {
    const ps::Status st = h.Wait();
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    return st.ok();
  }

  std::shared_ptr<transport::Context> context;
  ps::Placement placement;
  std::vector<std::unique_ptr<transport::ShardServer>> servers;
  std::unique_ptr<transport::PsClient> client;
};

void BM_Push(benchmark::State& state, const std::string& name) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::vector<float> x = Input(bytes);
  const auto c = name == "dense" ? nullptr : Make(name);
  PushSetup setup(static_cast<int64_t>(x.size()));
  transport::PsClient& client = *setup.client;
  Rng rng(1);
  std::vector<compression::Encoded> parts(1);
  auto dense = [&] { return PushSetup::Done(state, client.Push(x)); };
  double encode_s = 0;
  auto compressed = [&] {
    const auto t0 = Steady::now();
    c->Encode(x, rng, &parts[0]);
    encode_s += Seconds(t0, Steady::now());
    return PushSetup::Done(state, client.PushEncoded(parts, {}));
  };
  // Warm up: connections, buffers, the server's first copy.
  if (!dense() || (c != nullptr && !compressed())) return;
  encode_s = 0;
  double op_s = 0, dense_s = 0;
  uint64_t op_bytes = 0, dense_bytes = 0;
  for (auto _ : state) {
    const uint64_t b0 = client.stats().bytes_sent;
    const auto t0 = Steady::now();
    if (c != nullptr && !compressed()) break;
    const auto t1 = Steady::now();
    const uint64_t b1 = client.stats().bytes_sent;
    if (!dense()) break;
    const auto t2 = Steady::now();
    const uint64_t b2 = client.stats().bytes_sent;
    op_bytes += b1 - b0;
    dense_bytes += b2 - b1;
    op_s += Seconds(t0, t1);
    dense_s += Seconds(t1, t2);
    state.SetIterationTime(Seconds(c != nullptr ? t0 : t1, c != nullptr ? t1 : t2));
  }
  if (c == nullptr) {
    op_s = dense_s;
    op_bytes = dense_bytes;
  }
  SetCounters(state, static_cast<double>(bytes) * state.iterations() / op_s);
  state.counters["vs_dense"] = dense_s / op_s;
  state.counters["wire_bytes"] = static_cast<double>(op_bytes) / state.iterations();
  state.counters["wire_ratio"] = static_cast<double>(dense_bytes) / static_cast<double>(op_bytes);
  state.counters["encode_share"] = encode_s / op_s;
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
  for (const char* name : {"dense", "topk", "randk", "qsgd", "sign", "terngrad"}) {
    benchmark::RegisterBenchmark((std::string("BM_Push/") + name).c_str(), BM_Push, name)
        ->Arg(16 * kMiB)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
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
