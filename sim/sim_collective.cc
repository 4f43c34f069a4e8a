#include "sim/sim_collective.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "core/error.h"

namespace asgd::sim {

namespace col = ::asgd::collective;
using ::asgd::internal::StrCat;

namespace {

// gloo's reduction of a received value into the local one: sum(c, a, b) is c = a + b and
// max is std::max(a, b), with a the local value and b the received one.
template <col::ReduceOp kOp>
inline float Combine(float local, float received) {
  if constexpr (kOp == col::ReduceOp::kMax) {
    return std::max(local, received);
  } else {
    return local + received;
  }
}

// acc[i] = Combine(x[i], acc[i]): `x` is the local vector of the rank the partial result
// `acc` has just reached.
template <col::ReduceOp kOp>
void AddInto(float* __restrict acc, const float* __restrict x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] = Combine<kOp>(x[i], acc[i]);
}

// local[i] = Combine(local[i], received[i]).
template <col::ReduceOp kOp>
void ReduceInto(float* local, const float* received, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) local[i] = Combine<kOp>(local[i], received[i]);
}

// out[begin, end) = x[begin, end): the partial result of chunks starting at rank x.
void StartInto(float* out, const float* x, std::size_t begin, std::size_t end) {
  if (begin < end) std::memcpy(out + begin, x + begin, (end - begin) * sizeof(float));
}

// out[begin, end) = Combine(x, out) over [begin, end): the chunks there reach rank x.
template <col::ReduceOp kOp>
void FoldInto(float* out, const float* x, std::size_t begin, std::size_t end) {
  if (begin < end) AddInto<kOp>(out + begin, x + begin, end - begin);
}

// The ring and ring_chunked algorithms reduce every chunk along the ring from its own
// starting rank, one rank after another, and every rank ends with the chunk's result. Each
// chunk's chain is a sequence of ranks in cyclic order (ring: down from the rank before
// the chunk's own; ring_chunked: up from the chunk's rank), which splits into two runs in
// plain rank order: from its start to the end of the ranks, and from the other end to its
// last rank. So two sweeps over the ranks in that order, each rank's vector read as one
// contiguous range per sweep, fold every chunk in exactly its chain's order: the first
// sweep the first runs, the second sweep the second. The result goes into `out` (the
// allgather copies it to the ranks), and each rank's vector is read once in all, in order,
// instead of a chunk of every rank at a time.

// gloo::allreduce's ring (allreduce.cc), cut as col::GlooRingSegments says: chunk c
// (numSegments/N segments) = [c·C, (c+1)·C) clipped to the vector is sent first by rank
// c−1 to its left and reduced along the ring down to rank c: ranks c−1, c−2, ..., 0, then
// N−1, ..., c.
template <col::ReduceOp kOp>
void RingInto(std::span<const std::span<float>> data, float* out) {
  const uint64_t n = data.size();
  const uint64_t count = data[0].size();
  const uint64_t chunk_floats =
      col::GlooRingSegments(static_cast<int>(n), count).chunk_bytes / sizeof(float);
  // Where chunk c begins (c = N: where the last one ends; chunks cover the vector).
  auto at = [&](uint64_t c) { return static_cast<std::size_t>(std::min(c * chunk_floats, count)); };
  const float* x = nullptr;
  // Sweep 1, ranks N−2 down to 0: rank r starts chunk r+1 and is the next hop of chunks
  // r+2, ..., N−1 (whose chains began at ranks above r).
  for (uint64_t r = n - 1; r-- > 0;) {
    x = data[r].data();
    StartInto(out, x, at(r + 1), at(r + 2));
    FoldInto<kOp>(out, x, at(r + 2), at(n));
  }
  // Sweep 2, ranks N−1 down to 0: rank N−1 starts chunk 0; rank r is the next hop of the
  // chunks c <= r (their chains wrapped around from rank 0), chunk c's last at rank c.
  x = data[n - 1].data();
  StartInto(out, x, 0, at(1));
  FoldInto<kOp>(out, x, at(1), at(n));
  for (uint64_t r = n - 1; r-- > 0;) FoldInto<kOp>(out, data[r].data(), 0, at(r + 1));
}

