// PsClient against real ShardServers, over inproc://, ipc:// and tcp:// on loopback:
// exactness of scattered pushes and gathered pulls, asynchronous requests, versions and
// staleness, and the failure cases a worker must survive (timeouts, error replies, a
// client or handle going away with requests in flight).
#include <atomic>
#include <cmath>
#include <limits>
#include <chrono>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compression/compressor.h"
#include "core/error.h"
#include "core/param_layout.h"
#include "core/rng.h"
#include "tests/support/test_util.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

namespace asgd::transport {

using ps::AddTo;
using ps::ErrorCode;
using ps::MemoryStalenessSink;
using ps::NewAddRule;
using ps::Placement;
using ps::PlacementOptions;
using ps::PlacementPolicy;
using ps::PlacementPolicyName;
using ps::PushOutcome;
using ps::ServerCall;
using ps::ServerRule;
using ps::ShardContext;
using ps::Status;
using ps::StatusCode;
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Several tensors of uneven sizes, so placements produce several ranges per shard.
ParamLayout TestLayout() {
  ParamLayout layout;
  layout.Add("a", {7, 5});
  layout.Add("b", {5});
  layout.Add("c", {13, 11});
  layout.Add("d", {1});
  layout.Add("e", {40});
  return layout;
}

// Initial values: small integers, so every sum below is exact in float32.
std::vector<float> Initial(int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i % 17);
  return v;
}

std::vector<float> Delta(int64_t n, int worker, int step) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = static_cast<float>((i + worker * 3 + step) % 5) - 2.0f;
  }
  return v;
}

// A running parameter server: one ShardServer thread per shard.
struct TestServers {
  std::shared_ptr<Context> context = NewContext();
  Placement placement;
  MemoryStalenessSink sink;
  testing::TempDir dir;
  std::vector<std::unique_ptr<ShardServer>> servers;  // last: stopped before the rest goes

  TestServers(const std::string& scheme, int shards, PlacementPolicy policy,
              std::span<const float> initial) {
    PlacementOptions po;
    po.policy = policy;
    placement = Placement::Build(TestLayout(), shards, po);
    ServerOptions base;
    base.staleness_sink = &sink;
    static std::atomic<int> unique{0};
    const int tag = unique++;
    servers = StartShardServers(
        context, placement, initial, [](uint32_t) { return NewAddRule(); },
        [&](int s) -> std::string {
          if (scheme == "inproc") {
            return "inproc://client-test-" + std::to_string(tag) + "-" + std::to_string(s);
          }
          if (scheme == "ipc") return "ipc://" + dir.File("ps-" + std::to_string(s));
          return "tcp://127.0.0.1:*";
        },
        base);
  }
  std::unique_ptr<PsClient> Client(uint32_t id = 0, ClientOptions options = {}) {
    options.id = id;
    options.timeout = 10s;
    return std::make_unique<PsClient>(context, Endpoints(servers), placement, options);
  }
};

struct Case {
  std::string scheme;
  int shards;
  PlacementPolicy policy;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.scheme + "_" + std::to_string(info.param.shards) + "_" +
         std::string(PlacementPolicyName(info.param.policy));
}

class ClientExactness : public ::testing::TestWithParam<Case> {};

