// What moving a message costs in the simulator: latency, bandwidth, NIC queueing at the
// shard servers, and the server's processing time (issue 13 item 2).
//
// The model (`network.sharing = fifo`, the default). Every worker and every shard server
// has one full-duplex NIC. A message of b payload bytes from A to B, handed to the network
// at time t:
//   rate     r = min(link_bandwidth, shard_nic_bandwidth)  (the worker–shard link runs at
//              the slower of its two ends)
//   start    = max(t, A's transmit side free, B's receive side free - latency)
//   end      = start + b / r                  A's transmit side is busy until end, B's
//   arrival  = end + latency                  receive side until arrival
// i.e. each message is sent whole, first come first served (FIFO, in the order of the
// calls, which the scheduler makes deterministic), through both NICs at once (cut-through,
// not store-and-forward). Both directions are modelled and independent: requests use the
// worker's transmit and the shard's receive side, replies the shard's transmit and the
// worker's receive side. So k workers pushing b bytes to one shard at the same instant
// arrive at latency + i·b/r, i = 1..k (the shared NIC serialises them), and one worker
// pushing to k shards sends one message after the other. A shard NIC faster than the
// links changes nothing under FIFO (one message at a time per side at r); fair and
// interleaved sharing use it (below).
//
// Payload rate (goodput). link_bandwidth and shard_nic_bandwidth are line rates (what a
// NIC is sold as: `network.link_gbps`, `network.shard_nic_gbps`); a message moves payload
// at r = min(link, shard NIC) × goodput (`network.goodput`). One rule for presets and
// explicit rates: goodput defaults to 1448/1538 = 94.1 % (TCP over Ethernet, below), so an
// explicit link_gbps = 10 moves exactly what the dc_10gbe preset moves; `loopback` alone
// sets goodput = 1, since its rate is a measured payload rate (no Ethernet frames). A
// link_gbps or shard_nic_gbps given on top of loopback is a line rate as anywhere else:
// without an explicit network.goodput the run takes 94.1 %, and loopback's link, if kept,
// the line rate that carries its measured payload (SimOptionsFromMap, sim/options.h).
//
// Fair sharing (`network.sharing = fair`, issue 33). Instead of whole messages in turn,
// the messages on a NIC side share it as TCP flows share a link: a message from A to B
// is one flow through A's transmit side and B's receive side; a worker's sides have
// capacity link_bandwidth × goodput, a shard's shard_nic_bandwidth (or link_bandwidth)
// × goodput. At every instant each flow moves at its max-min fair rate (progressive
// filling: the side with the smallest equal share of what is left of its capacity fixes
// the rate of every flow on it, whose rate is then taken off its other side; repeat), and
// the rates are recomputed whenever a flow starts or ends. A message handed over at t
// starts moving at t, ends when its last byte has moved (end, rounded up to a whole
// nanosecond) and arrives at end + latency. So k messages of b bytes handed to one
// shared side at the same instant all arrive at latency + k·b/r (FIFO: latency + i·b/r,
// i = 1..k), a flow held back by its other end leaves the rest of a side to the others
// (max-min, not an equal split), and a side with flows on it always moves at its full
// capacity (work conserving, as FIFO). The end of a message is not known when it starts,
// so fair sharing needs the asynchronous sends below (they complete through the
// scheduler); the synchronous ones are FIFO only. In every mode the shard's server
// thread (Serve) stays FIFO.
//
// Interleaved chunks (`network.sharing = interleaved`, issue 33). Between the two: a
// message moves in chunks of `network.chunk_kib` (the last one shorter), one chunk after
// the other, each at one flow's rate r (r as in FIFO, the slower end's; cut-through, as
// FIFO): a chunk of c bytes takes c / r. A NIC side has room for k = its line rate / the
// slower end's line rate such flows at once: k = 1 where a shard's NIC runs at the link
// rate (every preset: one chunk at a time per side), and a shard NIC k times as fast as
// the links (or a worker's link k times as fast as the shards' NICs) carries k chunks at
// once, as fair sharing gives it k flows at r. Precisely: a side has floor(k) whole
// places and, when k is not whole, one fractional place of f = k − floor(k) (a ratio
// within 1e-9, relative, of a whole number counts as that number: 0.3 / 0.1 Gbit/s is 3).
// A chunk holds a place on each of its two sides, a whole one where one is free, for its
// c / r; a fractional place then rests, held until T / f after the chunk started (T the
// chunk's time, rounded to a whole nanosecond), so it carries one chunk at r per T / f:
// f · r on average, and the side k · r (a chunk on it can put the side above k · r for
// that chunk's time, never by more than one chunk over any span). At 25 Gbit/s behind
// 10 Gbit/s links a shard's side has two whole places and half of one. When a message is
// handed over, a chunk ends or a fractional place stops resting, the sides involved take
// the next chunks: each drawn uniformly at random from the messages waiting on either of
// those sides that have room on both of their sides (the model's own stream of the run's
// seed: the same seed, the same choices), so the message whose chunk just ended competes
// with every other one waiting on its sides; a message whose chunk has moved waits again
// for its next one (a message is one flow: never more than one chunk in flight).
// A message ends when its last chunk has moved and arrives at end + latency (a message of
// 0 bytes at once: handed over + latency). So a lone message arrives as under FIFO, at
// latency + b / r; a side never leaves a place free (a whole one, or its fractional one
// not resting) while a message waiting on it has room on its other side; with chunks as
// long as the messages it is whole messages in a random order instead of first come
// first served, and as chunks shrink it nears an equal share per message, with the
// random order as TCP's: concurrent messages of equal length no longer end together, nor
// in the order they started. The chunk stands for the data a TCP flow puts on a shared
// queue at once (its window, its segmentation offload's bursts); the default, 16 KiB, is
// what the calibration over shaped links measured best
// (results/sim/calibration/netns/README.md). Choosing a chunk scans the side's waiting
// messages: O(messages waiting) per chunk. Asynchronous sends only, as fair.
//
// The server: each shard has one server thread (as ShardServer has). Serve() queues a
// request FIFO behind the shard's earlier work and takes server_per_message +
// e · server_ns_per_element, where e is the number of parameter elements the shard
// touches for it, whatever the bytes on the wire: a pull reads and sends its n elements
// (e = n); a push writes n (e = n: a dense push's NaN check and add, or a compressed
// push's decode of all n elements and the add — a top-k push of 1 % costs the shard as
// much as a dense one); a push-pull both (e = 2n); a clock none (e = 0).
//
// What is not modelled (where the simulation is optimistic or pessimistic): the switch
// fabric is non-blocking (no core congestion); no packet loss, retransmission or TCP slow
// start; latency is the same for every link and has no jitter; with `fifo`, whole messages
// one after the other instead of packet interleaving (the first of k concurrent messages
// finishes earlier and the last at the same time as under fair sharing), and a shard NIC
// faster than the links still one message at a time (pessimistic there); with `fair`,
// idealised flows (rates change at once, no congestion window or ACK clocking, no
// per-packet order: flows that start together end together, so equal messages keep
// their senders in step; results/sim/calibration/netns/README.md measured what that
// does against real TCP flows); with `interleaved`, one fixed chunk and a uniform choice
// for TCP's windows, ACK clocking and the order it drains a queue in, and the fraction of
// a side's rate beyond whole flows as a place that carries at r and rests (bursts, not a
// steady share); a single flow is assumed to reach the NIC's line rate (at 100 GbE one
// TCP flow on one core usually cannot); protocol headers are not counted (callers pass
// payload bytes; the per-message cost sits in latency).
//
// Presets (NetworkPreset). Goodput is 94 % of the Ethernet line rate: a 1448-byte TCP
// payload per 1538 bytes on the wire at MTU 1500 (preamble 8, Ethernet 14 + FCS 4,
// inter-frame gap 12, IPv4 20, TCP with timestamps 32). The server costs (5 µs per
// message, 1 ns per element) are this repository's own measurements on its 2-core
// development VM (results/bench/transport.csv: the tcp 64 B push round trip is 11 µs
// slower than the raw ZeroMQ one — two messages' decoding and validation; an inproc
// 16 MiB push with the add rule ran at 3.5–4.3 GB/s, i.e. about 1 ns per 4-byte element
// checked and added; the file's current record, from a faster AMD EPYC VM, has 8.4–8.9
// GB/s). A read is charged the same 1 ns per element: in that file the inproc 1 MiB pull
// round trips (a copy of the shard's values into the reply) run 1.2–1.3× faster than the
// pushes of the same size, so one figure for both overcharges a pull by at most about a
// quarter.
//   zero       no cost at all: latency 0, infinite bandwidth, free server (closed-form
//              tests, and equivalence with the in-memory store)
//   loopback   this machine over tcp on 127.0.0.1: latency 54 µs (half the raw ZeroMQ tcp
//              64 B round trip, 108 µs), 3.67 GB/s of payload (raw ZeroMQ tcp push, 1 MiB,
//              8 in flight), both from results/bench/transport.csv, with goodput 1 (the
//              rate is measured payload: link_gbps 29.36); what calibration runs use
//   dc_10gbe   one datacenter rack on 10 GbE: link_gbps 10, 1.177 GB/s goodput; latency 25 µs one
//   way
//              (half of a ~50 µs Linux kernel TCP round trip between two hosts under one
//              top-of-rack switch — an estimate of common figures, not measured here)
//   dc_100gbe  the same on 100 GbE: link_gbps 100, 11.77 GB/s; latency 15 µs one way (faster NICs
//   and
//              switches; the kernel TCP stack dominates, so not 10× lower; an estimate)
//   wan        two datacenters across a continent: 40 ms one way (4,000 km of fibre at
//              2·10^8 m/s is 20 ms; routes run 1.5–2× the great circle; coast-to-coast
//              round trips in the US are commonly 60–80 ms), 1 Gbit/s line rate per flow
//              (link_gbps 1, 0.1177 GB/s goodput)
//
// Thread safety: none (one scheduler thread).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/rng.h"
#include "sim/scheduler.h"

