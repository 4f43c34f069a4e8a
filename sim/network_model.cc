#include "sim/network_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

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

// Under kFair a flow has ended when what it has left takes at most this long (ns): the
// timer is armed at the next end rounded up to a whole nanosecond, and floating-point
// rounding must not leave a flow a few bytes short of it.
constexpr double kEndSlackNs = 1e-3;

// How long flow f still needs at its rate, ns (0 for an infinite rate or nothing left).
template <typename F>
double NsToEnd(const F& f) {
  if (f.remaining <= 0 || std::isinf(f.rate)) return 0;
  return f.remaining / f.rate * 1e9;
}

// A ratio of line rates this close (relative) to a whole number is that number: rates
// written in decimal Gbit/s (0.3 and 0.1) need not divide exactly in binary.
constexpr double kWholeRatioSlack = 1e-9;
// More places than this on a side is no limit (an infinite NIC behind finite links).
constexpr int kUnlimitedPlaces = 1 << 30;

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
  if (chunk_bytes < 1) {
    throw ConfigError(std::string(keys::kChunkKib),
                      FormatNumber(static_cast<double>(chunk_bytes) / 1024),
                      "at least one byte (KiB; 1448 bytes = 1.4140625)");
  }
}

NetworkSharing ParseNetworkSharing(std::string_view value) {
  if (value == "fifo") return NetworkSharing::kFifo;
  if (value == "fair") return NetworkSharing::kFair;
  if (value == "interleaved") return NetworkSharing::kInterleaved;
  throw ConfigError(std::string(keys::kSharing), std::string(value),
                    "fifo, fair or interleaved (how a NIC side serves the messages on it)");
}