// Three workers push concurrently, each several times, with several requests in flight;
// the final parameters must equal the initial ones plus every push, element for element.
TEST_P(ClientExactness, FinalEqualsInitialPlusEveryPush) {
  const Case& c = GetParam();
  const int64_t n = TestLayout().size();
  const std::vector<float> initial = Initial(n);
  TestServers ps(c.scheme, c.shards, c.policy, initial);
  constexpr int kWorkers = 3, kSteps = 6;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      auto client = ps.Client(static_cast<uint32_t>(w));
      std::vector<std::vector<float>> deltas;
      for (int s = 0; s < kSteps; ++s) deltas.push_back(Delta(n, w, s));
      std::vector<RequestHandle> inflight;
      for (int s = 0; s < kSteps; ++s) {
        PushOptions po;
        po.clock = s;
        inflight.push_back(client->Push(deltas[static_cast<std::size_t>(s)], po));
      }
      // Waited in reverse order: replies are matched by id, not by arrival.
      for (auto it = inflight.rbegin(); it != inflight.rend(); ++it) {
        if (!it->Wait().ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);

  std::vector<float> expected = initial;
  for (int w = 0; w < kWorkers; ++w) {
    for (int s = 0; s < kSteps; ++s) {
      const std::vector<float> d = Delta(n, w, s);
      for (std::size_t i = 0; i < d.size(); ++i) expected[i] += d[i];
    }
  }
  auto reader = ps.Client(99);
  std::vector<float> got(static_cast<std::size_t>(n), -1.0f);
  ASSERT_TRUE(reader->PullAndWait(got).ok());
  EXPECT_EQ(got, expected);
  int nonempty = 0;
  for (int s = 0; s < c.shards; ++s) {
    if (ps.placement.shard_size(s) == 0) continue;
    ++nonempty;
    EXPECT_EQ(reader->pulled_versions()[static_cast<std::size_t>(s)],
              static_cast<uint64_t>(kWorkers * kSteps))
        << "shard " << s;
  }
  // One staleness record per push per shard that owns something.
  EXPECT_EQ(ps.sink.size(), static_cast<std::size_t>(kWorkers * kSteps * nonempty));
}

// A compressed push (issue 17): each shard's part, its ranges gathered in order, encoded
// on its own; every shard applies exactly its decoded part, shards that own nothing are
// skipped, and a push-pull reads back the values after the push.
TEST_P(ClientExactness, CompressedPushesApplyEachShardsDecodedPart) {
  const Case& c = GetParam();
  const int64_t n = TestLayout().size();
  const std::vector<float> initial = Initial(n);
  TestServers ps(c.scheme, c.shards, c.policy, initial);
  auto client = ps.Client();
  std::vector<float> expected = initial;
  int step = 0;
  for (const std::string name : {"sign", "qsgd", "topk", "randk", "terngrad"}) {
    SCOPED_TRACE(name);
    compression::CompressionOptions o;
    o.name = name;
    o.ratio = 0.3;
    const auto compressor = compression::NewCompressor(o);
    const std::vector<float> delta = Delta(n, 1, step++);
    Rng rng(7);
    std::vector<compression::Encoded> parts(static_cast<std::size_t>(ps.placement.num_shards()));
    std::vector<float> decoded_flat(static_cast<std::size_t>(n), 0.0f);
    for (int s = 0; s < ps.placement.num_shards(); ++s) {
      std::vector<float> part;
      for (const Range& r : ps.placement.ranges(s)) {
        part.insert(part.end(), delta.begin() + r.begin, delta.begin() + r.end());
      }
      if (part.empty()) continue;
      compression::Encoded& e = parts[static_cast<std::size_t>(s)];
      compressor->Encode(part, rng, &e);
      std::vector<float> decoded(part.size());
      ASSERT_EQ(compression::Decode(e, decoded), "");
      std::size_t at = 0;
      for (const Range& r : ps.placement.ranges(s)) {
        for (int64_t i = r.begin; i < r.end(); ++i) {
          decoded_flat[static_cast<std::size_t>(i)] = decoded[at++];
        }
      }
    }
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += decoded_flat[i];
    std::vector<float> after(static_cast<std::size_t>(n), -1.0f);
    ASSERT_TRUE(client->PushEncoded(parts, after).Wait().ok());
    EXPECT_EQ(after, expected);
    ASSERT_TRUE(client->PushEncoded(parts, {}).Wait().ok());  // and again, a push only
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += decoded_flat[i];
  }
  std::vector<float> got(static_cast<std::size_t>(n), -1.0f);
  ASSERT_TRUE(client->PullAndWait(got).ok());
  EXPECT_EQ(got, expected);
}

INSTANTIATE_TEST_SUITE_P(
    Endpoints, ClientExactness,
    ::testing::Values(Case{"inproc", 1, PlacementPolicy::kEvenSplit},
                      Case{"inproc", 3, PlacementPolicy::kGreedyBytes},
                      Case{"inproc", 4, PlacementPolicy::kPartitionLarge},
                      Case{"inproc", 7, PlacementPolicy::kRoundRobin},  // more shards than tensors
                      Case{"ipc", 2, PlacementPolicy::kEvenSplit},
                      Case{"ipc", 3, PlacementPolicy::kRoundRobin},
                      Case{"tcp", 2, PlacementPolicy::kEvenSplit},
                      Case{"tcp", 3, PlacementPolicy::kPartitionLarge}),
    CaseName);

TEST(Client, PushPullIsAtomicAndReturnsTheValuesAfterThePush) {
  const int64_t n = TestLayout().size();
  const std::vector<float> initial = Initial(n);
  TestServers ps("inproc", 3, PlacementPolicy::kGreedyBytes, initial);
  auto client = ps.Client();
  const std::vector<float> d = Delta(n, 0, 0);
  std::vector<float> out(static_cast<std::size_t>(n));
  RequestHandle h = client->PushPull(d, out);
  ASSERT_TRUE(h.Wait().ok());
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], initial[i] + d[i]) << i;
  for (const ShardResult& r : h.results()) {
    EXPECT_EQ(r.version, 1u);
    EXPECT_EQ(r.outcome, PushOutcome::kApplied);
  }
}