// gloo::AllreduceRingChunked: 2N chunks of max(256, ⌈count/2N⌉) floats; rank r sends its
// chunks 2r and 2r+1 to the right first, so chunk k is reduced along r = ⌊k/2⌋, ⌊k/2⌋+1,
// ..., N−1, then 0, ..., ⌊k/2⌋−1.
template <col::ReduceOp kOp>
void RingChunkedInto(std::span<const std::span<float>> data, float* out) {
  const std::size_t n = data.size();
  const std::size_t count = data[0].size();
  const std::size_t chunks = 2 * n;
  const std::size_t chunk = std::max<std::size_t>(256, (count + chunks - 1) / chunks);
  auto at = [&](std::size_t k) { return std::min(k * chunk, count); };
  // Sweep 1, ranks 0 up to N−1: rank r starts chunks 2r and 2r+1 and is the next hop of
  // chunks 0, ..., 2r−1 (whose chains began at ranks below r).
  for (std::size_t r = 0; r < n; ++r) {
    const float* x = data[r].data();
    FoldInto<kOp>(out, x, 0, at(2 * r));
    StartInto(out, x, at(2 * r), at(2 * r + 2));
  }
  // Sweep 2, ranks 0 up to N−2: rank r is the next hop of the chunks that start above it
  // (their chains wrapped around from rank N−1), chunk k's last at rank ⌊k/2⌋−1.
  for (std::size_t r = 0; r + 1 < n; ++r) {
    FoldInto<kOp>(out, data[r].data(), at(2 * r + 2), at(chunks));
  }
}

template <col::ReduceOp kOp>
void RingOrderReduce(col::Algorithm algorithm, std::span<const std::span<float>> data, float* out) {
  if (algorithm == col::Algorithm::kRing) {
    RingInto<kOp>(data, out);
  } else {
    RingChunkedInto<kOp>(data, out);
  }
}

// gloo's reverseLastNBits: the last n bits of ctr in reverse order.
uint32_t ReverseLastBits(uint32_t ctr, uint32_t n) {
  uint32_t reversed = 0;
  for (uint32_t bit = 0; bit < n; ++bit) reversed = (reversed << 1) | ((ctr >> bit) & 1u);
  return reversed;
}

uint32_t Log2(uint64_t v) { return static_cast<uint32_t>(std::bit_width(v) - 1); }

// One rank's part of gloo::AllreduceHalvingDoubling, as its constructor computes it.
struct HdRank {
  uint32_t block_offset = 0, block_size = 0, steps_in_block = 0, rank_in_block = 0;
  uint32_t smaller_block = 0, larger_block = 0;
  std::vector<std::size_t> send_offset, recv_offset, send_count, recv_count;
  std::size_t send_count_to_larger = 0;
  std::vector<int> larger_dest;  // the ranks of the larger block it sends its parts to
  int smaller_dest = -1;         // the rank of the smaller block it receives from

  // The part it holds after its reduce-scatter: its offset and length.
  std::size_t HeldOffset() const { return steps_in_block > 0 ? recv_offset.back() : 0; }
  std::size_t HeldCount(std::size_t count) const {
    return steps_in_block > 0 ? recv_count.back() : count;
  }
};

HdRank PlanHalvingDoubling(int rank, int size, std::size_t count) {
  HdRank h;
  const auto r = static_cast<uint32_t>(rank);
  const auto n = static_cast<uint32_t>(size);
  // initBinaryBlocks: the binary blocks of N from the smallest (highest ranks) up.
  uint32_t offset = n, block = 1, current = 0, previous = 0;
  do {
    if ((n & block) != 0) {
      previous = current;
      current = block;
      offset -= block;
      if (h.block_size != 0) {
        h.larger_block = current;
        break;
      }
      if (offset <= r) {
        h.block_offset = offset;
        h.block_size = current;
        h.smaller_block = previous;
      }
    }
    block <<= 1;
  } while (offset != 0);
  h.steps_in_block = Log2(h.block_size);
  h.rank_in_block = r % h.block_size;

  const uint32_t steps = Log2(n);
  const std::size_t chunks = std::size_t{1} << steps;
  const std::size_t chunk = (count + chunks - 1) / chunks;
  std::size_t step_chunk = chunk << (steps - 1);
  std::size_t send_offset = 0, recv_offset = 0;
  uint32_t bitmask = 1;
  for (uint32_t i = 0; i < h.steps_in_block; ++i) {
    const uint32_t dest = r ^ bitmask;
    const std::size_t so = send_offset + ((dest & bitmask) != 0 ? step_chunk : 0);
    const std::size_t ro = recv_offset + ((r & bitmask) != 0 ? step_chunk : 0);
    h.send_offset.push_back(so);
    h.recv_offset.push_back(ro);
    h.send_count.push_back(so < count ? std::min(step_chunk, count - so) : 0);
    h.recv_count.push_back(ro < count ? std::min(step_chunk, count - ro) : 0);
    if ((r & bitmask) != 0) {
      send_offset += step_chunk;
      recv_offset += step_chunk;
    }
    bitmask <<= 1;
    step_chunk >>= 1;
  }
  if (h.smaller_block != 0) {
    h.smaller_dest =
        static_cast<int>(h.block_offset + h.block_size + h.rank_in_block % h.smaller_block);
  }
  if (h.larger_block != 0) {
    const uint32_t larger_offset = h.block_offset - h.larger_block;
    const uint32_t parts = h.larger_block / h.block_size;
    h.send_count_to_larger = step_chunk >> (Log2(parts) - 1);
    const uint32_t source = ReverseLastBits(h.rank_in_block, h.steps_in_block);
    for (uint32_t i = 0; i < parts; ++i) {
      h.larger_dest.push_back(static_cast<int>(
          larger_offset + ReverseLastBits(source * parts + i, Log2(h.larger_block))));
    }
  }
  return h;
}