namespace asgd::sim {

// TCP payload per byte on an Ethernet wire at MTU 1500 (the header comment).
inline constexpr double kEthernetGoodput = 1448.0 / 1538.0;

enum class NetworkSharing { kFifo, kFair, kInterleaved };
// "fifo", "fair" or "interleaved"; throws asgd::ConfigError naming network.sharing for
// another value.
NetworkSharing ParseNetworkSharing(std::string_view value);
std::string_view NetworkSharingName(NetworkSharing sharing);

struct NetworkOptions {
  // One-way latency of every message. Default 0. >= 0.
  Duration latency{};
  // Each worker–shard link's line rate (the worker's NIC), bytes per second on the wire.
  // Default +infinity (no transfer time). > 0.
  double link_bandwidth = std::numeric_limits<double>::infinity();
  // Each shard server's NIC, line rate in bytes per second; 0 = the same as
  // link_bandwidth. >= 0. Faster than the links, it carries several of them at once
  // under kFair and kInterleaved (the header comment), not under kFifo.
  double shard_nic_bandwidth = 0;
  // Payload bytes per byte of line rate, for every rate above. Default kEthernetGoodput.
  // In (0, 1].
  double goodput = kEthernetGoodput;
  // Server processing time per request: per message, plus per parameter element the
  // shard reads or writes for it (see the header comment). Default 0.
  Duration server_per_message{};
  double server_ns_per_element = 0;  // >= 0
  // How a NIC side serves the messages on it (`network.sharing`, the header comment):
  // whole messages first come first served, max-min fair flows, or interleaved chunks.
  // Default kFifo.
  // Presets keep the default.
  NetworkSharing sharing = NetworkSharing::kFifo;
  // kInterleaved: payload bytes per chunk (`network.chunk_kib` × 1024, rounded). Default
  // 16 KiB. >= 1.
  int64_t chunk_bytes = 16 * 1024;

