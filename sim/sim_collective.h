// The collective of a simulated cluster (issue 33): collective::Collective for N ranks that
// are tasks of one sim::Scheduler, so that the strategies on a collective (allreduce_sgd,
// local_sgd, dpsgd) run their real worker rules in virtual time.
//
// Values. An allreduce gives every rank the bits gloo's algorithm gives it: float addition
// is not associative, so the group replays, per element, the order in which the chosen
// gloo algorithm (collective.algorithm) adds the ranks' values:
//   ring              the vector is cut into N chunks of gloo's segments (its segment
//                     size and count, 1 MiB at most); chunk c starts at rank c−1 and is
//                     added to by rank c−2, c−3, ..., c (reduce-scatter to the left);
//   ring_chunked      2N chunks of max(256, ⌈n/2N⌉) floats; chunk k starts at rank ⌊k/2⌋
//                     and is added to by ⌊k/2⌋+1, ..., ⌊k/2⌋−1 (to the right);
//   halving_doubling  gloo's exchanges replayed on the ranks' vectors: recursive halving
//                     inside each binary block, the cascade of partial sums from the
//                     smaller blocks to the larger ones and back, the doubling allgather.
// halving_doubling reduces a vector longer than 256 KiB as consecutive pieces of 256 KiB
// (collective::AllreducePieceFloats), each as one vector, as collective/gloo_collective.cc
// calls gloo. Each addition is gloo's (the local value plus the received one; kMax takes
// std::max(local, received)), so the result equals gloo's bit for bit (a test compares
// them on random vectors). On ring and ring_chunked every rank ends with the same result,
// so the last rank to arrive computes it once, reading each rank's vector front to back
// (two sweeps over the ranks in rank order fold every chunk in its chain's order), and each
// rank copies it into its vector when it resumes (an AllreduceView reads it where it is
// instead, until the next allreduce). Broadcast copies the root's vector;
// Send/Recv copy. The byte counters are the gloo path's (ExpectedAllreduceBytes; a
// broadcast's N−1 copies; a message's bytes).
//
// Time. A collective call suspends the calling task until every rank has called it: a
// straggler holds the round back, as a real synchronous collective does. Then the
// operation takes the network model's time for its schedule from that instant (all ranks
// resume together at its end), with latency L and the payload rate r of one worker link
// (network.link_gbps × network.goodput; the shard NICs play no part):
//   ring                 2(N−1) steps, each L + c / r with c gloo's chunk (S/N of its
//                        S segments, collective::GlooRingSegments; at most n·4 bytes):
//                        ⌈n/N⌉·4 bytes up to the rounding of segments to whole floats
//                        (every rank sends one chunk to its neighbour in each step, all
//                        links at once);
//   ring_chunked         2(N−1) steps, each L + ⌈n/N⌉·4 bytes / r;
//   halving_doubling     inside the largest binary block (2^k ranks) 2k steps of
//                        L + ⌈n/2^i⌉·4 / r (i = 1..k, halving then doubling); for
//                        N ≠ 2^k each smaller block adds two more steps in a cascade
//                        (its ranks send their part, n/|block| floats, to the next
//                        larger block and get the result back through their one link);
//                        a vector of several pieces takes each piece's steps in turn;
//   broadcast            L + (N−1)·n·4 / r (the root sends the vector to each rank);
//   barrier              2⌈log₂N⌉·L;
//   send/recv            a message: the sender's link and the receiver's are booked
//                        FIFO (start = max(now, sender free, receiver free − L)), it
//                        arrives at start + bytes / r + L; Send returns when the bytes
//                        left (start + bytes / r), Recv when they arrived. A Send waits
//                        for the matching Recv as gloo's does.
// The transport's CPU (ChargeHostCpu: sim.transport_us_per_message,
// sim.transport_ns_per_byte, on the sim.cores pool the ranks' steps use). Each message
// costs c(b) = per message + b × per byte at each of its ends, as on the parameter server
// (sim/core_pool.h). An allreduce or barrier step then takes every rank's send charge on
// the pool from the step's start, the wire (L + b / r) from the last one's end, and every
// rank's receive charge from the arrival: with N ranks on C cores a step of b bytes lasts
// 2·⌈N/C⌉·c(b) + L + b / r (C = 0: each rank's own machine, 2·c(b) + L + b / r); a
// halving-doubling cascade step is charged to every rank too (an overcharge for the ranks
// that sit it out). A broadcast: the root's N − 1 sends one after the other, each its
// charge then its wire, then the last receiver's charge; a send/recv: the sender's charge
// before the wire (Send returns when the bytes have left), the receiver's after the
// arrival (Recv returns when it ends). Without the keys, every time is the closed form
// above (a separate code path).
// What this leaves out: gloo's pipelining of two segments and its zero-byte
// notifications (an event-level replay of gloo's rendezvous over FIFO links moved a ring
// allreduce by under 1 %), the reduction's adds and copies, contention with any other
// traffic (the worker links are idle at the start of a collective, since every rank is in
// it), and TCP effects (see network_model.h).
//
// Untimed handles (Rank(r, false)): an operation every rank joins through one takes no
// virtual time; the ranks still wait for the last arrival. A driver uses them for work
// that a real run's clock does not count (experiments/run/sim_driver.h: the boundary's check
// and averages for an evaluation).
//
// Failure: Shutdown() (the driver's, when the tasks left can never complete their
// collective, e.g. a rank failed) makes every blocked call and every later one throw
// CollectiveError. Ranks that call different operations, or allreduces of different
// lengths, fail with a CollectiveError naming both.
//
// Thread safety: none. The group, its ranks and the scheduler belong to one thread; the
// calls must come from tasks of that scheduler.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "collective/collective.h"
#include "core/clock.h"
#include "sim/core_pool.h"
#include "sim/network_model.h"
#include "sim/scheduler.h"