template <col::ReduceOp kOp>
void HalvingDoubling(std::span<const std::span<float>> data) {
  const int n = static_cast<int>(data.size());
  const std::size_t count = data[0].size();
  std::vector<HdRank> plan;
  plan.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) plan.push_back(PlanHalvingDoubling(r, n, count));
  auto at = [&](int r, std::size_t offset) {
    return data[static_cast<std::size_t>(r)].data() + offset;
  };
  auto hd = [&](int r) -> const HdRank& { return plan[static_cast<std::size_t>(r)]; };
  // The blocks' first ranks, largest block (rank 0) first.
  std::vector<int> blocks;
  for (int r = 0; r < n; r += static_cast<int>(hd(r).block_size)) blocks.push_back(r);

  // Recursive halving inside each block: at step i partners r and r ^ 2^i exchange the
  // halves of their current range, each reducing the half it keeps (step by step: a
  // step's exchange carries what the previous steps reduced).
  const uint32_t max_steps = hd(0).steps_in_block;  // rank 0's block is the largest
  for (uint32_t i = 0; i < max_steps; ++i) {
    for (int r = 0; r < n; ++r) {
      const HdRank& me = hd(r);
      if (i >= me.steps_in_block) continue;
      const int p = r ^ (1 << i);
      if (p < r) continue;  // the pair is handled from its lower rank
      const HdRank& peer = hd(p);
      ASGD_CHECK(
          me.recv_offset[i] == peer.send_offset[i] && me.recv_count[i] == peer.send_count[i] &&
          peer.recv_offset[i] == me.send_offset[i] && peer.recv_count[i] == me.send_count[i]);
      // Disjoint halves: neither reduction reads what the other writes.
      if (me.recv_offset[i] < count) {
        ReduceInto<kOp>(at(r, me.recv_offset[i]), at(p, me.recv_offset[i]), me.recv_count[i]);
      }
      if (peer.recv_offset[i] < count) {
        ReduceInto<kOp>(at(p, peer.recv_offset[i]), at(r, peer.recv_offset[i]), peer.recv_count[i]);
      }
    }
  }
  // The part a rank of a smaller block sends to the i-th rank of the next larger block:
  // its offset and length (length 0: none).
  auto part_to_larger = [&](int s, std::size_t i) -> std::pair<std::size_t, std::size_t> {
    const HdRank& small = hd(s);
    const std::size_t total = small.HeldCount(count);
    const std::size_t each = small.send_count_to_larger;
    if (total == 0 || each * i >= total) return {0, 0};
    return {small.HeldOffset() + each * i, std::min(each, total - each * i)};
  };
  // Up the cascade, smallest block first: each rank of a larger block adds in the part of
  // its smaller-block partner (which holds its own smaller block's sum already).
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    const HdRank& first = hd(*b);
    if (first.smaller_block == 0) continue;
    for (int r = *b; r < *b + static_cast<int>(first.block_size); ++r) {
      const HdRank& me = hd(r);
      const std::size_t items = me.recv_count.back();
      if (items == 0) continue;
      const int s = me.smaller_dest;
      const auto& dests = hd(s).larger_dest;
      const auto it = std::find(dests.begin(), dests.end(), r);
      ASGD_CHECK(it != dests.end());
      const auto [from, len] = part_to_larger(s, static_cast<std::size_t>(it - dests.begin()));
      ASGD_CHECK(len == items && from == me.recv_offset.back());
      ReduceInto<kOp>(at(r, me.recv_offset.back()), at(s, from), items);
    }
  }
  // Down the cascade, largest block first: each rank of a smaller block copies the result
  // of its parts from the larger block's ranks.
  for (int b : blocks) {
    const HdRank& first = hd(b);
    if (first.larger_block == 0) continue;
    for (int s = b; s < b + static_cast<int>(first.block_size); ++s) {
      const HdRank& me = hd(s);
      for (std::size_t i = 0; i < me.larger_dest.size(); ++i) {
        const auto [to, len] = part_to_larger(s, i);
        if (len == 0) continue;
        const int l = me.larger_dest[i];
        const HdRank& larger = hd(l);
        ASGD_CHECK(larger.recv_count.back() == len && larger.recv_offset.back() == to);
        std::memcpy(at(s, to), at(l, larger.recv_offset.back()), len * sizeof(float));
      }
    }
  }
  // Recursive doubling inside each block, last step first: partners swap the ranges they
  // reduced.
  for (uint32_t k = max_steps; k-- > 0;) {
    for (int r = 0; r < n; ++r) {
      const HdRank& me = hd(r);
      if (k >= me.steps_in_block) continue;
      const int p = r ^ (1 << k);
      if (p < r) continue;
      const HdRank& peer = hd(p);
      if (me.send_offset[k] < count) {
        std::memcpy(at(r, me.send_offset[k]), at(p, peer.recv_offset[k]),
                    me.send_count[k] * sizeof(float));
      }
      if (peer.send_offset[k] < count) {
        std::memcpy(at(p, peer.send_offset[k]), at(r, me.recv_offset[k]),
                    peer.send_count[k] * sizeof(float));
      }
    }
  }
}

