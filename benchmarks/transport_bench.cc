// Push, pull and push-pull through the parameter server, against raw ZeroMQ and memcpy
// measured in the same binary.
//
//   BM_<Op>/<endpoint>/<size>/inflight:<d>/shards:<s>/clients:<c>
//       asgd: PsClient -> ShardServer(s) with the add rule. <Op> is Push, Pull or
//       PushPull; d requests are kept in flight per client (a new one is sent as the
//       oldest completes); with 2 clients the second runs the same loop on its own
//       thread and the bytes of both count.
//   BM_Raw<Op>/<endpoint>/<size>/inflight:<d>/clients:<c>
//       the baseline: DEALER -> ROUTER request/response of the same payload, zero-copy
//       sends. Push: payload out, 8-byte ack back. Pull: 8-byte request out, payload
//       back (sent zero-copy from the server's buffer) and copied into the destination.
//       PushPull: payload out and back (copied into the destination).
//   BM_Memcpy/<size>: memcpy of the same size.
//   BM_Apply/<size>: the shard's work on a push of that size with the add rule: one pass
//       out[i] = values[i] + payload[i] that also checks every result is finite
//       (AddScaledInto), cache-warm, with vs_memcpy against BM_Memcpy. With one request
//       in flight and a push no larger than a chunk, this is time the raw baseline (whose
//       server discards the payload) does not spend.
//
// asgd's client sends a dense push above 1 MiB over tcp and ipc as 1 MiB chunks
// (ClientOptions::chunk_bytes; message.h "Chunked pushes") that the server applies as
// they arrive, and asks for pull and push-pull replies above 1 MiB in 1 MiB chunks
// ("Chunked replies"), which it copies into place as they arrive. The raw baseline above
// sends the payload as one message, as the issue's figures did; loopback ZeroMQ itself
// moves 1 MiB messages faster than one 16 MiB one, so for those cases the bench also
// measures raw ZeroMQ sending the same 1 MiB chunks (a push: only the last one answered;
// a pull: the reply in chunks, each copied into the destination as it comes; a push-pull:
// both) and reports vs_raw_chunked against it. --chunk_bytes=N changes the chunk size
// (0: never chunk). With several shards it
// also measures raw ZeroMQ split the same way (one DEALER per raw server, equal parts,
// every server on its own thread, the client receiving each part's reply) and reports
// vs_raw_sharded: what asgd adds to the cost of moving the same messages.
//
// Counters: payload_bytes (per request, all shards), in_flight, bytes_per_second
// (payload bytes moved per second, all clients), vs_raw (asgd's bytes_per_second / the
// raw baseline's for the same op, endpoint, size, depth and clients: the median of its
// repetitions earlier in this run, or measured right after the asgd case when the
// baseline was filtered out), and for inproc cases vs_memcpy (against BM_Memcpy of the
// same size).
//
//   transport_bench --benchmark_format=csv > raw.csv   # a few minutes on 2 cores
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <pthread.h>
#include <unistd.h>
#include <zmq.hpp>

#include "core/param_layout.h"
#include "ps/placement.h"
#include "ps/server_rule.h"
#include "transport/context.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