TEST(Client, ShardRequestsAddressPartOfOneShard) {
  const int64_t n = TestLayout().size();
  TestServers ps("inproc", 2, PlacementPolicy::kEvenSplit, Initial(n));
  auto client = ps.Client();
  const std::vector<float> ones(5, 1.0f);
  ASSERT_TRUE(client->PushShard(1, 3, ones).Wait().ok());
  std::vector<float> part(7);
  ASSERT_TRUE(client->PullShard(1, 2, part).Wait().ok());
  const std::vector<float> shard1 = ps.placement.Gather(1, Initial(n));
  for (std::size_t i = 0; i < part.size(); ++i) {
    const float added = (i >= 1 && i <= 5) ? 1.0f : 0.0f;
    EXPECT_EQ(part[i], shard1[i + 2] + added) << i;
  }
}

// Staleness = version at arrival - version the push was computed from
// (docs/architecture.md#staleness).
TEST(Client, PushesCarryPulledVersionsAndServersRecordStaleness) {
  const int64_t n = TestLayout().size();
  TestServers ps("inproc", 1, PlacementPolicy::kEvenSplit, Initial(n));
  auto a = ps.Client(0), b = ps.Client(1);
  std::vector<float> buf(static_cast<std::size_t>(n));
  const std::vector<float> d = Delta(n, 0, 0);
  ASSERT_TRUE(a->PullAndWait(buf).ok());  // a computes from version 0
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b->PushAndWait(d).ok());  // arrive at 0, 1, 2
  PushOptions po;
  po.clock = 41;
  ASSERT_TRUE(a->PushAndWait(d, po).ok());  // arrives at version 3
  const auto records = ps.sink.records();
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].staleness, 0);
  EXPECT_EQ(records[2].staleness, 2);  // b never pulled: computed from 0
  EXPECT_EQ(records[3].worker, 0u);
  EXPECT_EQ(records[3].step, 41);
  EXPECT_EQ(records[3].pulled_version, 0u);
  EXPECT_EQ(records[3].applied_version, 3u);
  EXPECT_EQ(records[3].staleness, 3);
  // Explicit versions override the pulled ones.
  const uint64_t v[1] = {4};
  po.versions = v;
  ASSERT_TRUE(a->PushAndWait(d, po).ok());
  EXPECT_EQ(ps.sink.records().back().staleness, 0);
}

// A windowed push names the versions its oldest gradients were computed on: they travel
// in the header's optional field, per shard, and the records hold both ends.
TEST(Client, WindowedPushCarriesItsOldestVersionsPerShard) {
  const int64_t n = TestLayout().size();
  TestServers ps("tcp", 2, PlacementPolicy::kEvenSplit, Initial(n));
  auto a = ps.Client(0), b = ps.Client(1);
  const std::vector<float> d = Delta(n, 0, 0);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(b->PushAndWait(d).ok());  // both shards at 5
  PushOptions po;
  po.clock = 8;
  const uint64_t newest[2] = {5, 4};
  const uint64_t oldest[2] = {2, 4};  // shard 1: no pull inside the window
  po.versions = newest;
  po.oldest_versions = oldest;
  ASSERT_TRUE(a->PushAndWait(d, po).ok());  // arrives at version 5 on both
  auto records = ps.sink.records();
  ASSERT_EQ(records.size(), 12u);
  for (std::size_t i = 10; i < 12; ++i) {
    const auto& r = records[i];
    SCOPED_TRACE(r.shard);
    EXPECT_EQ(r.worker, 0u);
    EXPECT_EQ(r.pulled_version, newest[r.shard]);
    EXPECT_EQ(r.oldest_version(), oldest[r.shard]);
    EXPECT_EQ(r.staleness, static_cast<int64_t>(5 - newest[r.shard]));
    EXPECT_EQ(r.oldest_staleness(), static_cast<int64_t>(5 - oldest[r.shard]));
  }
  // Without them, and with ones no older than the versions, the two ends are equal.
  const uint64_t later[2] = {7, 9};
  po.oldest_versions = later;
  ASSERT_TRUE(a->PushAndWait(d, po).ok());
  po.oldest_versions = {};
  ASSERT_TRUE(a->PushAndWait(d, po).ok());
  records = ps.sink.records();
  ASSERT_EQ(records.size(), 16u);
  for (std::size_t i = 12; i < 16; ++i) {
    EXPECT_EQ(records[i].oldest_lag, 0u) << i;
    EXPECT_EQ(records[i].oldest_version(), records[i].pulled_version) << i;
  }
}