// Calls f(the ranks' parts, offset) for each piece gloo_collective.cc reduces as one call
// (col::ForEachAllreducePiece), in order.
template <typename F>
void ForEachPiece(col::Algorithm algorithm, std::span<const std::span<float>> data, const F& f) {
  const std::size_t max = col::AllreducePieceFloats(algorithm, static_cast<int>(data.size()));
  if (max == 0 || data[0].size() <= max) {
    f(data, 0);  // one piece: the ranks' vectors themselves
    return;
  }
  std::vector<std::span<float>> piece(data.size());
  col::ForEachAllreducePiece(algorithm, static_cast<int>(data.size()), data[0].size(),
                             [&](std::size_t at, std::size_t n) {
                               for (std::size_t r = 0; r < data.size(); ++r) {
                                 piece[r] = data[r].subspan(at, n);
                               }
                               f(std::span<const std::span<float>>(piece), at);
                             });
}

}  // namespace

bool ReducesToOneResult(col::Algorithm algorithm) {
  return algorithm == col::Algorithm::kRing || algorithm == col::Algorithm::kRingChunked;
}

void GlooOrderReduce(col::Algorithm algorithm, std::span<const std::span<float>> data,
                     col::ReduceOp op, std::span<float> out) {
  ASGD_CHECK(!data.empty() && ReducesToOneResult(algorithm));
  for (const auto& d : data) ASGD_CHECK_EQ(d.size(), data[0].size(), "allreduce lengths");
  ASGD_CHECK_EQ(out.size(), data[0].size(), "the result's length");
  for (const auto& d : data) {
    const auto o = reinterpret_cast<std::uintptr_t>(out.data());
    const auto v = reinterpret_cast<std::uintptr_t>(d.data());
    ASGD_CHECK(o + out.size_bytes() <= v || v + d.size_bytes() <= o,
               "the result overlaps a rank's vector");
  }
  if (out.empty()) return;
  if (data.size() == 1) {
    std::copy(data[0].begin(), data[0].end(), out.begin());
    return;
  }
  ForEachPiece(algorithm, data, [&](std::span<const std::span<float>> piece, std::size_t at) {
    if (op == col::ReduceOp::kMax) {
      RingOrderReduce<col::ReduceOp::kMax>(algorithm, piece, out.data() + at);
    } else {
      RingOrderReduce<col::ReduceOp::kSum>(algorithm, piece, out.data() + at);
    }
  });
}