namespace asgd::transport {

using ps::AddScaledInto;
using ps::NewAddRule;
using ps::OpName;
using ps::Placement;
using ps::PushOutcome;
using ps::ServerCall;
using ps::ServerRule;
using ps::ShardContext;
using ps::Status;
namespace {

using Steady = std::chrono::steady_clock;
// asgd's clients chunk dense pushes, and ask for pull replies in chunks, above this
// (ClientOptions::chunk_bytes, ServerOptions::reply_chunk_bytes); --chunk_bytes=N sets
// it (0: never chunk), for the raw chunked baselines too.
int64_t flag_chunk_bytes = int64_t{1} << 20;

enum class BenchOp { kPush, kPull, kPushPull };

const char* OpName(BenchOp op) {
  switch (op) {
    case BenchOp::kPush:
      return "Push";
    case BenchOp::kPull:
      return "Pull";
    case BenchOp::kPushPull:
      return "PushPull";
  }
  return "?";
}

std::string SizeName(int64_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + "MiB";
  if (bytes >= (1 << 10)) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

// A private folder for ipc:// socket files, removed at exit.
const std::string& IpcDir() {
  static const std::string dir = [] {
    std::string d =
        (std::filesystem::temp_directory_path() / ("asgd-bench-" + std::to_string(::getpid())))
            .string();
    std::filesystem::create_directories(d);
    std::atexit([] { std::filesystem::remove_all(IpcDir()); });
    return d;
  }();
  return dir;
}

std::string BindAddress(const std::string& scheme, const std::string& name) {
  static std::atomic<int> unique{0};
  const std::string tag = name + "-" + std::to_string(unique++);
  if (scheme == "inproc") return "inproc://" + tag;
  if (scheme == "ipc") return "ipc://" + IpcDir() + "/" + tag;
  return "tcp://127.0.0.1:*";
}

// Throughputs measured in this run, by case key, for vs_raw and vs_memcpy: every
// repetition's, since a baseline's repetitions all run before the asgd case that uses it.
std::mutex results_mu;
std::map<std::string, std::vector<double>> results;

void RecordThroughput(const std::string& key, double bytes_per_second) {
  std::lock_guard<std::mutex> lock(results_mu);
  results[key].push_back(bytes_per_second);
}

// The median of the key's repetitions (0 if none): a single fast or slow repetition of a
// baseline does not move every ratio measured against it.
double LookUp(const std::string& key) {
  std::lock_guard<std::mutex> lock(results_mu);
  auto it = results.find(key);
  if (it == results.end() || it->second.empty()) return 0.0;
  std::vector<double> v = it->second;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string Key(const char* kind, BenchOp op, const std::string& scheme, int64_t bytes, int depth,
                int clients) {
  return std::string(kind) + "/" + OpName(op) + "/" + scheme + "/" + std::to_string(bytes) + "/" +
         std::to_string(depth) + "/" + std::to_string(clients);
}

// Every case reports the same counters (the CSV reporter needs one column set); those
// that do not apply are NaN.
void SetCounters(benchmark::State& state, int64_t bytes, int depth, int shards, int clients,
                 double bps, double vs_raw, double vs_memcpy) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  state.counters["payload_bytes"] = static_cast<double>(bytes);
  state.counters["in_flight"] = depth > 0 ? depth : kNaN;
  state.counters["shards"] = shards > 0 ? shards : kNaN;
  state.counters["clients"] = clients > 0 ? clients : kNaN;
  state.counters["bytes_per_second"] = bps;
  state.counters["vs_raw"] = vs_raw > 0 ? vs_raw : kNaN;
  state.counters["vs_memcpy"] = vs_memcpy > 0 ? vs_memcpy : kNaN;
  state.counters["vs_raw_chunked"] = kNaN;
  state.counters["vs_raw_sharded"] = kNaN;
}

// ---- Raw ZeroMQ baseline -------------------------------------------------------------

void NoFree(void*, void*) {}

// A ROUTER that answers every request as the op's raw protocol says, on its own thread.
class RawServer {
 public:
  RawServer(zmq::context_t& ctx, const std::string& scheme, BenchOp op, int64_t bytes,
            int64_t chunk_bytes = 0)
      : op_(op),
        chunk_bytes_(static_cast<std::size_t>(chunk_bytes)),
        socket_(ctx, zmq::socket_type::router),
        reply_(static_cast<std::size_t>(bytes)) {
    Tune(socket_, scheme);
    socket_.bind(BindAddress(scheme, "raw"));
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { Serve(); });
    // Named as asgd names its shard threads (asgd-ps-N), so that profiles tell them apart
    // (benchmarks/transport_cpu_ab.py).
    pthread_setname_np(thread_.native_handle(), "raw-server");
  }
  ~RawServer() {
    stop_.store(true);
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

  // ipc:// gets the same 4 MiB socket buffers as asgd's ipc endpoint.
  static void Tune(zmq::socket_t& s, const std::string& scheme) {
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::sndhwm, 100000);
    s.set(zmq::sockopt::rcvhwm, 100000);
    if (scheme == "ipc") {
      s.set(zmq::sockopt::sndbuf, 4 << 20);
      s.set(zmq::sockopt::rcvbuf, 4 << 20);
    }
  }

 private:
  void Serve() {
    socket_.set(zmq::sockopt::rcvtimeo, 50);
    zmq::message_t id, body;
    const uint64_t ack = 0;
    while (!stop_.load()) {
      if (!socket_.recv(id)) continue;
      int frames = 0;
      while (true) {
        (void)socket_.recv(body);
        ++frames;
        if (!body.more()) break;
      }
      // A chunked request's chunks but the last carry one frame; the last two.
      if (chunk_bytes_ > 0 && frames == 1 && op_ != BenchOp::kPull) continue;
      if (op_ == BenchOp::kPush) {
        socket_.send(id, zmq::send_flags::sndmore);
        socket_.send(zmq::buffer(&ack, sizeof(ack)));
      } else if (chunk_bytes_ > 0 && reply_.size() > chunk_bytes_) {
        // The reply as chunks of the same size, each its own message to the client.
        for (std::size_t at = 0; at < reply_.size(); at += chunk_bytes_) {
          const std::size_t n = std::min(chunk_bytes_, reply_.size() - at);
          zmq::message_t copy_id(id.data(), id.size());
          socket_.send(copy_id, zmq::send_flags::sndmore);
          zmq::message_t m(reply_.data() + at, n, &NoFree, nullptr);
          socket_.send(m, zmq::send_flags::none);
        }
      } else {
        socket_.send(id, zmq::send_flags::sndmore);
        zmq::message_t m(reply_.data(), reply_.size(), &NoFree, nullptr);
        socket_.send(m, zmq::send_flags::none);
      }
    }
  }

  BenchOp op_;
  std::size_t chunk_bytes_;  // > 0: requests come, and replies above it go, as chunks
  zmq::socket_t socket_;
  std::vector<char> reply_;
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One raw client's loop: `depth` requests in flight; returns bytes moved. With several
// endpoints (the sharded baseline) each request is split into equal parts, one per
// server, and completes when every server has answered its part.
class RawClient {
 public:
  RawClient(zmq::context_t& ctx, const std::string& scheme,
            const std::vector<std::string>& endpoints, BenchOp op, int64_t bytes, int depth,
            int64_t chunk_bytes = 0)
      : op_(op),
        depth_(depth),
        chunk_bytes_(chunk_bytes),
        source_(static_cast<std::size_t>(bytes), 1),
        dest_(static_cast<std::size_t>(bytes)) {
    const std::size_t n = endpoints.size();
    for (std::size_t i = 0; i < n; ++i) {
      sockets_.emplace_back(ctx, zmq::socket_type::dealer);
      RawServer::Tune(sockets_.back(), scheme);
      sockets_.back().connect(endpoints[i]);
      // Parts as the placement cuts a flat vector: equal, the remainder on the last.
      const std::size_t part = source_.size() / n;
      offsets_.push_back(i * part);
      sizes_.push_back(i + 1 == n ? source_.size() - i * part : part);
    }
    for (int i = 0; i < depth_; ++i) Send();
  }
  // Completes one request and sends the next.
  void Step() {
    zmq::message_t m;
    for (std::size_t i = 0; i < sockets_.size(); ++i) {
      if (op_ == BenchOp::kPush) {
        (void)sockets_[i].recv(m);
        continue;
      }
      // A chunked reply comes as one message per chunk, copied in as each arrives.
      const std::size_t chunk =
          chunk_bytes_ > 0 ? static_cast<std::size_t>(chunk_bytes_) : sizes_[i];
      for (std::size_t at = 0; at < sizes_[i]; at += chunk) {
        (void)sockets_[i].recv(m);
        std::memcpy(dest_.data() + offsets_[i] + at, m.data(), std::min(m.size(), sizes_[i] - at));
      }
    }
    Send();
  }
  // Receives the replies still in flight.
  void Drain() {
    zmq::message_t m;
    for (int i = 0; i < depth_; ++i) {
      for (std::size_t s = 0; s < sockets_.size(); ++s) {
        for (std::size_t r = 0; r < Replies(s); ++r) (void)sockets_[s].recv(m);
      }
    }
  }

 private:
  // Reply messages per request from server i: an ack, the payload, or its chunks.
  std::size_t Replies(std::size_t i) const {
    if (op_ == BenchOp::kPush || chunk_bytes_ <= 0) return 1;
    const auto chunk = static_cast<std::size_t>(chunk_bytes_);
    return std::max<std::size_t>(1, (sizes_[i] + chunk - 1) / chunk);
  }
  void Send() {
    for (std::size_t i = 0; i < sockets_.size(); ++i) {
      zmq::socket_t& socket = sockets_[i];
      char* const data = source_.data() + offsets_[i];
      const std::size_t size = sizes_[i];
      if (op_ == BenchOp::kPull) {
        const uint64_t req = 1;
        socket.send(zmq::buffer(&req, sizeof(req)));
      } else if (chunk_bytes_ > 0) {
        // Chunks of chunk_bytes_, zero-copy; the last one with an empty second frame.
        const auto chunk = static_cast<std::size_t>(chunk_bytes_);
        for (std::size_t at = 0; at < size; at += chunk) {
          const std::size_t n = std::min(chunk, size - at);
          zmq::message_t m(data + at, n, &NoFree, nullptr);
          const bool last = at + n == size;
          socket.send(m, last ? zmq::send_flags::sndmore : zmq::send_flags::none);
          if (last) socket.send(zmq::message_t(), zmq::send_flags::none);
        }
      } else {
        zmq::message_t m(data, size, &NoFree, nullptr);
        socket.send(m, zmq::send_flags::none);
      }
    }
  }

  BenchOp op_;
  int depth_;
  int64_t chunk_bytes_;
  std::vector<zmq::socket_t> sockets_;
  std::vector<std::size_t> offsets_, sizes_;
  std::vector<char> source_;
  std::vector<char> dest_;
};

// Runs `second` in the background until stop, counting its steps.
template <typename Step>
std::thread Background(Step step, std::atomic<bool>& stop, std::atomic<int64_t>& count) {
  return std::thread([step, &stop, &count]() mutable {
    while (!stop.load(std::memory_order_relaxed)) {
      step();
      count.fetch_add(1, std::memory_order_relaxed);
    }
  });
}

// Measures raw throughput for ~duration without Google Benchmark (for vs_raw when the
// raw case was not run).
// With shards > 1 each request is split over that many raw servers (the sharded baseline).
double MeasureRaw(BenchOp op, const std::string& scheme, int64_t bytes, int depth, int clients,
                  std::chrono::milliseconds duration, int64_t chunk_bytes = 0, int shards = 1);

void BM_Raw(benchmark::State& state, BenchOp op, std::string scheme, int64_t bytes, int depth,
            int clients) {
  zmq::context_t ctx(1);
  double bps = 0;
  {
    RawServer server(ctx, scheme, op, bytes);
    std::vector<std::unique_ptr<RawClient>> cs;
    for (int c = 0; c < clients; ++c) {
      cs.push_back(std::make_unique<RawClient>(ctx, scheme, std::vector{server.endpoint()}, op,
                                               bytes, depth));
    }
    std::atomic<bool> stop{false};
    std::atomic<int64_t> other{0};
    for (int i = 0; i < depth * 2; ++i) cs[0]->Step();  // warm up
    std::thread bg;
    if (clients > 1) bg = Background([c = cs[1].get()] { c->Step(); }, stop, other);
    const auto t0 = Steady::now();
    for (auto _ : state) cs[0]->Step();
    const double s = std::chrono::duration<double>(Steady::now() - t0).count();
    stop.store(true);
    if (bg.joinable()) bg.join();
    const double moved =
        static_cast<double>(state.iterations() + other.load()) * static_cast<double>(bytes);
    bps = moved / s;
    for (auto& c : cs) c->Drain();
  }
  RecordThroughput(Key("raw", op, scheme, bytes, depth, clients), bps);
  SetCounters(state, bytes, depth, 0, clients, bps, 0, 0);
}

double MeasureRaw(BenchOp op, const std::string& scheme, int64_t bytes, int depth, int clients,
                  std::chrono::milliseconds duration, int64_t chunk_bytes, int shards) {
  zmq::context_t ctx(1);
  std::vector<std::unique_ptr<RawServer>> servers;
  std::vector<std::string> endpoints;
  const int64_t part = bytes / shards;
  for (int s = 0; s < shards; ++s) {
    const int64_t size = s + 1 == shards ? bytes - s * part : part;
    servers.push_back(std::make_unique<RawServer>(ctx, scheme, op, size, chunk_bytes));
    endpoints.push_back(servers.back()->endpoint());
  }
  std::vector<std::unique_ptr<RawClient>> cs;
  for (int c = 0; c < clients; ++c) {
    cs.push_back(
        std::make_unique<RawClient>(ctx, scheme, endpoints, op, bytes, depth, chunk_bytes));
  }
  std::atomic<bool> stop{false};
  std::atomic<int64_t> other{0};
  std::thread bg;
  if (clients > 1) bg = Background([c = cs[1].get()] { c->Step(); }, stop, other);
  int64_t n = 0;
  const auto t0 = Steady::now();
  while (Steady::now() - t0 < duration) {
    cs[0]->Step();
    ++n;
  }
  const double s = std::chrono::duration<double>(Steady::now() - t0).count();
  stop.store(true);
  if (bg.joinable()) bg.join();
  for (auto& c : cs) c->Drain();
  return static_cast<double>(n + other.load()) * static_cast<double>(bytes) / s;
}

// ---- memcpy -----------------------------------------------------------------------------

void BM_Memcpy(benchmark::State& state, int64_t bytes) {
  std::vector<char> a(static_cast<std::size_t>(bytes), 1), b(static_cast<std::size_t>(bytes));
  const auto t0 = Steady::now();
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), a.size());
    benchmark::ClobberMemory();
  }
  const double s = std::chrono::duration<double>(Steady::now() - t0).count();
  const double bps = static_cast<double>(state.iterations()) * static_cast<double>(bytes) / s;
  RecordThroughput("memcpy/" + std::to_string(bytes), bps);
  SetCounters(state, bytes, 0, 0, 0, bps, 0, 0);
}

