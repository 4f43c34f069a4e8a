// Collective operations among the N ranks of one training run: allreduce, broadcast,
// barrier and point-to-point send/recv of float spans, implemented on gloo.
//
// gloo does the work: its allreduce algorithms and its TCP transport. This layer adds what
// the strategies need around them: one options struct validated once, a choice of gloo
// algorithm by name (`collective.algorithm`), payload byte counters like the parameter
// server's, and one error type (CollectiveError) for everything gloo throws, naming the
// rank and the operation. No gloo header is included here; the gloo implementation lives
// in gloo_collective.cc behind Connect().
//
// Thread-safety: a Collective is used by one thread at a time (it is one rank's handle,
// like a socket); Counters() may be read from any thread. Every rank must issue the same
// sequence of collective calls with the same sizes (as with MPI and gloo): the calls are
// matched by order, not by name. At the end of a run call Barrier() before destroying the
// handles: a rank that closes its connections while a peer is still finishing an
// operation makes that peer fail with "connection closed" (gloo's halving_doubling
// returns before its last notifications are read).
//
// Rendezvous. Ranks find each other through a store (key/value, written once, read with
// a wait): NewFileRendezvous(dir) for processes sharing a file system (`asgd launch` on
// one host, SLURM or mpirun on a shared folder), NewInMemoryRendezvous() for the threads
// of one process (`asgd run`, the tests). For threads we still use gloo's TCP transport
// over loopback rather than an in-process shortcut: gloo has no shared-memory transport
// for CPU tensors, and going through the same TCP pairs as a multi-process run means the
// in-process run exercises exactly the code, framing, timeouts and failure paths of a
// real cluster, at the cost of a loopback copy. Only the store is in memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/error.h"

namespace asgd::collective {

// gloo's allreduce algorithms (the config value in parentheses).
enum class Algorithm {
  // (ring) gloo::allreduce with the ring algorithm: reduce-scatter then allgather around
  // the ring, in segments of at most 1 MiB, two in flight. Bandwidth-optimal: 2(N-1)/N x
  // the vector's bytes per rank (ExpectedAllreduceBytes).
  kRing,
  // (ring_chunked) gloo::AllreduceRingChunked: the ring with 2N chunks, sending in both
  // directions at once.
  kRingChunked,
  // (halving_doubling) gloo::AllreduceHalvingDoubling: recursive halving reduce-scatter
  // and doubling allgather, log2(N) steps; non-power-of-two N is split into binary blocks.
  kHalvingDoubling,
};

// "ring", "ring_chunked", "halving_doubling".
std::string_view AlgorithmName(Algorithm algorithm);
// The inverse of AlgorithmName. Throws ConfigError naming `collective.algorithm`.
Algorithm ParseAlgorithm(std::string_view value);

enum class ReduceOp {
  kSum,   // elementwise sum over ranks
  kMean,  // the sum divided by the number of ranks (a division, so exact when the mean is
          // representable, e.g. small integers whose sum is a multiple of N)
  kMax,   // elementwise maximum over ranks (exact: no rounding)
};

struct CollectiveOptions {
  // collective.rank: this rank, 0 <= rank < size.
  int rank = 0;
  // collective.size: the number of ranks, >= 1.
  int size = 1;
  // collective.timeout_ms: how long any one operation (rendezvous included) may wait for
  // a peer before it fails with a CollectiveError. > 0.
  std::chrono::milliseconds timeout{30000};
  // collective.algorithm: the gloo allreduce algorithm. halving_doubling by default: its
  // objects of small vectors run on synchronous pairs, which ring's cannot (the per-call
  // cost; collective/README.md, "Per-call cost"), and it takes log2(N) steps.
  Algorithm algorithm = Algorithm::kHalvingDoubling;
  // collective.host: the address this rank listens on and announces to its peers (an IP
  // address or a host name that resolves). Tests use 127.0.0.1. Not empty.
  std::string host = "127.0.0.1";

  // Throws ConfigError naming the first bad key ("collective.rank", ...).
  void Validate() const;
};

// A collective operation failed: a peer died or closed its connection, a peer did not
// answer within the timeout, or gloo refused the call. The handle is unusable afterwards
// (every later call throws the same error): a collective cannot lose a member. An
// InputError, so the CLI prints it as one line and exits with status 2:
//   "collective: rank 1: allreduce (ring, 4096 floats) failed: Timed out waiting 2000ms ..."
class CollectiveError : public InputError {
 public:
  CollectiveError(int rank, std::string operation, const std::string& detail);

  int rank() const { return rank_; }
  // "connect", "allreduce", "broadcast", "barrier", "send", "recv".
  const std::string& operation() const { return operation_; }