void GlooOrderAllreduce(col::Algorithm algorithm, std::span<const std::span<float>> data,
                        col::ReduceOp op) {
  ASGD_CHECK(!data.empty());
  for (const auto& d : data) ASGD_CHECK_EQ(d.size(), data[0].size(), "allreduce lengths");
  if (data.size() == 1 || data[0].empty()) return;
  if (ReducesToOneResult(algorithm)) {
    std::vector<float> result(data[0].size());
    GlooOrderReduce(algorithm, data, op, result);
    for (const std::span<float>& d : data) std::copy(result.begin(), result.end(), d.begin());
  } else {
    ForEachPiece(algorithm, data, [&](std::span<const std::span<float>> piece, std::size_t) {
      if (op == col::ReduceOp::kMax) {
        HalvingDoubling<col::ReduceOp::kMax>(piece);
      } else {
        HalvingDoubling<col::ReduceOp::kSum>(piece);
      }
    });
  }
}

namespace {

Duration TransferTime(int64_t bytes, double rate) {
  if (std::isinf(rate) || bytes == 0) return Duration::zero();
  return Duration(
      static_cast<Duration::rep>(std::llround(static_cast<double>(bytes) / rate * 1e9)));
}

int64_t CeilDiv(std::size_t a, std::size_t b) { return static_cast<int64_t>((a + b - 1) / b); }

}  // namespace

namespace {

// The steps of one piece (AllreduceSteps of a vector that is one piece).
std::vector<StepRun> PieceSteps(col::Algorithm algorithm, int size, std::size_t count) {
  std::vector<StepRun> runs;
  if (size <= 1 || count == 0) return runs;
  const auto n = static_cast<std::size_t>(size);
  const auto floats = [](int64_t f) { return f * static_cast<int64_t>(sizeof(float)); };
  const int64_t ring_steps = 2 * static_cast<int64_t>(size - 1);
  switch (algorithm) {
    case col::Algorithm::kRing: {
      // Each step moves every chunk of gloo's segments over one link, so it lasts as long
      // as the largest, chunk 0: (S/N)·segment bytes, at most the vector; ⌈n/N⌉ floats up
      // to the rounding of segments to whole floats.
      const uint64_t chunk =
          std::min<uint64_t>(col::GlooRingSegments(size, count).chunk_bytes, count * sizeof(float));
      runs.push_back({static_cast<int64_t>(chunk), ring_steps});
      break;
    }
    case col::Algorithm::kRingChunked:
      runs.push_back({floats(CeilDiv(count, n)), ring_steps});
      break;
    case col::Algorithm::kHalvingDoubling: {
      const uint32_t k = Log2(n);
      for (uint32_t i = 1; i <= k; ++i)
        runs.push_back({floats(CeilDiv(count, std::size_t{1} << i)), 2});
      for (uint32_t b = 0; b < k; ++b) {
        if ((n >> b) & 1u) runs.push_back({floats(CeilDiv(count, std::size_t{1} << b)), 2});
      }
      break;
    }
  }
  return runs;
}

}  // namespace

// A vector of several pieces takes every full piece's steps one piece after another, then
// the last piece's.
std::vector<StepRun> AllreduceSteps(col::Algorithm algorithm, int size, std::size_t count) {
  const std::size_t max = col::AllreducePieceFloats(algorithm, size);
  if (max == 0 || count <= max) return PieceSteps(algorithm, size, count);
  std::vector<StepRun> runs = PieceSteps(algorithm, size, max);
  const auto full = static_cast<int64_t>(count / max);
  for (StepRun& r : runs) r.steps *= full;
  const std::vector<StepRun> rest = PieceSteps(algorithm, size, count % max);
  runs.insert(runs.end(), rest.begin(), rest.end());
  return runs;
}

Duration AllreduceTime(col::Algorithm algorithm, int size, std::size_t count, Duration latency,
                       double payload_rate) {
  Duration t{};
  for (const StepRun& r : AllreduceSteps(algorithm, size, count)) {
    t += r.steps * (latency + TransferTime(r.bytes, payload_rate));
  }
  return t;
}

// ---- the group ----------------------------------------------------------------------

struct SimCollectiveGroup::Channel {
  struct Pending {
    uint32_t tag = 0;
    int rank = 0;  // the waiting side
    std::span<const float> out;
    std::span<float> in;
  };
  std::deque<Pending> sends, recvs;  // waiting, oldest first
};

class SimCollective final : public col::Collective {
 public:
  SimCollective(SimCollectiveGroup* group, int rank, bool timed)
      : Collective(rank, group->size(), group->algorithm_), group_(group), timed_(timed) {}

