// The cores a simulated cluster's workers compute on (sim.cores).
//
// By default (cores = 0) every simulated worker has a machine of its own: a step of d
// virtual seconds ends d after it starts, however many workers compute at once. That is
// the cluster the simulator is for, and it is what a real run on a machine with fewer
// cores than workers is not: there the threads or processes share the cores, and four
// workers on two cores each progress at about half speed. CorePool models such a host, so
// that a simulated run can be calibrated against a real one on the same machine
// (results/sim/calibration): C cores serve the workers' steps first come, first served;
// a step that finds every core busy waits for the earliest to free, then runs for its
// whole length on that core.
//
// FCFS, not the kernel's processor sharing: a saturated host completes the same number of
// steps per second under both (C per step time), but under FCFS a step's latency is
// "wait, then run at full speed" rather than "run slower", so the order in which pushes
// reach the shards (and so staleness) may differ in detail.
//
// The transport's CPU (TransportCpu below, sim.transport_us_per_message and
// sim.transport_ns_per_byte) takes cores from the same pool: with a charge set, the
// simulated store (sim/sim_store.h) and the simulated collective (sim/sim_collective.h)
// ask the pool for each message's CPU at both of its ends, so on a host of C cores the
// gradients and the messages' handling compete for them, first come first served. What
// the pool still leaves out: the shard server's per-element time (network.server_*, its
// own thread beside the cores), the evaluator, cache and memory-bandwidth contention, and
// the scheduler's time slices.
//
// Deterministic: the earliest-free core is chosen with ties to the lowest index, and the
// caller's order of requests at one virtual instant is the scheduler's event order.
// Thread safety: none (one scheduler thread).
#pragma once

#include <cstdint>
#include <vector>

#include "core/clock.h"

namespace asgd::sim {

// The CPU a message costs at each of its ends (its sender before the wire, its receiver
// after arrival): per_message + payload bytes x ns_per_byte (sim/sim_store.h and
// sim/sim_collective.h say where each charge falls). Both zero (the default): no charge,
// and the store and the collective behave exactly as without it.
struct TransportCpu {
  // sim.transport_us_per_message: CPU per message at each end. Default 0. >= 0.
  Duration per_message{};
  // sim.transport_ns_per_byte: CPU per payload byte at each end, ns. Default 0. >= 0.
  double ns_per_byte = 0;

  bool active() const { return per_message > Duration::zero() || ns_per_byte > 0; }
  // One end's CPU for a message of `bytes` payload bytes (rounded to whole ns).
  Duration Cost(int64_t bytes) const;
  // Throws asgd::ConfigError naming the key for a negative or NaN value (or, per byte,
  // one above 1e6 ns).
  void Validate() const;
};

class CorePool {
 public:
  // cores = 0: unlimited (every step starts at once). REQUIRES: cores >= 0.
  explicit CorePool(int cores);

  // A step of length `work` asked for at virtual time `now`: returns when it ends (on the
  // earliest-free core, which it then holds until that time).
  Duration Run(Duration now, Duration work);

  int cores() const { return static_cast<int>(free_at_.size()); }
  // Total time steps waited for a core so far.
  Duration waited() const { return waited_; }

 private:
  std::vector<Duration> free_at_;  // per core: when it is next free
  Duration waited_{};
};

}  // namespace asgd::sim