std::string_view NetworkSharingName(NetworkSharing sharing) {
  switch (sharing) {
    case NetworkSharing::kFair:
      return "fair";
    case NetworkSharing::kInterleaved:
      return "interleaved";
    case NetworkSharing::kFifo:
      break;
  }
  return "fifo";
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

NetworkModel::FlowPlaces NetworkModel::PlacesFor(double ratio) {
  if (!(ratio < kUnlimitedPlaces)) return {kUnlimitedPlaces, 0};
  const double whole = std::round(ratio);
  if (std::fabs(ratio - whole) <= kWholeRatioSlack * ratio) ratio = whole;
  const double floor = std::floor(ratio);
  return {static_cast<int>(floor), ratio - floor};
}

NetworkModel::NetworkModel(const NetworkOptions& options, int workers, int shards, uint64_t seed)
    : options_(options), rng_(DeriveSeed(seed, "network.interleaved")) {
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
  workers_ = workers;
  const double shard_line =
      options_.shard_nic_bandwidth > 0 ? options_.shard_nic_bandwidth : options_.link_bandwidth;
  side_capacity_.assign(2 * w, options_.link_bandwidth * options_.goodput);
  side_capacity_.resize(2 * w + 2 * s, shard_line * options_.goodput);
  left_.assign(side_capacity_.size(), 0);
  unfixed_.assign(side_capacity_.size(), 0);
  waiting_.resize(side_capacity_.size());
  // kInterleaved: each side's room in flows of one flow's line rate (the slower end's),
  // from the line rates themselves so that the goodput cannot make a whole ratio
  // fractional.
  const double flow_line = std::min(options_.link_bandwidth, shard_line);
  places_.assign(side_capacity_.size(), 1);
  rest_.assign(side_capacity_.size(), 0);
  for (std::size_t side = 0; side < places_.size(); ++side) {
    const double line = side < 2 * w ? options_.link_bandwidth : shard_line;
    if (line == flow_line) continue;  // the presets' case: one chunk at a time
    const FlowPlaces p = PlacesFor(line / flow_line);
    places_[side] = p.whole;
    rest_[side] = p.rest;
  }
  places_taken_.assign(side_capacity_.size(), 0);
  rest_held_.assign(side_capacity_.size(), 0);
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
  ASGD_CHECK(options_.sharing == NetworkSharing::kFifo,
             "NetworkModel: a synchronous send under fair or interleaved sharing (use the "
             "asynchronous one)");
  ASGD_CHECK(worker >= 0 && static_cast<std::size_t>(worker) < worker_tx_.size());
  ASGD_CHECK(shard >= 0 && static_cast<std::size_t>(shard) < shard_rx_.size());
  const auto w = static_cast<std::size_t>(worker), s = static_cast<std::size_t>(shard);
  stats_[s].bytes_in += bytes;
  return Send(worker_tx_[w], shard_rx_[s], bytes, t, &stats_[s].nic_wait);
}

Duration NetworkModel::SendToWorker(int shard, int worker, int64_t bytes, Duration t) {
  ASGD_CHECK(options_.sharing == NetworkSharing::kFifo,
             "NetworkModel: a synchronous send under fair or interleaved sharing (use the "
             "asynchronous one)");
  ASGD_CHECK(worker >= 0 && static_cast<std::size_t>(worker) < worker_rx_.size());
  ASGD_CHECK(shard >= 0 && static_cast<std::size_t>(shard) < shard_tx_.size());
  const auto w = static_cast<std::size_t>(worker), s = static_cast<std::size_t>(shard);
  stats_[s].bytes_out += bytes;
  return Send(shard_tx_[s], worker_rx_[w], bytes, t, &stats_[s].nic_wait);
}

void NetworkModel::SendToShard(Scheduler& sched, int worker, int shard, int64_t bytes,
                               std::function<void()> on_arrival) {
  if (options_.sharing == NetworkSharing::kFifo) {
    sched.At(SendToShard(worker, shard, bytes, sched.Now()), std::move(on_arrival));
    return;
  }
  ASGD_CHECK(worker >= 0 && worker < workers_);
  ASGD_CHECK(shard >= 0 && static_cast<std::size_t>(shard) < stats_.size());
  stats_[static_cast<std::size_t>(shard)].bytes_in += bytes;
  const int shards = static_cast<int>(stats_.size());
  SendAsync(sched, worker, 2 * workers_ + shards + shard, shard, bytes, std::move(on_arrival));
}

void NetworkModel::SendToWorker(Scheduler& sched, int shard, int worker, int64_t bytes,
                                std::function<void()> on_arrival) {
  if (options_.sharing == NetworkSharing::kFifo) {
    sched.At(SendToWorker(shard, worker, bytes, sched.Now()), std::move(on_arrival));
    return;
  }
  ASGD_CHECK(worker >= 0 && worker < workers_);
  ASGD_CHECK(shard >= 0 && static_cast<std::size_t>(shard) < stats_.size());
  stats_[static_cast<std::size_t>(shard)].bytes_out += bytes;
  SendAsync(sched, 2 * workers_ + shard, workers_ + worker, shard, bytes, std::move(on_arrival));
}

void NetworkModel::SendAsync(Scheduler& sched, int tx, int rx, int shard, int64_t bytes,
                             std::function<void()> on_arrival) {
  ASGD_CHECK_GE(bytes, 0);
  if (sched_ == nullptr) {
    sched_ = &sched;
    moved_to_ = sched.Now();
  }
  ASGD_CHECK(sched_ == &sched, "NetworkModel: asynchronous sends on two schedulers");
  if (options_.sharing == NetworkSharing::kInterleaved) {
    StartChunked(tx, rx, shard, bytes, std::move(on_arrival));
  } else {
    StartFlow(tx, rx, shard, bytes, std::move(on_arrival));
  }
}

void NetworkModel::StartFlow(int tx, int rx, int shard, int64_t bytes,
                             std::function<void()> on_arrival) {
  Advance();
  Flow f;
  f.tx = tx;
  f.rx = rx;
  f.shard = shard;
  f.bytes = bytes;
  f.handed = moved_to_;
  f.remaining = static_cast<double>(bytes);
  f.on_arrival = std::move(on_arrival);
  flows_.push_back(std::move(f));
  ComputeRates();
  ArmTimer();
}

void NetworkModel::Advance() {
  const Duration now = sched_->Now();
  if (now > moved_to_) {
    const double dt = std::chrono::duration<double>(now - moved_to_).count();
    for (Flow& f : flows_) {
      f.remaining = std::isinf(f.rate) ? 0 : std::max(0.0, f.remaining - f.rate * dt);
    }
    moved_to_ = now;
  }
  EndFinishedFlows();
}

void NetworkModel::EndFinishedFlows() {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < flows_.size(); ++i) {
    Flow& f = flows_[i];
    if (NsToEnd(f) <= kEndSlackNs) {
      const Duration took = moved_to_ - f.handed;
      const Duration unshared = TransferTime(f.bytes);
      if (took > unshared) stats_[static_cast<std::size_t>(f.shard)].nic_wait += took - unshared;
      sched_->At(moved_to_ + options_.latency, std::move(f.on_arrival));
      continue;
    }
    if (kept != i) flows_[kept] = std::move(f);
    ++kept;
  }
  flows_.resize(kept);
}

