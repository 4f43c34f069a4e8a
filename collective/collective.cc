#include "collective/collective.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "core/check.h"

namespace asgd::collective {

std::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kRingChunked:
      return "ring_chunked";
    case Algorithm::kHalvingDoubling:
      return "halving_doubling";
  }
  return "unknown";
}

Algorithm ParseAlgorithm(std::string_view value) {
  for (Algorithm a : {Algorithm::kRing, Algorithm::kRingChunked, Algorithm::kHalvingDoubling}) {
    if (value == AlgorithmName(a)) return a;
  }
  throw ConfigError("collective.algorithm", std::string(value),
                    "ring, ring_chunked or halving_doubling");
}

void CollectiveOptions::Validate() const {
  if (size < 1) {
    throw ConfigError("collective.size", std::to_string(size), "an integer >= 1");
  }
  if (rank < 0 || rank >= size) {
    throw ConfigError("collective.rank", std::to_string(rank),
                      "an integer in [0, " + std::to_string(size) + ")");
  }
  if (timeout.count() <= 0) {
    throw ConfigError("collective.timeout_ms", std::to_string(timeout.count()),
                      "a positive number of milliseconds");
  }
  if (host.empty()) {
    throw ConfigError("collective.host", host, "an address or host name to listen on");
  }
}

CollectiveError::CollectiveError(int rank, std::string operation, const std::string& detail)
    : InputError("collective: rank " + std::to_string(rank) + ": " + operation +
                 " failed: " + detail),
      rank_(rank),
      operation_(std::move(operation)) {}

namespace {

constexpr uint64_t kFloat = sizeof(float);

// Bytes rank `rank` sends in gloo::allreduce's ring (gloo/allreduce.cc), cut as
// GlooRingSegments says. Each of its two phases issues segments - segments/N sends to
// rank-1, one segment each, clipped at the end of the buffer (nothing past it):
// reduce-scatter starts at chunk rank+1 and sends every segment but those of chunk rank;
// allgather starts at chunk rank and sends every segment but those of chunk rank-1. A rank
// so sends the buffer twice less those two chunks.
uint64_t RingSent(int rank, int size, uint64_t count) {
  const uint64_t n = static_cast<uint64_t>(size);
  const uint64_t total = count * kFloat;
  const uint64_t chunk = GlooRingSegments(size, count).chunk_bytes;
  // The bytes of chunk c (c in [0, N)) inside the buffer.
  auto chunk_bytes = [&](uint64_t c) -> uint64_t {
    return std::min((c + 1) * chunk, total) - std::min(c * chunk, total);
  };
  const uint64_t r = static_cast<uint64_t>(rank);
  return 2 * total - chunk_bytes(r) - chunk_bytes((r + n - 1) % n);
}

// Bytes rank `rank` sends in gloo::AllreduceRingChunked (gloo/allreduce_ring_chunked.h):
// 2N chunks of max(256, ceil(count/2N)) floats; two initial sends, one per reduce round
// (2N-2) and one per allgather round but the last two (2N-4). A chunk past the end of
// the vector is sent as one float.
uint64_t RingChunkedSent(int rank, int size, uint64_t count) {
  const uint64_t chunks = 2 * static_cast<uint64_t>(size);
  const uint64_t chunk = std::max<uint64_t>(256, (count + chunks - 1) / chunks);
  auto length = [&](uint64_t chunk_offset) -> uint64_t {
    const uint64_t offset = (chunk_offset % chunks) * chunk;
    if (offset + chunk <= count) return chunk * kFloat;
    if (offset < count) return (count - offset) * kFloat;
    return kFloat;
  };
  auto round_offset = [&](uint64_t round) {
    const int64_t c = static_cast<int64_t>(chunks);
    const int64_t v = (2 * rank - static_cast<int64_t>(round & ~uint64_t{1}) +
                       static_cast<int64_t>(round & 1) + c) % c;
    return static_cast<uint64_t>(v);
  };
  const uint64_t r2 = 2 * static_cast<uint64_t>(rank);
  uint64_t sent = length(r2) + length(r2 + 1);
  for (uint64_t round = 2; round < chunks; ++round) sent += length(round_offset(round));
  for (uint64_t round = 0; round + 4 < chunks; ++round) sent += length(round_offset(round));
  return sent;
}

}  // namespace

RingSegments GlooRingSegments(int size, std::size_t count) {
  if (size <= 1 || count == 0) return {};
  constexpr uint64_t kMaxSegmentBytes = 1024 * 1024;  // AllreduceOptions::kMaxSegmentSize
  const uint64_t n = static_cast<uint64_t>(size);
  const uint64_t total = count * kFloat;
  const uint64_t max_segment = kFloat * (kMaxSegmentBytes / kFloat);
  auto round_up = [](uint64_t v, uint64_t m) { return (v + m - 1) / m * m; };
  RingSegments s;
  s.segments = round_up(std::max((total + max_segment - 1) / max_segment, n * 2), n);
  s.segment_bytes = round_up((total + s.segments - 1) / s.segments, kFloat);
  s.chunk_bytes = s.segments / n * s.segment_bytes;
  return s;
}

std::size_t AllreducePieceFloats(Algorithm algorithm, int size) {
  if (algorithm != Algorithm::kHalvingDoubling || size <= 1) return 0;
  return (std::size_t{256} << 10) / sizeof(float);
}