  // Throws asgd::ConfigError naming the key (network.*, in its config unit: µs, Gbit/s,
  // ns, a fraction) for a negative, zero (bandwidths, goodput), NaN or, for goodput, > 1
  // value, and a chunk_bytes below 1.
  void Validate() const;
};

// The named presets above; throws asgd::ConfigError naming network.preset for another name.
NetworkOptions NetworkPreset(std::string_view name);
// "zero", "loopback", "dc_10gbe", "dc_100gbe", "wan".
std::vector<std::string> NetworkPresetNames();

class NetworkModel {
 public:
  // Validates options. `seed` (the run's) seeds the interleaved model's choices.
  // REQUIRES: workers >= 1, shards >= 1.
  NetworkModel(const NetworkOptions& options, int workers, int shards, uint64_t seed = 0);

  // A request of `bytes` payload bytes handed to the network by worker w at time t;
  // returns when it has fully arrived at shard s (and books both NICs). FIFO only
  // (REQUIRES: options().sharing == kFifo; the other models cannot know the end yet).
  Duration SendToShard(int worker, int shard, int64_t bytes, Duration t);
  // A reply of `bytes` from shard s to worker w handed to the network at t; returns its
  // arrival at the worker. FIFO only.
  Duration SendToWorker(int shard, int worker, int64_t bytes, Duration t);