void BM_Apply(benchmark::State& state, int64_t bytes) {
  const auto n = static_cast<std::size_t>(bytes) / sizeof(float);
  std::vector<float> values(n, 1.0f), payload(n, 0.5f), out(n);
  const auto t0 = Steady::now();
  for (auto _ : state) {
    benchmark::DoNotOptimize(AddScaledInto(out, values, 1.0f, payload));
    benchmark::ClobberMemory();
  }
  const double s = std::chrono::duration<double>(Steady::now() - t0).count();
  const double bps = static_cast<double>(state.iterations()) * static_cast<double>(bytes) / s;
  const double mc = LookUp("memcpy/" + std::to_string(bytes));
  SetCounters(state, bytes, 0, 0, 0, bps, 0, mc > 0 ? bps / mc : 0.0);
}

// ---- asgd ---------------------------------------------------------------------------

// One asgd client's loop with `depth` requests in flight.
class AsgdLoop {
 public:
  AsgdLoop(PsClient& client, BenchOp op, int64_t n, int depth)
      : client_(client),
        op_(op),
        depth_(depth),
        source_(static_cast<std::size_t>(n), 1.0f),
        dest_(static_cast<std::size_t>(n)),
        handles_(static_cast<std::size_t>(depth)) {
    for (auto& h : handles_) h = Issue();
  }
  void Step() {
    RequestHandle& h = handles_[next_];
    const Status st = h.Wait();
    if (!st.ok()) throw std::runtime_error(st.ToString());
    h = Issue();
    next_ = (next_ + 1) % handles_.size();
  }
  void Drain() {
    for (auto& h : handles_) (void)h.Wait();
  }

