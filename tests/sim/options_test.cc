#include "sim/options.h"

#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"

namespace asgd::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(SimOptions, DefaultsAreValidAndEveryKeyIsDocumented) {
  SimOptions o;
  EXPECT_NO_THROW(o.Validate());
  std::set<std::string> seen;
  for (const OptionKey& k : SimOptionKeys()) {
    EXPECT_TRUE(seen.insert(std::string(k.key)).second) << k.key;
    EXPECT_FALSE(k.doc.empty()) << k.key;
    // Every key in the table is understood by ApplySimOption, with its stated default.
    SimOptions copy;
    const std::string value = k.default_value == "(preset)" ? "1" : std::string(k.default_value);
    EXPECT_NO_THROW(ApplySimOption(&copy, k.key, value)) << k.key;
  }
  EXPECT_EQ(seen.size(), 24u);
}

TEST(SimOptions, PresetFirstThenOverrides) {
  const SimOptions o = SimOptionsFromMap({
      {"network.latency_us", "40"},  // sorts before network.preset, applies after it
      {"network.preset", "dc_10gbe"},
      {"delay.compute", "pareto"},
      {"delay.pareto_shape", "1.5"},
      {"delay.mean_ms", "12.5"},
      {"delay.speeds", "1, 2,4"},
      {"sim.stack_kib", "1024"},
      {"sim.cores", "2"},
      {"sim.transport_us_per_message", "12.5"},
      {"sim.transport_ns_per_byte", "0.3"},
      {"network.sharing", "fair"},  // applied after the preset, which does not reset it
      {"network.chunk_kib", "1.4140625"},
  });
  EXPECT_EQ(o.network.chunk_bytes, 1448);  // one TCP segment's payload
  EXPECT_EQ(SimOptions().network.chunk_bytes, 16 * 1024);
  EXPECT_EQ(o.network.latency, microseconds(40));
  EXPECT_EQ(o.network.sharing, NetworkSharing::kFair);
  EXPECT_EQ(SimOptions().network.sharing, NetworkSharing::kFifo);
  EXPECT_DOUBLE_EQ(o.network.link_bandwidth, NetworkPreset("dc_10gbe").link_bandwidth);
  EXPECT_EQ(o.delay.compute, ComputeKind::kPareto);
  EXPECT_DOUBLE_EQ(o.delay.pareto_shape, 1.5);
  EXPECT_EQ(o.delay.mean, microseconds(12500));
  EXPECT_EQ(o.delay.speeds, (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(o.scheduler.stack_bytes, 1024u * 1024u);
  EXPECT_EQ(o.cores, 2);
  EXPECT_EQ(o.transport_cpu.per_message, std::chrono::nanoseconds(12'500));
  EXPECT_DOUBLE_EQ(o.transport_cpu.ns_per_byte, 0.3);
  // One end's CPU for a message of 1,000 payload bytes: 12.5 us + 300 ns.
  EXPECT_EQ(o.transport_cpu.Cost(1000), std::chrono::nanoseconds(12'800));
  // The defaults charge nothing.
  EXPECT_FALSE(SimOptions().transport_cpu.active());
  EXPECT_TRUE(o.transport_cpu.active());
}

// One goodput rule for presets and explicit rates (issue 30): an explicit network.link_gbps
// is a line rate and moves payload at the same 94 % as the preset of that line rate.
TEST(SimOptions, AnExplicitLinkRateGetsThePresetsGoodput) {
  const auto transfer = [](const NetworkOptions& n) {
    return NetworkModel(n, 1, 1).TransferTime(1'000'000);
  };
  const Duration preset = transfer(NetworkPreset("dc_10gbe"));
  EXPECT_EQ(transfer(SimOptionsFromMap({{"network.link_gbps", "10"}}).network), preset);
  for (const char* base : {"wan", "dc_10gbe", "dc_100gbe"}) {
    EXPECT_EQ(
        transfer(
            SimOptionsFromMap({{"network.preset", base}, {"network.link_gbps", "10"}}).network),
        preset)
        << base;
  }
  // 1 MB at 10 Gbit/s x 1448/1538: 849.7 us, not the line rate's 800 us.
  EXPECT_EQ(preset, std::chrono::nanoseconds(849'724));
}

// The same rule on loopback, whose own rate is measured payload (goodput 1): a line rate
// given on top of it is a line rate. network.link_gbps = 10 moves what dc_10gbe moves; a
// shard NIC alone is a line rate too, while loopback's link keeps its payload rate (the
// line rate that carries it at 94 %); an explicit goodput still wins.
TEST(SimOptions, OnLoopbackAnExplicitLineRateGetsTheGoodputToo) {
  const auto network = [](std::map<std::string, std::string> values) {
    values["network.preset"] = "loopback";
    return SimOptionsFromMap(values).network;
  };
  const auto transfer = [](const NetworkOptions& n) {
    return NetworkModel(n, 1, 1).TransferTime(1'000'000);
  };
  EXPECT_EQ(network({}).goodput, 1);
  EXPECT_EQ(NetworkModel(network({}), 1, 1).payload_rate(), 3.67e9);
  EXPECT_EQ(transfer(network({{"network.link_gbps", "10"}})), transfer(NetworkPreset("dc_10gbe")));
  EXPECT_EQ(network({{"network.link_gbps", "10"}}).goodput, kEthernetGoodput);
  EXPECT_EQ(transfer(network({{"network.link_gbps", "10"}, {"network.goodput", "1"}})),
            std::chrono::nanoseconds(800'000));
  // A 10 Gbit/s shard NIC is slower than loopback's 3.67 GB/s: it sets the rate, at 94 %.
  EXPECT_EQ(transfer(network({{"network.shard_nic_gbps", "10"}})),
            transfer(NetworkPreset("dc_10gbe")));
  // A 100 Gbit/s one is not: loopback's measured 3.67 GB/s still does.
  EXPECT_DOUBLE_EQ(NetworkModel(network({{"network.shard_nic_gbps", "100"}}), 1, 1).payload_rate(),
                   3.67e9);
}

TEST(SimOptions, BadValuesAreOneLineNamingTheKey) {
  const std::map<std::string, std::string> bad[] = {
      {{"delay.compute", "gamma"}},
      {{"delay.pareto_shape", "1"}},
      {{"delay.mean_ms", "ten"}},
      {{"delay.speeds", "1,,2"}},
      {{"delay.straggler_fraction", "2"}},
      {{"network.link_gbps", "-10"}},
      {{"network.preset", "infiniband"}},
      {{"network.latency_us", "-3"}},
      {{"network.goodput", "1.5"}},
      {{"network.sharing", "lifo"}},
      {{"network.chunk_kib", "0"}},
      {{"network.chunk_kib", "-16"}},
      {{"network.chunk_kib", "nan"}},
      {{"network.chunk_kib", "a window"}},
      {{"network.server_ns_per_element", "-1"}},
      {{"sim.stack_kib", "64"}},
      {{"sim.stack_kib", "300.5"}},
      {{"sim.cores", "-1"}},
      {{"sim.cores", "1.5"}},
      {{"sim.share_buffers", "sometimes"}},
      {{"sim.transport_us_per_message", "-1"}},
      {{"sim.transport_us_per_message", "fast"}},
      {{"sim.transport_ns_per_byte", "-0.5"}},
      {{"sim.transport_ns_per_byte", "nan"}},
      {{"sim.transport_ns_per_byte", "1e300"}},
      {{"delay.mean", "5"}},  // unknown key
  };
  for (const auto& values : bad) {
    const std::string key = values.begin()->first;
    try {
      SimOptionsFromMap(values);
      ADD_FAILURE() << key << " = " << values.begin()->second << ": accepted";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.key(), key) << what;
      EXPECT_NE(what.find(key), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  try {
    SimOptionsFromMap({{"delay.mean", "5"}});
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean delay.mean_ms"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace asgd::sim