 protected:
  col::Traffic DoAllreduce(std::span<float> data, col::ReduceOp op) override {
    return group_->Allreduce(rank(), timed_, data, op, nullptr);
  }
  col::Traffic DoAllreduceView(std::span<float> data, col::ReduceOp op,
                               std::span<const float>* result) override {
    return group_->Allreduce(rank(), timed_, data, op, result);
  }
  col::Traffic DoBroadcast(std::span<float> data, int root) override {
    group_->Broadcast(rank(), timed_, data, root);
    const uint64_t bytes = data.size_bytes();
    if (rank() == root) return {bytes * static_cast<uint64_t>(size() - 1), 0};
    return {0, bytes};
  }
  void DoBarrier() override { group_->Barrier(rank(), timed_); }
  void DoSend(int peer, std::span<const float> data, uint32_t tag) override {
    RefuseUntimed(StrCat("send (to rank ", peer, ", tag ", tag, ")"));
    group_->Send(rank(), peer, data, tag);
  }
  void DoRecv(int peer, std::span<float> data, uint32_t tag) override {
    RefuseUntimed(StrCat("recv (from rank ", peer, ", tag ", tag, ")"));
    group_->Recv(rank(), peer, data, tag);
  }

 private:
  void RefuseUntimed(const std::string& what) const {
    if (!timed_) {
      throw col::CollectiveError(rank(), what,
                                 "an untimed handle of a simulated group sends no messages");
    }
  }

  SimCollectiveGroup* group_;
  bool timed_;
};

SimCollectiveGroup::SimCollectiveGroup(Scheduler* sched, const NetworkOptions& network, int size,
                                       col::Algorithm algorithm)
    : sched_(sched),
      latency_(network.latency),
      rate_(network.link_bandwidth * network.goodput),
      size_(size),
      algorithm_(algorithm) {
  network.Validate();
  ASGD_CHECK(sched != nullptr && size >= 1);
  const auto n = static_cast<std::size_t>(size);
  spans_.resize(n);
  blocked_.assign(n, 0);
  task_of_.assign(n, kNoTask);
  tx_free_.assign(n, Duration::zero());
  rx_free_.assign(n, Duration::zero());
}

SimCollectiveGroup::~SimCollectiveGroup() = default;

std::unique_ptr<col::Collective> SimCollectiveGroup::Rank(int r, bool timed) {
  ASGD_CHECK(r >= 0 && r < size_, "rank ", r, " of ", size_);
  return std::make_unique<SimCollective>(this, r, timed);
}

void SimCollectiveGroup::Shutdown() {
  shut_ = true;
  for (std::size_t r = 0; r < blocked_.size(); ++r) {
    if (blocked_[r] != 0 && sched_->IsBlocked(task_of_[r])) sched_->Wake(task_of_[r]);
  }
}

void SimCollectiveGroup::ThrowIfShut(int rank, const std::string& what) const {
  if (shut_) {
    throw col::CollectiveError(rank, what,
                               "a peer left the simulated group (it failed or stopped)");
  }
}

void SimCollectiveGroup::BlockRank(int rank, const std::string& what) {
  const auto r = static_cast<std::size_t>(rank);
  blocked_[r] = 1;
  task_of_[r] = sched_->Current();
  sched_->Block();
  // Still marked: woken by Shutdown, not by the operation's completion.
  if (blocked_[r] != 0) {
    blocked_[r] = 0;
    ThrowIfShut(rank, what);
  }
}

void SimCollectiveGroup::Release(int rank, Duration at) {
  const auto r = static_cast<std::size_t>(rank);
  blocked_[r] = 0;
  sched_->WakeAt(task_of_[r], at);
}