 private:
  int rank_;
  std::string operation_;
};

// Payload bytes this rank handed to gloo to send and expected to receive, summed over
// operations. gloo does not report bytes, so they are derived from each operation's known
// pattern (what this layer asks gloo to move), not measured on the wire; gloo's framing
// headers and the zero-byte notifications of its algorithms are not counted:
//   allreduce   ExpectedAllreduceBytes (below)
//   broadcast   gloo::BroadcastOneToAll: the root sends the span to each of the N-1 others,
//               each other rank receives it once
//   barrier     0
//   send/recv   the span's bytes
struct CollectiveCounters {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t allreduces = 0;
  uint64_t broadcasts = 0;
  uint64_t barriers = 0;
  uint64_t sends = 0;
  uint64_t recvs = 0;
};

struct Traffic {
  uint64_t sent = 0;
  uint64_t received = 0;
};

// The payload one allreduce of `count` floats moves at `rank` of `size`, by algorithm:
//   ring              gloo's segment schedule, exactly: S = roundUp(max(ceil(bytes/1 MiB),
//                     2N), N) segments of roundUp(ceil(bytes/S), 4) bytes, S/N to each
//                     rank's chunk; per phase a rank sends S - S/N segments (every one but
//                     its own chunk's in reduce-scatter, but its left neighbour's in
//                     allgather), so 2 x the vector's bytes less those two chunks: 2(N-1)/N
//                     x the vector's bytes up to the rounding of segments to whole floats,
//                     at any size. It receives what its right neighbour sends.
//   ring_chunked      gloo's chunk schedule replayed exactly: 4N-4 chunks of ceil(count/2N)
//                     floats (at least 256), clipped at the end of the vector; about
//                     2(N-1)/N x the vector's bytes.
//   halving_doubling  nominal 2(N-1)/N x the vector's bytes (floor). Exact up to rounding
//                     for power-of-two N; for other N gloo also exchanges between binary
//                     blocks, which this figure does not include.
// N = 1 or count = 0 moves nothing. A vector longer than one piece (AllreducePieceFloats)
// moves the sum of its pieces' payloads.
Traffic ExpectedAllreduceBytes(Algorithm algorithm, int rank, int size, std::size_t count);

// The largest piece of one halving_doubling allreduce on `size` ranks: a longer vector is
// reduced as consecutive pieces of this many floats (the last one shorter), one call of
// gloo's algorithm each, in order, so that every piece runs on the synchronous pairs
// (collective/README.md, "Per-call cost"): 256 KiB. Every rank cuts alike (the length
// alone decides), and the simulator replays the same pieces. 0: no pieces (one rank;
// ring, which cannot use synchronous pairs; ring_chunked, whose 2(N−1) steps per call make
// pieces slower than the whole vector on the asynchronous pairs at 16 MiB and 4 ranks).
std::size_t AllreducePieceFloats(Algorithm algorithm, int size);

// Calls piece(offset, count) for each piece of a vector of `count` floats, in order (one
// call for the whole vector when AllreducePieceFloats is 0 or count fits in one).
template <typename Piece>
void ForEachAllreducePiece(Algorithm algorithm, int size, std::size_t count, const Piece& piece) {
  const std::size_t max = AllreducePieceFloats(algorithm, size);
  if (max == 0 || count <= max) {
    piece(std::size_t{0}, count);
    return;
  }
  for (std::size_t offset = 0; offset < count; offset += max) {
    piece(offset, count - offset < max ? count - offset : max);
  }
}

// How gloo::allreduce's ring (collective.algorithm = ring) cuts a vector of `count` floats
// on `size` ranks: `segments` = roundUp(max(ceil(bytes / 1 MiB), 2N), N) segments of
// `segment_bytes` = roundUp(ceil(bytes / segments), 4) bytes, segments / N to a chunk of
// `chunk_bytes`; chunk c is [c, c+1) x chunk_bytes clipped at the end of the vector (the
// last chunks may be short or empty), and rank c ends the reduce-scatter holding chunk c
// reduced. In each phase a rank sends every chunk but one, one chunk per step.
// All zero for size <= 1 or count == 0.
struct RingSegments {
  uint64_t segments = 0;
  uint64_t segment_bytes = 0;
  uint64_t chunk_bytes = 0;
};
RingSegments GlooRingSegments(int size, std::size_t count);

// Where ranks meet. Opaque; create with the functions below and share one among the
// ranks of one group (threads) or point all processes at the same folder.
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
};

// For the threads of one process: an in-memory store shared by the ranks that are given
// this object. Each group of ranks needs its own.
std::shared_ptr<Rendezvous> NewInMemoryRendezvous();
// For processes: gloo's file store in `dir`, which must exist and be visible to every rank
// and be empty or private to this group (use one folder per run). Throws ConfigError
// (`collective.rendezvous_dir`) if dir is not a folder.
std::shared_ptr<Rendezvous> NewFileRendezvous(const std::string& dir);

class Collective {
 public:
  virtual ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Algorithm algorithm() const { return algorithm_; }

