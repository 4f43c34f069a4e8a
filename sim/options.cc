#include "sim/options.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/strings.h"

namespace asgd::sim {
namespace {

constexpr std::array kKeys = {
    OptionKey{keys::kCompute, "measured",
              "step compute time: measured (real CPU time x measured_scale), constant, normal, "
              "lognormal, exponential, pareto"},
    OptionKey{keys::kMeasuredScale, "1", "measured: factor on the real CPU time (> 0)"},
    OptionKey{keys::kMeanMs, "10", "constant and distributions: mean step time, ms (> 0)"},
    OptionKey{keys::kStddevMs, "0", "normal, lognormal: standard deviation of the step time, ms"},
    OptionKey{keys::kParetoShape, "3", "pareto: shape alpha (> 1; heavy tails for alpha <= 2)"},
    OptionKey{keys::kSpeeds, "1",
              "per-worker speeds, comma-separated, applied cyclically (worker w: speeds[w mod n]); "
              "2 = twice as fast"},
    OptionKey{keys::kStragglerFraction, "0",
              "fraction of workers that are stragglers (round(f x workers), chosen by the seed)"},
    OptionKey{keys::kStragglerFactor, "1", "how many times slower a straggler is (>= 1)"},
    OptionKey{keys::kPauseProbability, "0", "probability that a step adds a transient pause"},
    OptionKey{keys::kPauseMs, "0", "length of a transient pause, ms"},
    OptionKey{keys::kPreset, "zero",
              "network preset: zero, loopback, dc_10gbe, dc_100gbe, wan (sim/network_model.h "
              "states their numbers and sources); the keys below override it"},
    OptionKey{keys::kLatencyUs, "(preset)", "one-way latency of every message, us"},
    OptionKey{keys::kLinkGbps, "(preset)",
              "line rate of each worker-shard link, Gbit/s (> 0); payload moves at "
              "rate x network.goodput"},
    OptionKey{keys::kShardNicGbps, "(preset)",
              "line rate of each shard server's NIC, shared by its links, Gbit/s (0 = the link "
              "rate)"},
    OptionKey{keys::kGoodput, "(preset)",
              "payload bytes per byte of line rate, for both rates above, in (0, 1]: 0.9415 "
              "(TCP over Ethernet at MTU 1500) in every preset and for explicit rates; 1 on "
              "loopback without network.link_gbps or network.shard_nic_gbps (its rate is "
              "measured payload)"},
    OptionKey{keys::kSharing, "fifo",
              "how a NIC side serves the messages on it: fifo (whole messages, first come "
              "first served), fair (max-min fair flows) or interleaved (chunks of "
              "network.chunk_kib, each from a waiting message chosen at random); "
              "parameter-server strategies"},
    OptionKey{keys::kChunkKib, "16",
              "interleaved: payload KiB a message moves per turn on a NIC side (> 0; 1448 "
              "bytes = 1.4140625)"},
    OptionKey{keys::kServerNsPerElement, "(preset)",
              "shard server processing time per parameter element it reads or writes, ns: a "
              "pull's n elements read, a push's n written whatever its encoded size, a "
              "push-pull's 2n"},
    OptionKey{keys::kServerUsPerMessage, "(preset)",
              "shard server processing time per request, us"},
    OptionKey{keys::kStackKib, "512", "stack per simulated worker, KiB (>= 256; Eigen runs on it)"},
    OptionKey{keys::kCores, "0",
              "cores the workers' steps share, first come first served (a real run's host: "
              "calibration); 0 = every worker has a machine of its own"},
    OptionKey{keys::kTransportUsPerMessage, "0",
              "CPU each message costs at each end (the sender before the wire, the receiver "
              "after arrival), us, taken from the sim.cores cores (0 cores: each end's own "
              "machine); every strategy the simulator runs"},
    OptionKey{keys::kTransportNsPerByte, "0",
              "CPU each message costs at each end per payload byte, ns (with "
              "sim.transport_us_per_message)"},
    OptionKey{keys::kShareBuffers, "true",
              "the simulated workers share the model's scratch and a gradient buffer, and "
              "allreduce_sgd's identical replicas are held once (one worker runs at a time; "
              "the same results); false: each worker owns its own"},
};

double Number(std::string_view key, std::string_view value) {
  if (auto v = ParseDouble(Trim(value))) return *v;
  throw ConfigError(std::string(key), std::string(value), "a number");
}

Duration FromUnit(double v, double unit_ns) {
  // Out-of-range values are caught by Validate (a NaN marks them).
  const double ns = v * unit_ns;
  if (!(std::fabs(ns) < 9.0e18)) return Duration::min();
  return Duration(static_cast<Duration::rep>(std::llround(ns)));
}

Duration Checked(std::string_view key, std::string_view value, double unit_ns) {
  const Duration d = FromUnit(Number(key, value), unit_ns);
  if (d == Duration::min())
    throw ConfigError(std::string(key), std::string(value), "a smaller number");
  return d;
}

}  // namespace

void SimOptions::Validate() const {
  delay.Validate();
  network.Validate();
  scheduler.Validate();
  transport_cpu.Validate();
  if (cores < 0) throw ConfigError(std::string(keys::kCores), std::to_string(cores), ">= 0");
}

std::span<const OptionKey> SimOptionKeys() { return kKeys; }

void ApplySimOption(SimOptions* o, std::string_view key, std::string_view value) {
  if (key == keys::kCompute) {
    o->delay.compute = ParseComputeKind(Trim(value), key);
  } else if (key == keys::kMeasuredScale) {
    o->delay.measured_scale = Number(key, value);
  } else if (key == keys::kMeanMs) {
    o->delay.mean = Checked(key, value, 1e6);
  } else if (key == keys::kStddevMs) {
    o->delay.stddev = Checked(key, value, 1e6);
  } else if (key == keys::kParetoShape) {
    o->delay.pareto_shape = Number(key, value);
  } else if (key == keys::kSpeeds) {
    o->delay.speeds.clear();
    for (const std::string& part : Split(value, ',')) o->delay.speeds.push_back(Number(key, part));
  } else if (key == keys::kStragglerFraction) {
    o->delay.straggler_fraction = Number(key, value);
  } else if (key == keys::kStragglerFactor) {
    o->delay.straggler_factor = Number(key, value);
  } else if (key == keys::kPauseProbability) {
    o->delay.pause_probability = Number(key, value);
  } else if (key == keys::kPauseMs) {
    o->delay.pause_length = Checked(key, value, 1e6);
  } else if (key == keys::kPreset) {
    o->network = NetworkPreset(Trim(value));
  } else if (key == keys::kLatencyUs) {
    o->network.latency = Checked(key, value, 1e3);
  } else if (key == keys::kLinkGbps) {
    o->network.link_bandwidth = Number(key, value) * 1e9 / 8;
  } else if (key == keys::kShardNicGbps) {
    o->network.shard_nic_bandwidth = Number(key, value) * 1e9 / 8;
  } else if (key == keys::kGoodput) {
    o->network.goodput = Number(key, value);
  } else if (key == keys::kSharing) {
    o->network.sharing = ParseNetworkSharing(Trim(value));
  } else if (key == keys::kChunkKib) {
    const double kib = Number(key, value);
    if (!(kib > 0 && kib < 1e12)) {
      throw ConfigError(std::string(key), std::string(value), "> 0 (KiB per chunk)");
    }
    o->network.chunk_bytes = std::max<int64_t>(1, std::llround(kib * 1024));
  } else if (key == keys::kServerNsPerElement) {
    o->network.server_ns_per_element = Number(key, value);
  } else if (key == keys::kServerUsPerMessage) {
    o->network.server_per_message = Checked(key, value, 1e3);
  } else if (key == keys::kStackKib) {
    const double kib = Number(key, value);
    if (!(kib >= 0 && kib < 1e9) || kib != std::floor(kib)) {
      throw ConfigError(std::string(key), std::string(value), "a whole number of KiB");
    }
    o->scheduler.stack_bytes = static_cast<std::size_t>(kib) * 1024;
  } else if (key == keys::kCores) {
    const double n = Number(key, value);
    if (!(n >= 0 && n <= 1e6) || n != std::floor(n)) {
      throw ConfigError(std::string(key), std::string(value), "a whole number of cores >= 0");
    }
    o->cores = static_cast<int>(n);
  } else if (key == keys::kTransportUsPerMessage) {
    o->transport_cpu.per_message = Checked(key, value, 1e3);
  } else if (key == keys::kTransportNsPerByte) {
    o->transport_cpu.ns_per_byte = Number(key, value);
  } else if (key == keys::kShareBuffers) {
    const std::optional<bool> b = ParseBool(value);
    if (!b) throw ConfigError(std::string(key), std::string(value), "true or false");
    o->share_buffers = *b;
  } else {
    std::vector<std::string> known;
    for (const OptionKey& k : kKeys) known.emplace_back(k.key);
    const std::string near = ClosestMatch(key, known);
    throw ConfigError(std::string(key), std::string(value),
                      near.empty() ? "a known simulator key"
                                   : "a known simulator key (did you mean " + near + "?)");
  }
}

SimOptions SimOptionsFromMap(const std::map<std::string, std::string>& values) {
  SimOptions o;
  const auto given = [&values](std::string_view key) {
    return values.find(std::string(key)) != values.end();
  };
  bool loopback = false;
  if (auto it = values.find(std::string(keys::kPreset)); it != values.end()) {
    ApplySimOption(&o, it->first, it->second);
    loopback = Trim(it->second) == "loopback";
  }
  for (const auto& [key, value] : values) {
    if (key != keys::kPreset) ApplySimOption(&o, key, value);
  }
  // Loopback's rate is measured payload, hence its goodput of 1; a rate given on top of
  // it is a line rate, as in every other preset, so it takes the Ethernet goodput, and
  // loopback's link, if kept, becomes the line rate that carries its payload. An explicit
  // goodput is the user's own and stays.
  if (loopback && !given(keys::kGoodput) &&
      (given(keys::kLinkGbps) || given(keys::kShardNicGbps))) {
    if (!given(keys::kLinkGbps)) o.network.link_bandwidth /= kEthernetGoodput;
    o.network.goodput = kEthernetGoodput;
  }
  o.Validate();
  return o;
}

}  // namespace asgd::sim
