// The configuration keys of the simulator's options, one constant per field, so that the
// messages of Validate() and the config layer (sim/options.h) spell them the same way.
//
//   delay.*    the step-time model (sim/delay_model.h): simulated runs and, later, the
//              injected sleeps of real runs
//   network.*  the network and server cost model (sim/network_model.h): simulated runs
//   sim.*      the scheduler (sim/scheduler.h), the host's cores and the transport's CPU
//              on them (sim/core_pool.h)
#pragma once

#include <string_view>

namespace asgd::sim::keys {

inline constexpr std::string_view kCompute = "delay.compute";
inline constexpr std::string_view kMeasuredScale = "delay.measured_scale";
inline constexpr std::string_view kMeanMs = "delay.mean_ms";
inline constexpr std::string_view kStddevMs = "delay.stddev_ms";
inline constexpr std::string_view kParetoShape = "delay.pareto_shape";
inline constexpr std::string_view kSpeeds = "delay.speeds";
inline constexpr std::string_view kStragglerFraction = "delay.straggler_fraction";
inline constexpr std::string_view kStragglerFactor = "delay.straggler_factor";
inline constexpr std::string_view kPauseProbability = "delay.pause_probability";
inline constexpr std::string_view kPauseMs = "delay.pause_ms";

inline constexpr std::string_view kPreset = "network.preset";
inline constexpr std::string_view kLatencyUs = "network.latency_us";
inline constexpr std::string_view kLinkGbps = "network.link_gbps";
inline constexpr std::string_view kShardNicGbps = "network.shard_nic_gbps";
inline constexpr std::string_view kGoodput = "network.goodput";
inline constexpr std::string_view kSharing = "network.sharing";
inline constexpr std::string_view kChunkKib = "network.chunk_kib";
inline constexpr std::string_view kServerNsPerElement = "network.server_ns_per_element";
inline constexpr std::string_view kServerUsPerMessage = "network.server_us_per_message";

inline constexpr std::string_view kStackKib = "sim.stack_kib";
inline constexpr std::string_view kCores = "sim.cores";
inline constexpr std::string_view kShareBuffers = "sim.share_buffers";
inline constexpr std::string_view kTransportUsPerMessage = "sim.transport_us_per_message";
inline constexpr std::string_view kTransportNsPerByte = "sim.transport_ns_per_byte";

}  // namespace asgd::sim::keys