template <typename Complete>
void SimCollectiveGroup::Meet(int rank, Kind kind, std::size_t count, col::ReduceOp op, int root,
                              bool timed, std::span<float> data, const std::string& what,
                              const Complete& complete) {
  ThrowIfShut(rank, what);
  const Duration now = sched_->Now();
  if (arrived_ == 0) {
    kind_ = kind;
    count_ = count;
    op_ = op;
    root_ = root;
    timed_ = timed;
    first_arrival_ = now;
    arrival_sum_ = Duration::zero();
  } else if (kind_ != kind || count_ != count || op_ != op || root_ != root) {
    throw col::CollectiveError(
        rank, what,
        StrCat("the ranks called different operations (another rank is in an operation of ", count_,
               " floats; every rank must issue the same sequence of calls)"));
  } else if (timed_ != timed) {
    throw col::CollectiveError(
        rank, what,
        StrCat("the ranks joined it through ", timed_ ? "timed" : "untimed", " and ",
               timed ? "timed" : "untimed", " handles (every rank must use handles alike)"));
  }
  spans_[static_cast<std::size_t>(rank)] = data;
  arrival_sum_ += now - first_arrival_;
  if (++arrived_ < size_) {
    BlockRank(rank, what);
    return;
  }
  // The last rank: the operation runs from here, and every rank resumes at its end.
  Duration took = complete();
  if (!timed) took = Duration::zero();
  const Duration end = now + took;
  ++stats_.operations;
  stats_.time += took;
  // Every rank waited from its arrival to the last one's.
  stats_.waited += static_cast<int64_t>(size_) * (now - first_arrival_) - arrival_sum_;
  arrived_ = 0;
  kind_ = Kind::kNone;
  for (int r = 0; r < size_; ++r) {
    if (r != rank) Release(r, end);
  }
  sched_->Sleep(took);
}

col::Traffic SimCollectiveGroup::Allreduce(int rank, bool timed, std::span<float> data,
                                           col::ReduceOp op, std::span<const float>* view) {
  const std::size_t count = data.size();
  // Ring and ring_chunked leave every rank one result: it is computed once, and each rank
  // copies it when it resumes (N copies either way, but each into a vector its rank is
  // about to use).
  const bool one_result = size_ > 1 && count > 0 && ReducesToOneResult(algorithm_);
  Meet(rank, Kind::kAllreduce, count, op, 0, timed, data,
       StrCat("allreduce (", col::AlgorithmName(algorithm_), ", ", count, " floats)"), [&] {
         if (one_result) {
           result_.resize(count);
           GlooOrderReduce(algorithm_, spans_, op, result_);
         } else {
           GlooOrderAllreduce(algorithm_, spans_, op);
         }
         if (cores_ != nullptr) {
           return ChargedSteps(sched_->Now(), AllreduceSteps(algorithm_, size_, count));
         }
         return AllreduceTime(algorithm_, size_, count, latency_, rate_);
       });
  // No rank can start the next operation before every rank has copied (or, for a view,
  // read) this one's result.
  if (view != nullptr) *view = one_result ? std::span<const float>(result_) : data;
  if (one_result && view == nullptr) std::copy(result_.begin(), result_.end(), data.begin());
  return col::ExpectedAllreduceBytes(algorithm_, rank, size_, count);
}

void SimCollectiveGroup::Broadcast(int rank, bool timed, std::span<float> data, int root) {
  const std::size_t count = data.size();
  Meet(rank, Kind::kBroadcast, count, col::ReduceOp::kSum, root, timed, data,
       StrCat("broadcast (root ", root, ", ", count, " floats)"), [&] {
         const std::span<float> from = spans_[static_cast<std::size_t>(root)];
         for (const std::span<float>& to : spans_) {
           if (to.data() != from.data()) std::copy(from.begin(), from.end(), to.begin());
         }
         const auto bytes = static_cast<int64_t>(from.size_bytes());
         if (cores_ != nullptr && size_ > 1) {
           // The root's sends one after the other (its charge, then the wire), then the
           // last receiver's charge.
           const Duration now = sched_->Now();
           Duration t = now;
           for (int i = 1; i < size_; ++i) t = Charge(t, 1, bytes) + TransferTime(bytes, rate_);
           return Charge(t + latency_, 1, bytes) - now;
         }
         return latency_ + static_cast<int64_t>(size_ - 1) * TransferTime(bytes, rate_);
       });
}

void SimCollectiveGroup::Barrier(int rank, bool timed) {
  Meet(rank, Kind::kBarrier, 0, col::ReduceOp::kSum, 0, timed, {}, "barrier", [&] {
    const auto rounds = static_cast<int64_t>(std::bit_width(static_cast<uint32_t>(size_ - 1)));
    if (cores_ != nullptr) {
      const StepRun run{0, 2 * rounds};
      return ChargedSteps(sched_->Now(), {&run, 1});
    }
    return 2 * rounds * latency_;
  });
}