void NetworkModel::ComputeRates() {
  // Progressive filling: every flow starts unfixed; the side whose capacity left, split
  // equally among its unfixed flows, is smallest fixes them all at that share, which is
  // taken off their other sides; until every flow is fixed. Ties go to the lower side
  // index (deterministic; either order gives the same rates).
  touched_.clear();
  for (Flow& f : flows_) {
    for (const int side : {f.tx, f.rx}) {
      const auto si = static_cast<std::size_t>(side);
      if (unfixed_[si] == 0) {
        touched_.push_back(side);
        left_[si] = side_capacity_[si];
      }
      ++unfixed_[si];
    }
    f.rate = -1;  // unfixed
  }
  std::size_t open = flows_.size();
  while (open > 0) {
    int best = -1;
    double share = 0;
    for (const int side : touched_) {
      const auto si = static_cast<std::size_t>(side);
      if (unfixed_[si] == 0) continue;
      const double s = std::max(0.0, left_[si]) / unfixed_[si];
      if (best < 0 || s < share || (s == share && side < best)) {
        best = side;
        share = s;
      }
    }
    ASGD_CHECK_GE(best, 0);
    for (Flow& f : flows_) {
      if (f.rate >= 0 || (f.tx != best && f.rx != best && !std::isinf(share))) continue;
      // An infinite smallest share: every side left is infinite, every flow left unbounded.
      f.rate = share;
      for (const int side : {f.tx, f.rx}) {
        const auto si = static_cast<std::size_t>(side);
        if (!std::isinf(left_[si])) left_[si] -= share;
        --unfixed_[si];
      }
      --open;
    }
  }
}

void NetworkModel::ArmTimer() {
  const uint64_t generation = ++timer_generation_;
  if (flows_.empty()) return;
  double next = std::numeric_limits<double>::infinity();
  for (const Flow& f : flows_) next = std::min(next, NsToEnd(f));
  // Rounded up to a whole nanosecond (a flow ends no earlier than its last byte), unless
  // within the slack of one.
  const double ahead = std::max(0.0, std::ceil(next - kEndSlackNs));
  ASGD_CHECK(ahead < 9.0e18, "NetworkModel: a flow that never ends");
  sched_->At(moved_to_ + Duration(static_cast<Duration::rep>(ahead)), [this, generation] {
    if (generation != timer_generation_) return;  // a flow started or ended since
    Advance();
    ComputeRates();
    ArmTimer();
  });
}

void NetworkModel::StartChunked(int tx, int rx, int shard, int64_t bytes,
                                std::function<void()> on_arrival) {
  const Duration now = sched_->Now();
  if (bytes == 0 || std::isinf(rate_)) {  // nothing to move, or moved at once
    sched_->At(now + options_.latency, std::move(on_arrival));
    return;
  }
  int id = 0;
  if (free_chunked_.empty()) {
    id = static_cast<int>(chunked_.size());
    chunked_.emplace_back();
  } else {
    id = free_chunked_.back();
    free_chunked_.pop_back();
  }
  chunked_[static_cast<std::size_t>(id)] = ChunkedMessage{
      tx, rx, shard, bytes, 0, now, std::move(on_arrival), Duration::zero(), false, false};
  waiting_[static_cast<std::size_t>(tx)].push_back(id);
  waiting_[static_cast<std::size_t>(rx)].push_back(id);
  Dispatch(tx, rx);
}