namespace asgd::sim {

// The virtual time one allreduce of `count` floats takes on `size` ranks with `algorithm`
// over links of the given latency and payload rate (bytes per second; +inf: no transfer
// time), as the header comment says. 0 for size 1 or count 0.
Duration AllreduceTime(collective::Algorithm algorithm, int size, std::size_t count,
                       Duration latency, double payload_rate);
// The steps of that schedule, in order, as runs of equal steps: each rank sends `bytes`
// payload bytes in each of `steps` steps (empty for size 1 or count 0). AllreduceTime is
// the sum of steps × (latency + bytes / rate) over them: a ring is one run of 2(N − 1).
struct StepRun {
  int64_t bytes = 0;
  int64_t steps = 0;
};
std::vector<StepRun> AllreduceSteps(collective::Algorithm algorithm, int size, std::size_t count);

// Reduces the ranks' vectors in place as gloo's `algorithm` does (the header comment),
// every data[r] ending with the same bits. op is kSum or kMax. REQUIRES: every span of the
// same length; data.size() >= 1. Exposed for tests and sim_bench.
void GlooOrderAllreduce(collective::Algorithm algorithm, std::span<const std::span<float>> data,
                        collective::ReduceOp op);

// Whether every rank ends an allreduce with `algorithm` holding one result that
// GlooOrderReduce computes without touching the ranks' vectors: ring and ring_chunked
// (each chunk is reduced along the ring once, then copied to every rank).
bool ReducesToOneResult(collective::Algorithm algorithm);

// The bits every data[r] holds after GlooOrderAllreduce(algorithm, data, op), written to
// `out` instead; data is only read (each rank's vector once, front to back in two
// contiguous ranges). REQUIRES: ReducesToOneResult(algorithm); every span and `out` of the
// same length; `out` overlaps none of them.
void GlooOrderReduce(collective::Algorithm algorithm, std::span<const std::span<float>> data,
                     collective::ReduceOp op, std::span<float> out);

struct SimCollectiveStats {
  int64_t operations = 0;  // collective operations completed (allreduce, broadcast, barrier)
  Duration time{};         // the virtual time they took, summed (from the last arrival)
  Duration waited{};       // the ranks' time waiting for the last arrival, summed over ranks
};

class SimCollectiveGroup {
 public:
  // sched must outlive the group and its ranks. Validates network (NetworkOptions). The
  // payload rate is network.link_bandwidth × network.goodput. REQUIRES: size >= 1.
  SimCollectiveGroup(Scheduler* sched, const NetworkOptions& network, int size,
                     collective::Algorithm algorithm);
  ~SimCollectiveGroup();
  SimCollectiveGroup(const SimCollectiveGroup&) = delete;
  SimCollectiveGroup& operator=(const SimCollectiveGroup&) = delete;