  // Every rank's `data` becomes the elementwise reduction over ranks, in place. All ranks
  // pass spans of equal length (not checked across ranks; a mismatch is undefined, as in
  // gloo). Every algorithm accepts any N >= 1 (halving_doubling splits a non-power-of-two
  // N into binary blocks); ring_chunked and halving_doubling take at most 2^31-1 floats
  // (gloo's int count), more is a CollectiveError. Throws CollectiveError.
  void Allreduce(std::span<float> data, ReduceOp op = ReduceOp::kSum);
  // The same allreduce, for a caller that may only read its result: returns the result,
  // valid until this rank's next call on this collective. The default is Allreduce(data,
  // op), returning data. A simulated group whose ranks end with one result (ring and
  // ring_chunked, sim/sim_collective.h) returns that one copy and leaves `data` as it was
  // (it saves the N copies into the ranks' vectors: what lets allreduce_sgd's identical
  // replicas be simulated as one, algorithms/collective_worker.h). The byte counters count
  // it as an Allreduce. REQUIRES op != kMean (the caller divides). Throws CollectiveError.
  std::span<const float> AllreduceView(std::span<float> data, ReduceOp op = ReduceOp::kSum);
  // Lets later Allreduce calls on exactly this span (the same address and length) with
  // this op run in place. Without a binding, ring_chunked and halving_doubling run through
  // a gloo algorithm object built on a buffer of the collective's own (gloo registers the
  // vector with the transport when it builds one, once per length), and each call copies
  // the caller's vector in and the result out; bound, the object is built on `data`
  // itself and a call costs what gloo called directly costs. ring needs nothing (gloo's
  // function API takes any buffer). Binding the same address, length and op again
  // rebuilds the object. gloo touches `data` only inside an Allreduce: it may move or be
  // freed between calls, and a later Allreduce of it then simply copies. Every rank binds
  // spans of the same lengths and ops in the same order, as for any collective call
  // (each binding takes the context's next slots). Throws CollectiveError.
  void Bind(std::span<float> data, ReduceOp op = ReduceOp::kSum);
  // Every rank's `data` becomes root's. REQUIRES 0 <= root < size (else ConfigError).
  // Known cost: gloo grows a TCP pair's send buffer to the largest message it sent, and
  // after the root broadcast a large vector (1 MiB) the ring allreduces on its pairs
  // stalled about 40 ms per segment on loopback (1 MiB at 4 ranks: 9 ms -> 650 ms per
  // allreduce). The strategies broadcast their start by an allreduce of the root's vector
  // and the others' zeros instead (algorithms/collective_worker.h).
  void Broadcast(std::span<float> data, int root);
  // Returns when every rank has entered Barrier.
  void Barrier();
  // Sends `data` to `peer` (!= rank). Blocks until the peer has posted the matching Recv
  // (same tag and length) and the data has been handed to the socket: gloo sends only
  // into a posted receive, so two ranks that both Send to each other first deadlock until
  // the timeout. Messages between two ranks are received in the order they were sent.
  // Throws CollectiveError.
  void Send(int peer, std::span<const float> data, uint32_t tag = 0);
  // Receives into `data` what `peer` sent with `tag`; data.size() must equal the sent
  // length. Throws CollectiveError.
  void Recv(int peer, std::span<float> data, uint32_t tag = 0);

  CollectiveCounters Counters() const;

 protected:
  Collective(int rank, int size, Algorithm algorithm);

  // The implementation's part: move the data, translate its errors into CollectiveError,
  // and return the payload moved (the public methods add it to the counters).
  // `op` is kSum or kMax (kMean is a sum that Allreduce then divides).
  virtual Traffic DoAllreduce(std::span<float> data, ReduceOp op) = 0;
  // AllreduceView's part: sets *result to where the result is. `op` as for DoAllreduce. The
  // default runs DoAllreduce and sets *result = data.
  virtual Traffic DoAllreduceView(std::span<float> data, ReduceOp op,
                                  std::span<const float>* result);
  // `op` as for DoAllreduce. The default does nothing (an implementation without copies).
  virtual void DoBind(std::span<float> data, ReduceOp op);
  virtual Traffic DoBroadcast(std::span<float> data, int root) = 0;
  virtual void DoBarrier() = 0;
  virtual void DoSend(int peer, std::span<const float> data, uint32_t tag) = 0;
  virtual void DoRecv(int peer, std::span<float> data, uint32_t tag) = 0;

 private:
  void CheckPeer(int peer, const char* operation) const;

  const int rank_;
  const int size_;
  const Algorithm algorithm_;
  // Written only by the owning thread, read by Counters() from any thread.
  struct AtomicCounters;
  std::unique_ptr<AtomicCounters> counters_;
};

// Joins the group: validates options, opens this rank's TCP listener on options.host,
// publishes its address through `rendezvous` and connects to every other rank. The first
// call sets SIGPIPE to SIG_IGN for the process unless a handler is installed: gloo writes
// with writev(), and a peer that died would otherwise kill this process with SIGPIPE
// instead of failing the operation with a CollectiveError. Returns
// when all `size` ranks have joined. Throws ConfigError for bad options, CollectiveError
// ("connect") if the others do not join within options.timeout.
std::unique_ptr<Collective> Connect(const CollectiveOptions& options,
                                    std::shared_ptr<Rendezvous> rendezvous);

}  // namespace asgd::collective