std::pair<Duration, Duration> SimCollectiveGroup::Transfer(int from, int to, int64_t bytes) {
  Duration& tx = tx_free_[static_cast<std::size_t>(from)];
  Duration& rx = rx_free_[static_cast<std::size_t>(to)];
  // With a CPU charge the message goes on the wire when the sender's charge ends, and is
  // received when the receiver's charge after its arrival ends.
  const Duration handed = cores_ != nullptr ? Charge(sched_->Now(), 1, bytes) : sched_->Now();
  const Duration start = std::max({handed, tx, rx - latency_});
  const Duration end = start + TransferTime(bytes, rate_);
  tx = end;
  rx = end + latency_;
  const Duration arrived = end + latency_;
  return {end, cores_ != nullptr ? Charge(arrived, 1, bytes) : arrived};
}

void SimCollectiveGroup::ChargeHostCpu(CorePool* cores, const TransportCpu& cpu) {
  cpu.Validate();
  cpu_ = cpu;
  cores_ = cpu.active() ? cores : nullptr;
  ASGD_CHECK(!cpu.active() || cores != nullptr, "SimCollectiveGroup: a CPU charge needs cores");
}

Duration SimCollectiveGroup::Charge(Duration t, int jobs, int64_t bytes) {
  const Duration work = cpu_.Cost(bytes);
  Duration end = t;
  for (int j = 0; j < jobs; ++j) end = std::max(end, cores_->Run(t, work));
  return end;
}

Duration SimCollectiveGroup::ChargedSteps(Duration now, std::span<const StepRun> runs) {
  Duration t = now;
  for (const StepRun& r : runs) {
    for (int64_t i = 0; i < r.steps; ++i) {
      t = Charge(t, size_, r.bytes) + latency_ + TransferTime(r.bytes, rate_);
      t = Charge(t, size_, r.bytes);
    }
  }
  return t - now;
}

SimCollectiveGroup::Channel& SimCollectiveGroup::ChannelOf(int from, int to) {
  const uint64_t key =
      static_cast<uint64_t>(from) * static_cast<uint64_t>(size_) + static_cast<uint64_t>(to);
  std::unique_ptr<Channel>& c = channels_[key];
  if (!c) c = std::make_unique<Channel>();
  return *c;
}

namespace {

void CheckLengths(int rank, const std::string& what, std::size_t sent, std::size_t expected) {
  if (sent != expected) {
    throw col::CollectiveError(
        rank, what, StrCat("the message has ", sent, " floats, the receive expects ", expected));
  }
}

}  // namespace

void SimCollectiveGroup::Send(int rank, int peer, std::span<const float> data, uint32_t tag) {
  const std::string what = StrCat("send (to rank ", peer, ", tag ", tag, ")");
  ThrowIfShut(rank, what);
  Channel& c = ChannelOf(rank, peer);
  auto it = std::find_if(c.recvs.begin(), c.recvs.end(),
                         [&](const Channel::Pending& p) { return p.tag == tag; });
  if (it == c.recvs.end()) {
    c.sends.push_back({tag, rank, data, {}});
    BlockRank(rank, what);  // the receiver copies and wakes us when the bytes have left
    return;
  }
  const Channel::Pending recv = *it;
  c.recvs.erase(it);
  CheckLengths(rank, what, data.size(), recv.in.size());
  std::copy(data.begin(), data.end(), recv.in.begin());
  const auto [sent, arrived] = Transfer(rank, peer, static_cast<int64_t>(data.size_bytes()));
  Release(peer, arrived);
  sched_->Sleep(sent - sched_->Now());
}

void SimCollectiveGroup::Recv(int rank, int peer, std::span<float> data, uint32_t tag) {
  const std::string what = StrCat("recv (from rank ", peer, ", tag ", tag, ")");
  ThrowIfShut(rank, what);
  Channel& c = ChannelOf(peer, rank);
  auto it = std::find_if(c.sends.begin(), c.sends.end(),
                         [&](const Channel::Pending& p) { return p.tag == tag; });
  if (it == c.sends.end()) {
    c.recvs.push_back({tag, rank, {}, data});
    BlockRank(rank, what);  // the sender copies and wakes us when the bytes have arrived
    return;
  }
  const Channel::Pending send = *it;
  c.sends.erase(it);
  CheckLengths(rank, what, send.out.size(), data.size());
  std::copy(send.out.begin(), send.out.end(), data.begin());
  const auto [sent, arrived] = Transfer(peer, rank, static_cast<int64_t>(send.out.size_bytes()));
  Release(peer, sent);
  sched_->Sleep(arrived - sched_->Now());
}

}  // namespace asgd::sim