  // A handle of rank r (the group must outlive it). REQUIRES 0 <= r < size. A rank may
  // hold several handles (they share its traffic on the group; each counts its own calls).
  // timed = false: the allreduces, broadcasts and barriers it takes part in through this
  // handle take no virtual time — every rank still waits for the last one to arrive, and
  // all resume at that instant; every rank must join such an operation through an untimed
  // handle too (else a CollectiveError). It sends and receives nothing (a Send or Recv
  // through it is a CollectiveError).
  std::unique_ptr<collective::Collective> Rank(int r, bool timed = true);

  // Charges each message's CPU at both ends on `cores` (the header comment). cores must
  // outlive the group; a cpu that is not active() charges nothing (the default).
  void ChargeHostCpu(CorePool* cores, const TransportCpu& cpu);

  // Fails every blocked call and every later one (the header comment).
  void Shutdown();

  int size() const { return size_; }
  collective::Algorithm algorithm() const { return algorithm_; }
  const SimCollectiveStats& stats() const { return stats_; }

 private:
  friend class SimCollective;
  enum class Kind { kNone, kAllreduce, kBroadcast, kBarrier };
  struct Channel;

  // view != nullptr: Collective::AllreduceView (the result left in result_ where there is
  // one, not copied into data).
  collective::Traffic Allreduce(int rank, bool timed, std::span<float> data,
                                collective::ReduceOp op, std::span<const float>* view);
  void Broadcast(int rank, bool timed, std::span<float> data, int root);
  void Barrier(int rank, bool timed);
  void Send(int rank, int peer, std::span<const float> data, uint32_t tag);
  void Recv(int rank, int peer, std::span<float> data, uint32_t tag);

  // Joins the pending operation; the last rank to arrive runs `complete` (which reduces
  // or copies the ranks' spans and returns the operation's duration, taken as zero when
  // !timed); every rank returns at its end.
  template <typename Complete>
  void Meet(int rank, Kind kind, std::size_t count, collective::ReduceOp op, int root, bool timed,
            std::span<float> data, const std::string& what, const Complete& complete);
  // Suspends rank's task until Release(rank) (or Shutdown: then throws CollectiveError).
  void BlockRank(int rank, const std::string& what);
  void Release(int rank, Duration at);
  // A message from `from` to `to` of `bytes` handed over at Now(): books both links and
  // returns {when the sender is done, when it arrived}.
  std::pair<Duration, Duration> Transfer(int from, int to, int64_t bytes);
  // With a CPU charge: `jobs` charges of c(bytes) asked of the pool at t; returns when the
  // last ends.
  Duration Charge(Duration t, int jobs, int64_t bytes);
  // The charged time of the given steps, every rank sending and receiving in each, from
  // `now` (the header comment).
  Duration ChargedSteps(Duration now, std::span<const StepRun> runs);
  void ThrowIfShut(int rank, const std::string& what) const;
  Channel& ChannelOf(int from, int to);

  Scheduler* sched_;
  CorePool* cores_ = nullptr;  // with an active cpu_
  TransportCpu cpu_;
  Duration latency_;
  double rate_;
  int size_;
  collective::Algorithm algorithm_;
  bool shut_ = false;
  SimCollectiveStats stats_;
  std::vector<char> blocked_;    // per rank: suspended in BlockRank
  std::vector<TaskId> task_of_;  // per rank: its task, while blocked

  // The pending collective operation.
  Kind kind_ = Kind::kNone;
  std::size_t count_ = 0;
  collective::ReduceOp op_ = collective::ReduceOp::kSum;
  int root_ = 0;
  bool timed_ = true;
  int arrived_ = 0;
  Duration first_arrival_{};
  Duration arrival_sum_{};  // the arrivals' offsets from the first one, summed
  std::vector<std::span<float>> spans_;
  // The result of the last allreduce with ReducesToOneResult(algorithm): each rank copies
  // it into its vector when it resumes (then, in cache, the rank's next work reads it).
  std::vector<float> result_;

  // Point to point: the waiting sends and receives per (from, to).
  std::vector<Duration> tx_free_, rx_free_;
  std::unordered_map<uint64_t, std::unique_ptr<Channel>> channels_;
};

}  // namespace asgd::sim
