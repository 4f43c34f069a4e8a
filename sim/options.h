// All of the simulator's options in one struct, and the table of their configuration keys
// for the config layer (experiments/ reads files; sim/ only takes values).
//
// The config layer hands the key/value pairs of the run's delay.*, network.* and sim.*
// keys to SimOptionsFromMap, which applies network.preset first (whatever the order of
// the pairs), then every other key on top of it, then validates once. One rule is not a
// plain override: a network.link_gbps or network.shard_nic_gbps given on top of the
// loopback preset (whose measured payload rate has goodput 1) is a line rate, so without
// network.goodput the run takes kEthernetGoodput, and loopback's own link, if kept, the
// line rate that carries its payload (sim/network_model.h). Every error is an
// asgd::ConfigError naming the key: an unknown key (with the closest known one), a value
// that is not a number, a value out of range.
//
//   [delay]                       [network]
//   compute = lognormal           preset = dc_10gbe
//   mean_ms = 12                  latency_us = 40      ; overrides the preset's 25
//   stddev_ms = 4
//   straggler_fraction = 0.05
//   straggler_factor = 4
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>

#include "sim/core_pool.h"
#include "sim/delay_model.h"
#include "sim/network_model.h"
#include "sim/option_keys.h"
#include "sim/scheduler.h"

namespace asgd::sim {

struct SimOptions {
  DelayOptions delay;
  NetworkOptions network;  // default: the `zero` preset
  SchedulerOptions scheduler;
  // sim.cores: the cores the workers' steps share, first come first served
  // (sim/core_pool.h); 0 = every worker has a machine of its own. Default 0. >= 0.
  int cores = 0;
  // sim.transport_us_per_message, sim.transport_ns_per_byte: the CPU each message costs at
  // each of its ends, on the cores above (sim/core_pool.h: TransportCpu; where each charge
  // falls: sim/sim_store.h, and for the strategies on a collective sim/sim_collective.h).
  // Default 0 and 0: no charge.
  TransportCpu transport_cpu;
  // sim.share_buffers: the simulated workers of a scheduler share the model's scratch and
  // a gradient buffer, and async_sgd's worker pushes from its parameters
  // (experiments/run/worker_loop.h: SharedWorkerScratch); the ranks of a strategy on a
  // collective share the model's scratch, and allreduce_sgd's identical replicas are held
  // once (algorithms::SharedReplica). The same results either way; false gives every
  // worker its own buffers (the memory of a thread per worker).
  // Default true.
  bool share_buffers = true;

  // Validates the parts (sim.cores and the transport's CPU too).
  void Validate() const;
};

// One configuration key: its name (keys::k*), its default as written in a config, and
// one line of documentation (with the unit) for --help-config.
struct OptionKey {
  std::string_view key;
  std::string_view default_value;
  std::string_view doc;
};
std::span<const OptionKey> SimOptionKeys();

// Sets one key on *options (does not validate ranges; SimOptionsFromMap does).
// network.preset replaces every network.* field. Throws asgd::ConfigError naming the key
// for an unknown key or a value that does not parse.
void ApplySimOption(SimOptions* options, std::string_view key, std::string_view value);

// Builds validated options from key/value pairs (keys as in SimOptionKeys(); absent keys
// keep their defaults; a line rate on loopback as in the header comment).
SimOptions SimOptionsFromMap(const std::map<std::string, std::string>& values);

}  // namespace asgd::sim