namespace {

// One piece's payload (ExpectedAllreduceBytes of a vector that is one piece).
Traffic PieceBytes(Algorithm algorithm, int rank, int size, std::size_t count) {
  if (size <= 1 || count == 0) return {};
  const int left = (rank + size - 1) % size;
  const int right = (rank + 1) % size;
  switch (algorithm) {
    case Algorithm::kRing:
      // gloo's ring sends to rank-1 and receives from rank+1.
      return {RingSent(rank, size, count), RingSent(right, size, count)};
    case Algorithm::kRingChunked:
      // Sends to rank+1, receives from rank-1.
      return {RingChunkedSent(rank, size, count), RingChunkedSent(left, size, count)};
    case Algorithm::kHalvingDoubling: {
      const uint64_t nominal =
          2 * static_cast<uint64_t>(size - 1) * count * kFloat / static_cast<uint64_t>(size);
      return {nominal, nominal};
    }
  }
  return {};
}

}  // namespace

// A vector of several pieces moves every full piece's payload, then the last piece's.
Traffic ExpectedAllreduceBytes(Algorithm algorithm, int rank, int size, std::size_t count) {
  const std::size_t max = AllreducePieceFloats(algorithm, size);
  if (max == 0 || count <= max) return PieceBytes(algorithm, rank, size, count);
  const Traffic full = PieceBytes(algorithm, rank, size, max);
  const Traffic rest = PieceBytes(algorithm, rank, size, count % max);
  const uint64_t pieces = count / max;
  return {pieces * full.sent + rest.sent, pieces * full.received + rest.received};
}

struct Collective::AtomicCounters {
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> allreduces{0};
  std::atomic<uint64_t> broadcasts{0};
  std::atomic<uint64_t> barriers{0};
  std::atomic<uint64_t> sends{0};
  std::atomic<uint64_t> recvs{0};

  void Add(const Traffic& t) {
    bytes_sent.fetch_add(t.sent, std::memory_order_relaxed);
    bytes_received.fetch_add(t.received, std::memory_order_relaxed);
  }
};

Collective::Collective(int rank, int size, Algorithm algorithm)
    : rank_(rank),
      size_(size),
      algorithm_(algorithm),
      counters_(std::make_unique<AtomicCounters>()) {}

Collective::~Collective() = default;

void Collective::CheckPeer(int peer, const char* operation) const {
  if (peer < 0 || peer >= size_) {
    throw ConfigError(std::string(operation) + " peer", std::to_string(peer),
                      "a rank in [0, " + std::to_string(size_) + ")");
  }
}

void Collective::Allreduce(std::span<float> data, ReduceOp op) {
  if (size_ > 1 && !data.empty()) {
    counters_->Add(DoAllreduce(data, op == ReduceOp::kMax ? ReduceOp::kMax : ReduceOp::kSum));
  }
  if (op == ReduceOp::kMean && size_ > 1) {
    // A division rather than a multiplication by 1/N: exact whenever the mean is
    // representable, which the tests and the strategies' invariants rely on.
    const float n = static_cast<float>(size_);
    for (float& x : data) x /= n;
  }
  counters_->allreduces.fetch_add(1, std::memory_order_relaxed);
}

std::span<const float> Collective::AllreduceView(std::span<float> data, ReduceOp op) {
  ASGD_CHECK(op != ReduceOp::kMean, "AllreduceView takes kSum or kMax");
  std::span<const float> result = data;
  if (size_ > 1 && !data.empty()) counters_->Add(DoAllreduceView(data, op, &result));
  counters_->allreduces.fetch_add(1, std::memory_order_relaxed);
  return result;
}

Traffic Collective::DoAllreduceView(std::span<float> data, ReduceOp op,
                                    std::span<const float>* result) {
  *result = data;
  return DoAllreduce(data, op);
}

void Collective::Bind(std::span<float> data, ReduceOp op) {
  if (size_ > 1 && !data.empty()) DoBind(data, op == ReduceOp::kMax ? ReduceOp::kMax : ReduceOp::kSum);
}

void Collective::DoBind(std::span<float> /*data*/, ReduceOp /*op*/) {}

void Collective::Broadcast(std::span<float> data, int root) {
  CheckPeer(root, "broadcast root");
  if (size_ > 1 && !data.empty()) counters_->Add(DoBroadcast(data, root));
  counters_->broadcasts.fetch_add(1, std::memory_order_relaxed);
}

void Collective::Barrier() {
  if (size_ > 1) DoBarrier();
  counters_->barriers.fetch_add(1, std::memory_order_relaxed);
}

void Collective::Send(int peer, std::span<const float> data, uint32_t tag) {
  CheckPeer(peer, "send");
  if (peer == rank_) throw ConfigError("send peer", std::to_string(peer), "a rank other than this one");
  if (!data.empty()) DoSend(peer, data, tag);
  counters_->Add({data.size_bytes(), 0});
  counters_->sends.fetch_add(1, std::memory_order_relaxed);
}

void Collective::Recv(int peer, std::span<float> data, uint32_t tag) {
  CheckPeer(peer, "recv");
  if (peer == rank_) throw ConfigError("recv peer", std::to_string(peer), "a rank other than this one");
  if (!data.empty()) DoRecv(peer, data, tag);
  counters_->Add({0, data.size_bytes()});
  counters_->recvs.fetch_add(1, std::memory_order_relaxed);
}

CollectiveCounters Collective::Counters() const {
  CollectiveCounters c;
  c.bytes_sent = counters_->bytes_sent.load(std::memory_order_relaxed);
  c.bytes_received = counters_->bytes_received.load(std::memory_order_relaxed);
  c.allreduces = counters_->allreduces.load(std::memory_order_relaxed);
  c.broadcasts = counters_->broadcasts.load(std::memory_order_relaxed);
  c.barriers = counters_->barriers.load(std::memory_order_relaxed);
  c.sends = counters_->sends.load(std::memory_order_relaxed);
  c.recvs = counters_->recvs.load(std::memory_order_relaxed);
  return c;
}

}  // namespace asgd::collective