TEST(Client, NonFinitePushIsARemoteErrorAndChangesNothing) {
  const int64_t n = TestLayout().size();
  const std::vector<float> initial = Initial(n);
  TestServers ps("inproc", 2, PlacementPolicy::kEvenSplit, initial);
  auto client = ps.Client();
  std::vector<float> d(static_cast<std::size_t>(n), 1.0f);
  d.back() = std::numeric_limits<float>::quiet_NaN();
  Status st = client->PushAndWait(d);
  EXPECT_EQ(st.code(), StatusCode::kRemoteError);
  EXPECT_EQ(st.error_code(), ErrorCode::kNonFinite);
  EXPECT_THAT(st.message(), HasSubstr("shard 1"));
  std::vector<float> got(static_cast<std::size_t>(n));
  ASSERT_TRUE(client->PullAndWait(got).ok());
  // Shard 0 applied its (finite) part; shard 1 refused and is unchanged.
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool on_shard0 = static_cast<int64_t>(i) < ps.placement.shard_size(0);
    EXPECT_EQ(got[i], initial[i] + (on_shard0 ? 1.0f : 0.0f)) << i;
  }
  EXPECT_EQ(ps.servers[1]->stats().errors_for(ErrorCode::kNonFinite), 1u);
}

// No server at the address: waiting is a timeout value, and dropping the handle returns
// the buffer to the caller promptly (the queued message is dropped by a reset).
TEST(Client, MissingServerIsATimeoutAndTheBufferComesBack) {
  testing::TempDir dir;
  auto context = NewContext();
  ParamLayout layout;
  layout.Add("w", {1000});
  Placement placement = Placement::Build(layout, 1);
  ClientOptions options;
  options.release_grace = 20ms;
  PsClient client(context, {"ipc://" + dir.File("nobody")}, placement, options);
  std::vector<float> values(1000, 1.0f);
  {
    RequestHandle h = client.Push(values);
    const auto t0 = std::chrono::steady_clock::now();
    Status st = h.Wait(150ms);
    EXPECT_TRUE(st.timed_out()) << st.ToString();
    EXPECT_THAT(st.message(), HasSubstr("nobody"));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    EXPECT_FALSE(h.done());
  }  // abandoned here: the destructor returns only once ZeroMQ let go of `values`
  EXPECT_EQ(client.stats().timeouts, 1u);
  EXPECT_GE(client.stats().resets, 1u);
  // The client still works for other requests.
  std::vector<float> out(1000);
  EXPECT_TRUE(client.Pull(out).Wait(50ms).timed_out());
}

TEST(Client, WaitForServersWaitsForLateServersAndChecksSizes) {
  const int64_t n = TestLayout().size();
  auto context = NewContext();
  Placement placement = Placement::Build(TestLayout(), 2);
  PsClient client(context, {"inproc://late-0", "inproc://late-1"}, placement);
  std::vector<std::unique_ptr<ShardServer>> servers;
  std::thread starter([&] {
    std::this_thread::sleep_for(100ms);
    const std::vector<float> init = Initial(n);
    servers = StartShardServers(context, placement, init, [](uint32_t) { return NewAddRule(); },
                                [](int s) { return "inproc://late-" + std::to_string(s); });
  });
  Status st = client.WaitForServers(10s);
  starter.join();
  EXPECT_TRUE(st.ok()) << st.ToString();

  // A client whose placement disagrees with the servers' sizes is told so.
  ParamLayout other;
  other.Add("w", {n + 2});
  PsClient wrong(context, Endpoints(servers), Placement::Build(other, 2));
  st = wrong.WaitForServers(5s);
  EXPECT_EQ(st.code(), StatusCode::kBadReply);
  EXPECT_THAT(st.message(), HasSubstr("placement"));
}