  // The asynchronous sends, for either sharing: the message is handed to the network at
  // sched.Now(), and on_arrival runs as an event of sched when it has fully arrived. With
  // kFifo that is At(the synchronous send's arrival, on_arrival), the same instant and
  // the same event order; with kFair the model schedules its own events on sched (one
  // when the next flow ends; stale ones, from before a later start, do nothing); with
  // kInterleaved one at the end of every chunk.
  // REQUIRES: the same scheduler on every call; the scheduler must not run the model's
  // pending events after the model is gone (they point to it).
  void SendToShard(Scheduler& sched, int worker, int shard, int64_t bytes,
                   std::function<void()> on_arrival);
  void SendToWorker(Scheduler& sched, int shard, int worker, int64_t bytes,
                    std::function<void()> on_arrival);
  // The shard's server thread takes a request that arrived at t and touches `elements`
  // parameter elements (read plus written); returns when it is done (FIFO behind the
  // shard's earlier requests): per message + elements × per element.
  Duration Serve(int shard, int64_t elements, Duration t);

  // Transfer time of b payload bytes on one link, without queueing: b / rate.
  Duration TransferTime(int64_t bytes) const;
  // The payload rate r of the header comment, bytes per second.
  double payload_rate() const { return rate_; }

  // Counters per shard: payload bytes received and sent, and nic_wait, the total time its
  // messages (both directions) took beyond their unshared transfer time b / r because a
  // NIC side (either end) was busy with others: with kFifo the time they waited before
  // they started moving (start − t), with kFair the time they spent below the full rate
  // (end − t − b / r; the same figure for a FIFO message). A message counts when it is
  // handed over (bytes) and, with kFair and kInterleaved, when it ends (nic_wait; an
  // interleaved message's time below the full rate, as kFair's).
  struct ShardStats {
    int64_t bytes_in = 0;
    int64_t bytes_out = 0;
    Duration nic_wait{};
  };
  const ShardStats& shard_stats(int shard) const;
  const NetworkOptions& options() const { return options_; }

 private:
  // A message moving under kFair: one flow through two sides (indices into side_capacity_:
  // worker w's transmit side is w, its receive side workers + w, shard s's transmit side
  // 2·workers + s, its receive side 2·workers + shards + s).
  struct Flow {
    int tx = 0, rx = 0;
    int shard = 0;         // whose counters
    int64_t bytes = 0;     // payload
    Duration handed{};     // when it was handed over
    double remaining = 0;  // bytes still to move
    double rate = 0;       // bytes per second, its current max-min share
    std::function<void()> on_arrival;
  };