 private:
  RequestHandle Issue() {
    // The version sent with pushes does not matter to the add rule.
    switch (op_) {
      case BenchOp::kPush:
        return client_.Push(source_);
      case BenchOp::kPull:
        return client_.Pull(dest_);
      case BenchOp::kPushPull:
        return client_.PushPull(source_, dest_);
    }
    return {};
  }

  PsClient& client_;
  BenchOp op_;
  int depth_;
  std::vector<float> source_, dest_;
  std::vector<RequestHandle> handles_;
  std::size_t next_ = 0;
};

// Takes a push as applied without reading it: no NaN scan, no add, the version advanced
// (a push-pull then replies with the unchanged values). What is left of a push's cost is
// asgd's protocol: headers, the client's matching, the server's loop.
class DiscardRule final : public ServerRule {
 public:
  std::string Name() const override { return "discard"; }
  PushOutcome OnPush(ShardContext& ctx, ServerCall&) override {
    ctx.AdvanceVersion();
    return PushOutcome::kApplied;
  }
  bool ChecksNonFinite() const override { return true; }
};

void BM_Asgd(benchmark::State& state, BenchOp op, std::string scheme, int64_t bytes, int depth,
             int shards, int clients, bool discard) {
  const int64_t n = bytes / static_cast<int64_t>(sizeof(float));
  ParamLayout layout;
  layout.Add("w", {n});
  const Placement placement = Placement::Build(layout, shards);
  auto context = NewContext();
  double bps = 0;
  {
    ServerOptions base;
    base.reject_non_finite = true;  // the default: the check is part of the push cost
    base.reply_chunk_bytes = flag_chunk_bytes;
    std::vector<float> initial(static_cast<std::size_t>(n), 0.0f);
    auto servers = StartShardServers(
        context, placement, initial,
        [discard](uint32_t) -> std::unique_ptr<ServerRule> {
          if (discard) return std::make_unique<DiscardRule>();
          return NewAddRule();
        },
        [&](int) { return BindAddress(scheme, "ps"); }, base);
    std::vector<std::unique_ptr<PsClient>> cs;
    std::vector<std::unique_ptr<AsgdLoop>> loops;
    for (int c = 0; c < clients; ++c) {
      ClientOptions o;
      o.id = static_cast<uint32_t>(c);
      o.chunk_bytes = flag_chunk_bytes;
      cs.push_back(std::make_unique<PsClient>(context, Endpoints(servers), placement, o));
      loops.push_back(std::make_unique<AsgdLoop>(*cs.back(), op, n, depth));
    }
    for (int i = 0; i < depth * 2; ++i) loops[0]->Step();  // warm up
    std::atomic<bool> stop{false};
    std::atomic<int64_t> other{0};
    std::thread bg;
    if (clients > 1) bg = Background([l = loops[1].get()] { l->Step(); }, stop, other);
    const auto t0 = Steady::now();
    for (auto _ : state) loops[0]->Step();
    const double s = std::chrono::duration<double>(Steady::now() - t0).count();
    stop.store(true);
    if (bg.joinable()) bg.join();
    bps = static_cast<double>(state.iterations() + other.load()) * static_cast<double>(bytes) / s;
    for (auto& l : loops) l->Drain();
    loops.clear();
    cs.clear();
  }
  const std::string raw_key = Key("raw", op, scheme, bytes, depth, clients);
  double raw = LookUp(raw_key);
  if (raw == 0) {
    raw = MeasureRaw(op, scheme, bytes, depth, clients, std::chrono::milliseconds(300));
    RecordThroughput(raw_key, raw);
  }
  const double mc = scheme == "inproc" ? LookUp("memcpy/" + std::to_string(bytes)) : 0.0;
  SetCounters(state, bytes, depth, shards, clients, bps, bps / raw, mc > 0 ? bps / mc : 0.0);
  const int64_t chunk = flag_chunk_bytes;
  if (scheme != "inproc" && chunk > 0 && bytes / shards > chunk) {
    const double raw_chunked =
        MeasureRaw(op, scheme, bytes, depth, clients, std::chrono::milliseconds(600), chunk);
    state.counters["vs_raw_chunked"] = bps / raw_chunked;
  }
  if (shards > 1) {
    const double raw_sharded =
        MeasureRaw(op, scheme, bytes, depth, clients, std::chrono::milliseconds(600), 0, shards);
    state.counters["vs_raw_sharded"] = bps / raw_sharded;
  }
}

