#include "sim/network_model.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "sim/option_keys.h"
#include "sim/validate.h"

namespace asgd::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

double Micros(Duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
double Gbps(double bytes_per_s) { return bytes_per_s * 8 / 1e9; }

constexpr double LineRate(double gbit_per_s) { return gbit_per_s * 1e9 / 8; }

// The measured server costs of the header comment.
constexpr Duration kServerPerMessage = microseconds(5);
constexpr double kServerNsPerElement = 1.0;

}  // namespace

void NetworkOptions::Validate() const {
  RequireFinite(keys::kLatencyUs, Micros(latency), ">= 0 (microseconds)",
                latency >= Duration::zero());
  // Bandwidths may be +infinity (no transfer time), never NaN, zero or negative.
  if (!(link_bandwidth > 0)) {
    throw ConfigError(std::string(keys::kLinkGbps), FormatNumber(Gbps(link_bandwidth)),
                      "> 0 (Gbit/s)");
  }
  if (!(shard_nic_bandwidth >= 0)) {
    throw ConfigError(std::string(keys::kShardNicGbps), FormatNumber(Gbps(shard_nic_bandwidth)),
                      ">= 0 (Gbit/s; 0 = the link bandwidth)");
  }
  RequireFinite(keys::kGoodput, goodput, "in (0, 1] (payload bytes per byte of line rate)",
                goodput > 0 && goodput <= 1);
  RequireFinite(keys::kServerUsPerMessage, Micros(server_per_message), ">= 0 (microseconds)",
                server_per_message >= Duration::zero());
  RequireFinite(keys::kServerNsPerElement, server_ns_per_element, ">= 0 (nanoseconds)",
                server_ns_per_element >= 0);
}

std::vector<std::string> NetworkPresetNames() {
  return {"zero", "loopback", "dc_10gbe", "dc_100gbe", "wan"};
}

NetworkOptions NetworkPreset(std::string_view name) {
  NetworkOptions o;
  if (name == "zero") return o;
  o.server_per_message = kServerPerMessage;
  o.server_ns_per_element = kServerNsPerElement;
  if (name == "loopback") {
    o.latency = microseconds(54);
    o.link_bandwidth = 3.67e9;  // measured payload
    o.goodput = 1;
  } else if (name == "dc_10gbe") {
    o.latency = microseconds(25);
    o.link_bandwidth = LineRate(10);
  } else if (name == "dc_100gbe") {
    o.latency = microseconds(15);
    o.link_bandwidth = LineRate(100);
  } else if (name == "wan") {
    o.latency = milliseconds(40);
    o.link_bandwidth = LineRate(1);
  } else {
    throw ConfigError(std::string(keys::kPreset), std::string(name),
                      "one of zero, loopback, dc_10gbe, dc_100gbe, wan");
  }
  return o;
}

NetworkModel::NetworkModel(const NetworkOptions& options, int workers, int shards)
    : options_(options) {
  options_.Validate();
  ASGD_CHECK_GE(workers, 1);
  ASGD_CHECK_GE(shards, 1);
  rate_ = (options_.shard_nic_bandwidth > 0
               ? std::min(options_.link_bandwidth, options_.shard_nic_bandwidth)
               : options_.link_bandwidth) *
          options_.goodput;
  const auto w = static_cast<std::size_t>(workers), s = static_cast<std::size_t>(shards);
  worker_tx_.assign(w, Duration::zero());
  worker_rx_.assign(w, Duration::zero());
  shard_tx_.assign(s, Duration::zero());
  shard_rx_.assign(s, Duration::zero());
  shard_cpu_.assign(s, Duration::zero());
  stats_.assign(s, ShardStats{});
}

Duration NetworkModel::TransferTime(int64_t bytes) const {
  ASGD_CHECK_GE(bytes, 0);
  if (std::isinf(rate_)) return Duration::zero();
  return Duration(
      static_cast<Duration::rep>(std::llround(static_cast<double>(bytes) / rate_ * 1e9)));
}

Duration NetworkModel::Send(Duration& tx_free, Duration& rx_free, int64_t bytes, Duration t,
                            Duration* waited) {
  // rx_free is kept in arrival time; shifting it back by the latency gives the latest
  // start that does not overlap the receiver's previous message.
  const Duration start = std::max({t, tx_free, rx_free - options_.latency});
  const Duration end = start + TransferTime(bytes);
  tx_free = end;
  rx_free = end + options_.latency;
  *waited += start - t;
  return end + options_.latency;
}

Duration NetworkModel::SendToShard(int worker, int shard, int64_t bytes, Duration t) {
  ASGD_CHECK(worker >= 0 && static_cast<std::size_t>(worker) < worker_tx_.size());
  ASGD_CHECK(shard >= 0 && static_cast<std::size_t>(shard) < shard_rx_.size());
  const auto w = static_cast<std::size_t>(worker), s = static_cast<std::size_t>(shard);
  stats_[s].bytes_in += bytes;
  return Send(worker_tx_[w], shard_rx_[s], bytes, t, &stats_[s].nic_wait);
}

Duration NetworkModel::SendToWorker(int shard, int worker, int64_t bytes, Duration t) {
  ASGD_CHECK(worker >= 0 && static_cast<std::size_t>(worker) < worker_rx_.size());
  ASGD_CHECK(shard >= 0 && static_cast<std::size_t>(shard) < shard_tx_.size());
  const auto w = static_cast<std::size_t>(worker), s = static_cast<std::size_t>(shard);
  stats_[s].bytes_out += bytes;
  return Send(shard_tx_[s], worker_rx_[w], bytes, t, &stats_[s].nic_wait);
}

Duration NetworkModel::Serve(int shard, int64_t elements, Duration t) {
  ASGD_CHECK(shard >= 0 && static_cast<std::size_t>(shard) < shard_cpu_.size());
  ASGD_CHECK_GE(elements, 0);
  Duration& free = shard_cpu_[static_cast<std::size_t>(shard)];
  const Duration start = std::max(t, free);
  const auto work = Duration(static_cast<Duration::rep>(
      std::llround(static_cast<double>(elements) * options_.server_ns_per_element)));
  free = start + options_.server_per_message + work;
  return free;
}

const NetworkModel::ShardStats& NetworkModel::shard_stats(int shard) const {
  ASGD_CHECK(shard >= 0 && static_cast<std::size_t>(shard) < stats_.size());
  return stats_[static_cast<std::size_t>(shard)];
}

}  // namespace asgd::sim