  // A message moving under kInterleaved: its sides (as Flow's), its shard, and how much
  // of it has moved. Slots are reused.
  struct ChunkedMessage {
    int tx = 0, rx = 0;
    int shard = 0;
    int64_t bytes = 0;
    int64_t sent = 0;
    Duration handed{};
    std::function<void()> on_arrival;
    // Its chunk in flight (a message has at most one): when it started, and whether it
    // holds the fractional place of its transmit side, of its receive side.
    Duration chunk_started{};
    bool tx_rest = false, rx_rest = false;
  };
  // kInterleaved: the room of a side of k = ratio times one flow's rate: floor(k) whole
  // places and the fraction k - floor(k) of one more (0: none); a ratio within 1e-9
  // (relative) of a whole number counts as that number, an infinite one as no limit.
  struct FlowPlaces {
    int whole = 1;
    double rest = 0;
  };
  static FlowPlaces PlacesFor(double ratio);

  Duration Send(Duration& tx_free, Duration& rx_free, int64_t bytes, Duration t, Duration* waited);
  // The asynchronous sends of kFair and kInterleaved: StartFlow or StartChunked.
  void SendAsync(Scheduler& sched, int tx, int rx, int shard, int64_t bytes,
                 std::function<void()> on_arrival);
  void StartFlow(int tx, int rx, int shard, int64_t bytes, std::function<void()> on_arrival);
  // kFair: moves every flow on to now at its rate, ends those with nothing left (their
  // arrivals scheduled at now + latency, in the order they started), recomputes the rates
  // and arms the timer for the next end.
  void Advance();
  void EndFinishedFlows();
  void ComputeRates();
  void ArmTimer();
  // kInterleaved: a message handed over; sides a and b (a == b: one side) taking chunks
  // while one of them has room and a message waiting on it has room on its other side
  // too, each chunk drawn from all such messages of both sides at once (so a side just
  // freed does not favour the message whose chunk freed it); a chunk's end.
  void StartChunked(int tx, int rx, int shard, int64_t bytes, std::function<void()> on_arrival);
  void Dispatch(int a, int b);
  void EndChunk(int id);
  // A side has room when one of its whole places is free or its fractional place is
  // neither carrying nor resting. TakePlace takes a whole place if one is free, else the
  // fractional one (returns true then); REQUIRES: HasRoom(side). ReleasePlace gives it
  // back at a chunk's end: a whole place at once, the fractional one after its rest.
  bool HasRoom(int side) const;
  bool TakePlace(int side);
  void ReleasePlace(int side, bool rest, Duration chunk_started);

  NetworkOptions options_;
  int workers_ = 0;
  double rate_ = 0;  // bytes per second
  std::vector<Duration> worker_tx_, worker_rx_;
  std::vector<Duration> shard_tx_, shard_rx_, shard_cpu_;
  std::vector<ShardStats> stats_;
  // kFair state: each side's payload capacity (bytes per second), the flows moving (in
  // the order they started), the instant their `remaining` refers to, the scheduler and
  // the generation of the timer event armed last (an event of an older one does nothing).
  std::vector<double> side_capacity_;
  std::vector<Flow> flows_;
  Duration moved_to_{};
  Scheduler* sched_ = nullptr;
  uint64_t timer_generation_ = 0;
  // ComputeRates' scratch, per side: capacity left and unfixed flows on it.
  std::vector<double> left_;
  std::vector<int> unfixed_;
  std::vector<int> touched_;
  // kInterleaved state: the messages (slots, and the free ones), per side the messages
  // waiting on it (in the order they began to wait), its whole places and the fraction
  // of its fractional one (FlowPlaces), how many whole places chunks hold and whether
  // the fractional one is held (carrying or resting), the choices' generator, and
  // Dispatch's scratch.
  std::vector<ChunkedMessage> chunked_;
  std::vector<int> free_chunked_;
  std::vector<std::vector<int>> waiting_;
  std::vector<int> places_;
  std::vector<double> rest_;
  std::vector<int> places_taken_;
  std::vector<char> rest_held_;
  Rng rng_;
  std::vector<int> candidates_;
};

}  // namespace asgd::sim
