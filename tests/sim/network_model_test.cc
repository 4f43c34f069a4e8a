#include "sim/network_model.h"

#include <string>

#include <gtest/gtest.h>

#include "core/error.h"

namespace asgd::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

NetworkOptions Link(Duration latency, double bytes_per_s) {
  NetworkOptions o;
  o.latency = latency;
  o.link_bandwidth = bytes_per_s;
  o.goodput = 1;  // payload at the line rate: the closed forms below in whole ns
  return o;
}

// k simultaneous messages of b bytes on one link of bandwidth B: latency + i·b/B.
TEST(NetworkModel, SimultaneousMessagesOnOneLinkQueueFifo) {
  constexpr double kB = 1e9;           // 1 GB/s: 1 byte per ns
  constexpr int64_t kBytes = 250'000;  // 250 µs each
  const Duration latency = microseconds(40);
  for (int k : {1, 2, 5, 16}) {
    NetworkModel net(Link(latency, kB), 1, 1);
    for (int i = 1; i <= k; ++i) {
      EXPECT_EQ(net.SendToShard(0, 0, kBytes, Duration::zero()), latency + i * microseconds(250))
          << "k=" << k << " i=" << i;
    }
    // The other direction is independent (full duplex).
    EXPECT_EQ(net.SendToWorker(0, 0, kBytes, Duration::zero()), latency + microseconds(250));
  }
}

TEST(NetworkModel, TheShardNicIsSharedByItsLinks) {
  // k workers send to one shard at once: the shard's NIC serialises them exactly as one
  // link would; another shard is not affected.
  const Duration latency = microseconds(10);
  NetworkModel net(Link(latency, 1e9), 8, 2);
  for (int w = 0; w < 8; ++w) {
    EXPECT_EQ(net.SendToShard(w, 0, 1000, Duration::zero()), latency + (w + 1) * nanoseconds(1000));
  }
  EXPECT_EQ(net.SendToShard(0, 1, 1000, Duration::zero()),
            latency + 2 * nanoseconds(1000));  // worker 0's own NIC sent one before
  EXPECT_EQ(net.shard_stats(0).bytes_in, 8000);
  EXPECT_EQ(net.shard_stats(0).nic_wait, nanoseconds(1000 * (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7)));
  // A message sent once the NIC is idle again does not wait.
  EXPECT_EQ(net.SendToShard(3, 0, 1000, microseconds(100)),
            microseconds(100) + latency + nanoseconds(1000));
}

TEST(NetworkModel, TheSlowerEndSetsTheRate) {
  NetworkOptions o = Link(Duration::zero(), 2e9);
  o.shard_nic_bandwidth = 1e9;
  NetworkModel net(o, 1, 1);
  EXPECT_EQ(net.TransferTime(5000), nanoseconds(5000));
}

TEST(NetworkModel, ServerWorkQueuesPerShard) {
  NetworkOptions o;
  o.server_per_message = microseconds(5);
  o.server_ns_per_element = 0.5;
  NetworkModel net(o, 1, 2);
  // 2,000 elements: 5 us + 2,000 x 0.5 ns.
  EXPECT_EQ(net.Serve(0, 2000, Duration::zero()), microseconds(6));
  EXPECT_EQ(net.Serve(0, 2000, microseconds(1)), microseconds(12));  // behind the first
  EXPECT_EQ(net.Serve(1, 0, microseconds(1)), microseconds(6));      // another shard
}

// The goodput applies to both rates: payload moves at min(link, shard NIC) x goodput.
TEST(NetworkModel, GoodputScalesTheSlowerLineRate) {
  NetworkOptions o = Link(Duration::zero(), 4e9);
  o.shard_nic_bandwidth = 2e9;
  o.goodput = 0.5;
  NetworkModel net(o, 1, 1);
  EXPECT_DOUBLE_EQ(net.payload_rate(), 1e9);
  EXPECT_EQ(net.TransferTime(5000), nanoseconds(5000));
  EXPECT_DOUBLE_EQ(NetworkModel(NetworkPreset("dc_10gbe"), 1, 1).payload_rate(),
                   10e9 / 8 * 1448 / 1538);
  EXPECT_DOUBLE_EQ(NetworkModel(NetworkPreset("loopback"), 1, 1).payload_rate(), 3.67e9);
}

TEST(NetworkModel, ZeroPresetCostsNothing) {
  NetworkModel net(NetworkPreset("zero"), 4, 4);
  EXPECT_EQ(net.SendToShard(1, 2, 1 << 30, microseconds(7)), microseconds(7));
  EXPECT_EQ(net.Serve(2, 1 << 30, microseconds(7)), microseconds(7));
}

TEST(NetworkModel, PresetsAreValidAndOrdered) {
  for (const std::string& name : NetworkPresetNames()) {
    EXPECT_NO_THROW(NetworkPreset(name).Validate()) << name;
  }
  EXPECT_GT(NetworkPreset("dc_100gbe").link_bandwidth, NetworkPreset("dc_10gbe").link_bandwidth);
  EXPECT_GT(NetworkPreset("wan").latency, NetworkPreset("dc_10gbe").latency);
  EXPECT_DOUBLE_EQ(NetworkPreset("dc_10gbe").link_bandwidth, 1.25e9);  // the line rate
  EXPECT_DOUBLE_EQ(NetworkPreset("dc_10gbe").goodput, kEthernetGoodput);
  EXPECT_EQ(NetworkPreset("dc_10gbe").server_ns_per_element, 1.0);
}

TEST(NetworkModel, BadOptionsNameTheirKey) {
  auto expect_key = [](const NetworkOptions& o, const std::string& key) {
    try {
      NetworkModel net(o, 1, 1);
      ADD_FAILURE() << key << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), key);
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  NetworkOptions o;
  o.link_bandwidth = -1.25e9;
  expect_key(o, "network.link_gbps");
  o = {};
  o.link_bandwidth = 0;
  expect_key(o, "network.link_gbps");
  o = {};
  o.shard_nic_bandwidth = -1;
  expect_key(o, "network.shard_nic_gbps");
  o = {};
  o.latency = microseconds(-1);
  expect_key(o, "network.latency_us");
  o = {};
  o.server_ns_per_element = -0.1;
  expect_key(o, "network.server_ns_per_element");
  for (double g : {0.0, -0.5, 1.01}) {
    o = {};
    o.goodput = g;
    expect_key(o, "network.goodput");
  }
  o = {};
  o.server_per_message = microseconds(-2);
  expect_key(o, "network.server_us_per_message");
  try {
    NetworkPreset("infiniband");
    ADD_FAILURE() << "unknown preset accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "network.preset");
  }
}

}  // namespace
}  // namespace asgd::sim