TEST(Client, BarrierHoldsEveryoneUntilTheLastArrives) {
  TestServers ps("tcp", 2, PlacementPolicy::kEvenSplit, Initial(TestLayout().size()));
  auto a = ps.Client(0), b = ps.Client(1), c = ps.Client(2);
  RequestHandle ha = a->Barrier(7, 3);
  RequestHandle hb = b->Barrier(7, 3);
  EXPECT_TRUE(ha.Wait(100ms).timed_out());
  RequestHandle hc = c->Barrier(7, 3);
  EXPECT_TRUE(hc.Wait().ok());
  EXPECT_TRUE(ha.Wait().ok());
  EXPECT_TRUE(hb.Wait().ok());
}

TEST(Client, HandleOutlivingItsClientReportsAborted) {
  TestServers ps("inproc", 1, PlacementPolicy::kEvenSplit, Initial(TestLayout().size()));
  RequestHandle h;
  {
    auto a = ps.Client(0);
    h = a->Barrier(1, 2);  // never completes: only one participant
  }
  Status st = h.Wait(10ms);
  EXPECT_EQ(st.code(), StatusCode::kAborted);
}

TEST(Client, StopServersStopsEveryShard) {
  TestServers ps("inproc", 3, PlacementPolicy::kEvenSplit, Initial(TestLayout().size()));
  auto client = ps.Client();
  ASSERT_TRUE(client->StopServers().Wait().ok());
  for (auto& s : ps.servers) {
    s->Join();
    EXPECT_FALSE(s->serving());
  }
}

// A rule that holds every push-pull's reply (as a synchronous round waiting for peers).
class HoldEverythingRule final : public ServerRule {
 public:
  std::string Name() const override { return "hold"; }
  PushOutcome OnPush(ShardContext& ctx, ServerCall& call) override {
    AddTo(ctx.mutable_values().subspan(static_cast<std::size_t>(call.payload().offset()),
                                       static_cast<std::size_t>(call.payload().count())),
          call.payload().pieces()[0].values);
    ctx.AdvanceVersion();
    call.Defer();
    return PushOutcome::kAccepted;
  }
};

// Close() lets a worker held in a round that can no longer complete go (kShuttingDown),
// refuses later updates, and still serves reads, so a run can end cleanly and read its
// final values through the same servers.
TEST(Client, CloseReleasesHeldRepliesAndRefusesUpdatesButServesReads) {
  ParamLayout layout;
  layout.Add("x", {8});
  const std::vector<float> initial(8, 1.0f);
  auto context = NewContext();
  ServerOptions options;
  options.endpoint = "tcp://127.0.0.1:*";
  ShardServer server(context, options, initial, std::make_unique<HoldEverythingRule>());
  server.Start();
  PlacementOptions po;
  const Placement placement = Placement::Build(layout, 1, po);
  ClientOptions co;
  co.timeout = 10s;
  PsClient client(context, {server.endpoint()}, placement, co);
  const std::vector<float> update(8, 2.0f);
  std::vector<float> out(8);
  RequestHandle held = client.PushPull(update, out);
  // The push is held once the rule applied it (version 1); on a loaded machine (or under
  // ThreadSanitizer) it may take longer than any fixed wait to arrive.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (server.stats().version < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(server.stats().version, 1u) << "the push did not arrive";
  EXPECT_TRUE(held.Wait(100ms).timed_out());
  EXPECT_FALSE(server.closed());
  server.Close();
  EXPECT_TRUE(server.closed());
  Status st = held.Wait();
  EXPECT_EQ(st.error_code(), ErrorCode::kShuttingDown) << st.ToString();
  st = client.PushAndWait(update);
  EXPECT_EQ(st.error_code(), ErrorCode::kShuttingDown) << st.ToString();
  ASSERT_TRUE(client.PullAndWait(out).ok());
  EXPECT_EQ(out, std::vector<float>(8, 3.0f));  // the held push was applied, the later not
  EXPECT_EQ(server.stats().version, 1u);
  EXPECT_TRUE(server.serving());
  server.Close();  // idempotent
  server.Shutdown();
}

TEST(Client, WrongSizedBuffersAreBugs) {
  TestServers ps("inproc", 1, PlacementPolicy::kEvenSplit, Initial(TestLayout().size()));
  auto client = ps.Client();
  std::vector<float> small(3);
  EXPECT_THROW(client->Push(small), InvariantError);
  EXPECT_THROW(client->Pull(small), InvariantError);
  EXPECT_THROW(client->PullShard(0, TestLayout().size() - 1, small), InvariantError);
}

}  // namespace
}  // namespace asgd::transport
