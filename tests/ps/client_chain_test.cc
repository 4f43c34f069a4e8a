// A worker's client chain (ps/client_chain.h): every call reaches the store's client once,
// timed on the worker's clock after the before-call hook (which is not timed); with
// [compression] the pushes reach it as the worker's CompressingClient encodes them.
#include "ps/client_chain.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "compression/compressor.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/param_layout.h"
#include "core/rng.h"
#include "ps/compressing_client.h"
#include "ps/param_client.h"
#include "ps/status.h"

namespace asgd::ps {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kSize = 40;
constexpr Duration kCallTime = milliseconds(3);

// The store's client: answers every call at once, taking kCallTime on the clock, and keeps
// what reached it.
class FakeStoreClient final : public ParamClient {
 public:
  explicit FakeStoreClient(ManualClock* clock) : clock_(clock) {}
  int64_t size() const override { return kSize; }
  int64_t dropped_pushes() const override { return 0; }
  bool TakesEncodedPushes() const override { return true; }

  int calls = 0;
  int dense_pushes = 0;
  std::vector<std::vector<compression::Encoded>> encoded;  // one entry per compressed push

 protected:
  Status DoPull(std::span<float> out) override { return Answer(out); }
  Status DoPush(std::span<const float> /*update*/, int64_t /*step*/) override {
    ++dense_pushes;
    return Answer({});
  }
  Status DoPushPull(std::span<const float> /*update*/, std::span<float> out,
                    int64_t /*step*/) override {
    ++dense_pushes;
    return Answer(out);
  }
  Status DoSendClock(int64_t /*clock*/) override { return Answer({}); }
  Status DoPushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                       int64_t /*step*/) override {
    encoded.emplace_back(parts.begin(), parts.end());
    return Answer(out);
  }

 private:
  Status Answer(std::span<float> out) {
    ++calls;
    for (float& v : out) v = 1.0f;
    clock_->Advance(kCallTime);
    return Status::Ok();
  }
  ManualClock* clock_;
};

std::vector<float> Update(uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(kSize);
  for (float& v : x) v = static_cast<float>(rng.UniformInt(1000)) / 100.0f - 5.0f;
  return x;
}

TEST(ClientChain, TimesEveryCallAfterItsHookAndPassesItToTheStoreOnce) {
  ManualClock clock;
  FakeStoreClient store(&clock);
  Duration total{0};
  int hooks = 0;
  ClientChainOptions o;
  o.clock = &clock;
  o.total = &total;
  // The hook's time (the simulated worker's deferred compute) is not communication.
  o.before_call = [&] {
    ++hooks;
    clock.Advance(milliseconds(1000));
  };
  ClientChain chain = NewClientChain(&store, o);
  ASSERT_NE(chain.client, nullptr);
  EXPECT_EQ(chain.compressing, nullptr);  // compression.name = none

  std::vector<float> out(kSize), update = Update(1);
  const std::vector<int64_t> indices = {2, 7};
  const std::vector<float> values = {0.5f, -0.5f};
  ParamClient& c = *chain.client;
  EXPECT_TRUE(c.Pull(out).ok());
  EXPECT_TRUE(c.Push(update, 1).ok());
  EXPECT_TRUE(c.PushPull(update, out, 2).ok());
  EXPECT_TRUE(c.SendClock(2).ok());
  EXPECT_TRUE(c.PullSparse(indices, out).ok());
  EXPECT_TRUE(c.PushSparse(indices, values, 3).ok());
  EXPECT_EQ(store.calls, 6);
  EXPECT_EQ(hooks, 6);
  EXPECT_EQ(total, 6 * kCallTime);
  // Every layer counts what passed through it: here all of it reached the store.
  EXPECT_EQ(c.traffic().bytes_pushed, store.traffic().bytes_pushed);
  EXPECT_EQ(c.traffic().bytes_pulled, store.traffic().bytes_pulled);
  EXPECT_EQ(c.wire_traffic().bytes_pushed, store.traffic().bytes_pushed);
}

// With compression the chain's pushes reach the store as the CompressingClient a worker
// had before the chain: seeded DeriveSeed(seed, "compression", worker), in the model's
// tensor pieces; the timing layer sits above it.
TEST(ClientChain, CompressesPushesWithTheWorkersStreamAndTensorPieces) {
  compression::CompressionOptions co;
  co.name = "randk";
  co.ratio = 0.25;
  co.error_feedback = true;
  ParamLayout layout;
  layout.Add("w", {8, 4});
  layout.Add("b", {8});
  constexpr uint64_t kSeed = 11;
  constexpr int kWorker = 3;

  ManualClock clock;
  FakeStoreClient store(&clock);
  Duration total{0};
  ClientChainOptions o;
  o.compression = co;
  o.seed = kSeed;
  o.worker = kWorker;
  o.tensors = layout.tensors();
  o.clock = &clock;
  o.total = &total;
  ClientChain chain = NewClientChain(&store, o);
  ASSERT_NE(chain.compressing, nullptr);
  EXPECT_TRUE(chain.compressing->error_feedback());
  EXPECT_EQ(std::vector<int64_t>(chain.compressing->pieces(0).begin(),
                                 chain.compressing->pieces(0).end()),
            (std::vector<int64_t>{32, 8}));

  ManualClock by_hand_clock;
  FakeStoreClient by_hand_store(&by_hand_clock);
  CompressingClient by_hand(&by_hand_store, compression::NewCompressor(co), true,
                            DeriveSeed(kSeed, "compression", static_cast<uint64_t>(kWorker)),
                            layout.tensors());

  std::vector<float> out(kSize);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> update = Update(100 + static_cast<uint64_t>(step));
    ASSERT_TRUE(chain.client->PushPull(update, out, step).ok());
    ASSERT_TRUE(by_hand.PushPull(update, out, step).ok());
  }
  EXPECT_EQ(store.dense_pushes, 0);
  ASSERT_EQ(store.encoded.size(), 3u);
  ASSERT_EQ(by_hand_store.encoded.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(store.encoded[i].size(), 1u);
    EXPECT_EQ(store.encoded[i][0].frames, by_hand_store.encoded[i][0].frames) << "push " << i;
  }
  EXPECT_EQ(chain.compressing->ResidualNorm(), by_hand.ResidualNorm());
  EXPECT_GT(chain.compressing->ResidualNorm(), 0);
  EXPECT_EQ(total, 3 * kCallTime);
  // Above the compressing layer the pushes count dense; what reached the store, encoded.
  EXPECT_EQ(chain.client->traffic().bytes_pushed, 3 * kSize * 4);
  EXPECT_EQ(chain.client->wire_traffic().bytes_pushed, store.traffic().bytes_pushed);
  EXPECT_LT(chain.client->wire_traffic().bytes_pushed, chain.client->traffic().bytes_pushed);
}

TEST(ClientChain, NeedsAClockAndATotal) {
  ManualClock clock;
  FakeStoreClient store(&clock);
  Duration total{0};
  ClientChainOptions o;
  o.total = &total;
  EXPECT_THROW(NewClientChain(&store, o), InvariantError);
  o.clock = &clock;
  o.total = nullptr;
  EXPECT_THROW(NewClientChain(&store, o), InvariantError);
  o.total = &total;
  EXPECT_THROW(NewClientChain(nullptr, o), InvariantError);
}

}  // namespace
}  // namespace asgd::ps