bool NetworkModel::HasRoom(int side) const {
  const auto si = static_cast<std::size_t>(side);
  return places_taken_[si] < places_[si] || (rest_[si] > 0 && rest_held_[si] == 0);
}

bool NetworkModel::TakePlace(int side) {
  const auto si = static_cast<std::size_t>(side);
  if (places_taken_[si] < places_[si]) {
    ++places_taken_[si];
    return false;
  }
  rest_held_[si] = 1;
  return true;
}

void NetworkModel::Dispatch(int a, int b) {
  for (;;) {
    // The messages waiting on one of the two sides with room whose other side has room
    // too, each once (one between a and b waits on both).
    candidates_.clear();
    const int sides[] = {a, b};
    for (int i = 0; i < (a == b ? 1 : 2); ++i) {
      const int side = sides[i];
      if (!HasRoom(side)) continue;
      for (const int id : waiting_[static_cast<std::size_t>(side)]) {
        const ChunkedMessage& m = chunked_[static_cast<std::size_t>(id)];
        const int other = m.tx == side ? m.rx : m.tx;
        if (side == b && other == a) continue;  // counted with a
        if (HasRoom(other)) candidates_.push_back(id);
      }
    }
    if (candidates_.empty()) return;
    const int id = candidates_.size() == 1
                       ? candidates_.front()
                       : candidates_[static_cast<std::size_t>(rng_.UniformInt(candidates_.size()))];
    ChunkedMessage& m = chunked_[static_cast<std::size_t>(id)];
    for (const int s : {m.tx, m.rx}) {
      std::vector<int>& queue = waiting_[static_cast<std::size_t>(s)];
      queue.erase(std::find(queue.begin(), queue.end(), id));
    }
    m.tx_rest = TakePlace(m.tx);
    m.rx_rest = TakePlace(m.rx);
    // Each chunk's time from the bytes moved so far, so that a message's chunks add up
    // to TransferTime(bytes) exactly (every chunk moves at the flow's rate, whatever its
    // places).
    const int64_t chunk = std::min(options_.chunk_bytes, m.bytes - m.sent);
    const Duration took = TransferTime(m.sent + chunk) - TransferTime(m.sent);
    m.sent += chunk;
    m.chunk_started = sched_->Now();
    sched_->At(sched_->Now() + took, [this, id] { EndChunk(id); });
  }
}

void NetworkModel::ReleasePlace(int side, bool rest, Duration chunk_started) {
  const auto si = static_cast<std::size_t>(side);
  if (!rest) {
    --places_taken_[si];
    return;
  }
  // The fractional place carried its chunk at the flow's rate r in T; it rests until
  // T / rest_ from the chunk's start, so that it moves rest_ · r on average.
  const Duration now = sched_->Now();
  const auto held = Duration(static_cast<Duration::rep>(
      std::llround(static_cast<double>((now - chunk_started).count()) / rest_[si])));
  if (chunk_started + held <= now) {
    rest_held_[si] = 0;
    return;
  }
  sched_->At(chunk_started + held, [this, side] {
    rest_held_[static_cast<std::size_t>(side)] = 0;
    Dispatch(side, side);
  });
}

void NetworkModel::EndChunk(int id) {
  ChunkedMessage& m = chunked_[static_cast<std::size_t>(id)];
  const int tx = m.tx, rx = m.rx;
  ReleasePlace(tx, m.tx_rest, m.chunk_started);
  ReleasePlace(rx, m.rx_rest, m.chunk_started);
  if (m.sent == m.bytes) {
    const Duration now = sched_->Now();
    const Duration took = now - m.handed;
    const Duration unshared = TransferTime(m.bytes);
    if (took > unshared) stats_[static_cast<std::size_t>(m.shard)].nic_wait += took - unshared;
    sched_->At(now + options_.latency, std::move(m.on_arrival));
    m.on_arrival = nullptr;
    free_chunked_.push_back(id);
  } else {
    waiting_[static_cast<std::size_t>(tx)].push_back(id);
    waiting_[static_cast<std::size_t>(rx)].push_back(id);
  }
  Dispatch(tx, rx);
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