void Register() {
  const std::vector<int64_t> sizes = {64, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  const std::vector<std::string> schemes = {"inproc", "ipc", "tcp"};
  const std::vector<BenchOp> ops = {BenchOp::kPush, BenchOp::kPull, BenchOp::kPushPull};
  // Fewer iterations for big payloads: each is already milliseconds long.
  auto min_time = [](int64_t bytes) { return bytes >= (16 << 20) ? 0.3 : 0.15; };
  for (int64_t b : sizes) {
    benchmark::RegisterBenchmark(("BM_Memcpy/" + SizeName(b)).c_str(), BM_Memcpy, b)
        ->MinTime(min_time(b));
    benchmark::RegisterBenchmark(("BM_Apply/" + SizeName(b)).c_str(), BM_Apply, b)
        ->MinTime(min_time(b));
  }
  // The full matrix: every op, endpoint, size and depth, 1 shard, 1 client; each asgd
  // case right after its raw baseline.
  auto both = [&](BenchOp op, const std::string& scheme, int64_t b, int depth, int shards,
                  int clients) {
    const std::string tail =
        "/" + scheme + "/" + SizeName(b) + "/inflight:" + std::to_string(depth);
    if (LookUp(Key("registered", op, scheme, b, depth, clients)) == 0) {
      RecordThroughput(Key("registered", op, scheme, b, depth, clients), 1);
      benchmark::RegisterBenchmark(
          (std::string("BM_Raw") + OpName(op) + tail + "/clients:" + std::to_string(clients))
              .c_str(),
          BM_Raw, op, scheme, b, depth, clients)
          ->MinTime(min_time(b))
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark((std::string("BM_") + OpName(op) + tail + "/shards:" +
                                  std::to_string(shards) + "/clients:" + std::to_string(clients))
                                     .c_str(),
                                 BM_Asgd, op, scheme, b, depth, shards, clients, false)
        ->MinTime(min_time(b))
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  };
  for (BenchOp op : ops) {
    for (const std::string& scheme : schemes) {
      for (int64_t b : sizes) {
        for (int depth : {1, 8}) both(op, scheme, b, depth, 1, 1);
      }
    }
  }
  // Shards and clients, at 64 KiB and 1 MiB with 8 in flight.
  for (BenchOp op : {BenchOp::kPush, BenchOp::kPull}) {
    for (const std::string& scheme : schemes) {
      for (int64_t b : {int64_t{64 << 10}, int64_t{1 << 20}}) {
        for (int shards : {2, 4}) both(op, scheme, b, 8, shards, 1);
        both(op, scheme, b, 8, 1, 2);
      }
    }
  }
  // The add's share of a push: the same pushes and push-pulls with a rule that does not
  // read them (BM_<Op>Discard), at the sizes where one request in flight misses raw.
  for (BenchOp op : {BenchOp::kPush, BenchOp::kPushPull}) {
    for (const std::string& scheme : {std::string("ipc"), std::string("tcp")}) {
      for (int64_t b : {int64_t{64 << 10}, int64_t{1 << 20}}) {
        for (int depth : {1, 8}) {
          benchmark::RegisterBenchmark(
              (std::string("BM_") + OpName(op) + "Discard/" + scheme + "/" + SizeName(b) +
               "/inflight:" + std::to_string(depth) + "/shards:1/clients:1")
                  .c_str(),
              BM_Asgd, op, scheme, b, depth, 1, 1, true)
              ->MinTime(min_time(b))
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  results.clear();  // the "registered" marks
}

}  // namespace
}  // namespace asgd::transport

int main(int argc, char** argv) {
  // Our one flag, taken out before Google Benchmark reads the rest.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--chunk_bytes=", 0) == 0) {
      const std::string value = arg.substr(14);
      std::size_t used = 0;
      long long bytes = -1;
      try {
        bytes = std::stoll(value, &used);
      } catch (const std::exception&) {
      }
      if (value.empty() || used != value.size() || bytes < 0) {
        std::fprintf(stderr, "transport_bench: --chunk_bytes=%s: expected a byte count >= 0\n",
                     value.c_str());
        return 2;
      }
      asgd::transport::flag_chunk_bytes = bytes;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  asgd::transport::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
