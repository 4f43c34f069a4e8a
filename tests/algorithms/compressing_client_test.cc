// CompressingClient: every push reaches the store compressed and is applied as its
// decoded form; with error feedback the store plus the residual is the initial vector
// plus every update; traffic is dense above the wrapper and encoded below it.
#include "ps/compressing_client.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/memory_store.h"
#include "core/error.h"
#include "core/rng.h"
#include "ps/server_rule.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {

using ps::CompressingClient;
using ps::ParamClient;
using ps::ParamClientWrapper;
using ps::PushPart;
using ps::Status;
using ps::TensorPieces;
using ps::Traffic;
namespace {

constexpr int kSize = 67;  // odd tails in the packed forms

std::shared_ptr<const compression::Compressor> Make(const std::string& name,
                                                    bool error_feedback = false) {
  compression::CompressionOptions o;
  o.name = name;
  o.ratio = 0.1;
  o.levels = 4;
  o.error_feedback = error_feedback;
  return compression::NewCompressor(o);
}

// Updates on a 2^-8 grid (see compression/error_feedback.h on exactness).
std::vector<float> GridUpdate(Rng& rng) {
  std::vector<float> x(kSize);
  for (float& v : x) {
    v = static_cast<float>(static_cast<int64_t>(rng.UniformInt(513)) - 256) / 256.0f;
  }
  return x;
}

// Below the compressor: decodes what reached the store, summing it in double (the
// identity's side) and in float in arrival order (what the add rule computes).
class Recorder final : public ParamClientWrapper {
 public:
  explicit Recorder(std::unique_ptr<ParamClient> target)
      : ParamClientWrapper(std::move(target)), sent(kSize, 0.0), applied(kSize, 0.0f) {}
  std::vector<double> sent;
  std::vector<float> applied;
  int encoded_pushes = 0;

 protected:
  Status DoPushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                       int64_t step) override {
    EXPECT_EQ(parts.size(), 1u);
    std::vector<float> d(kSize);
    EXPECT_EQ(compression::Decode(parts[0], d), "");
    for (int i = 0; i < kSize; ++i) {
      sent[i] += d[i];
      applied[i] += d[i];
    }
    ++encoded_pushes;
    return ParamClientWrapper::DoPushEncoded(parts, out, step);
  }
};

TEST(CompressingClient, SentPlusResidualIsEveryUpdateAndTheStoreAppliesWhatWasSent) {
  for (const std::string name : {"topk", "randk", "qsgd", "sign", "terngrad"}) {
    SCOPED_TRACE(name);
    MemoryStore store(std::vector<float>(kSize, 0.0f), ps::NewAddRule());
    auto recorder = std::make_unique<Recorder>(std::make_unique<MemoryClient>(&store, 0));
    Recorder* rec = recorder.get();
    CompressingClient client(std::move(recorder), Make(name, true), /*error_feedback=*/true,
                             /*seed=*/11);
    Rng data(3);
    std::vector<double> sum(kSize, 0.0);
    std::vector<float> out(kSize);
    constexpr int kPushes = 40;
    for (int t = 0; t < kPushes; ++t) {
      const std::vector<float> x = GridUpdate(data);
      for (int i = 0; i < kSize; ++i) sum[i] += x[i];
      // Both forms of push go through the compressor.
      ASSERT_TRUE((t % 2 == 0 ? client.Push(x, t) : client.PushPull(x, out, t)).ok());
    }
    EXPECT_EQ(rec->encoded_pushes, kPushes);
    EXPECT_EQ(store.version(), static_cast<uint64_t>(kPushes));
    EXPECT_EQ(store.values(), rec->applied);
    EXPECT_GT(client.ResidualNorm(), 0);
    const std::span<const double> residual = client.residual(0);
    for (int i = 0; i < kSize; ++i) {
      EXPECT_EQ(rec->sent[i] + residual[i], sum[i]) << "element " << i;
    }
    const Traffic& above = client.traffic();
    const Traffic& below = client.target()->traffic();
    EXPECT_EQ(above.bytes_pushed, kPushes * kSize * 4);
    EXPECT_EQ(above.dense_bytes_pushed, kPushes * kSize * 4);
    EXPECT_EQ(below.dense_bytes_pushed, kPushes * kSize * 4);
    EXPECT_LT(below.bytes_pushed, below.dense_bytes_pushed);
    EXPECT_EQ(client.wire_traffic().bytes_pushed, below.bytes_pushed);
  }
}

TEST(CompressingClient, WithoutErrorFeedbackEachPushIsItsOwnEncoding) {
  MemoryStore store(std::vector<float>(kSize, 0.0f), ps::NewAddRule());
  auto recorder = std::make_unique<Recorder>(std::make_unique<MemoryClient>(&store, 0));
  Recorder* rec = recorder.get();
  CompressingClient client(std::move(recorder), Make("topk"), false, 1);
  EXPECT_FALSE(client.error_feedback());
  std::vector<float> x(kSize, 0.0f);
  x[5] = 3;
  x[60] = -2;
  ASSERT_TRUE(client.Push(x, 0).ok());
  ASSERT_TRUE(client.Push(x, 1).ok());
  // k = round(0.1 * 67) = 7 keeps both non-zeros: topk is exact here, twice.
  EXPECT_EQ(rec->sent[5], 6);
  EXPECT_EQ(rec->sent[60], -4);
  EXPECT_EQ(client.ResidualNorm(), 0);
  EXPECT_EQ(store.values()[5], 6.0f);
}

// A diverged worker's NaN goes out dense: the store refuses it as it refuses any
// non-finite push (kNonFinite, naming the element), and neither the store nor the
// residual changes.
TEST(CompressingClient, NonFiniteUpdateIsRefusedAsADensePushAndLeavesTheResidual) {
  MemoryStore store(std::vector<float>(kSize, 0.0f), ps::NewAddRule());
  CompressingClient client(std::make_unique<MemoryClient>(&store, 0), Make("qsgd", true), true, 1);
  Rng data(3);
  ASSERT_TRUE(client.Push(GridUpdate(data), 0).ok());
  const std::vector<float> values = store.values();
  const double residual = client.ResidualNorm();
  std::vector<float> x = GridUpdate(data);
  x[9] = std::nanf("");
  const Status st = client.Push(x, 1);
  EXPECT_EQ(st.error_code(), ps::ErrorCode::kNonFinite) << st.ToString();
  EXPECT_NE(st.ToString().find("element 9"), std::string::npos) << st.ToString();
  EXPECT_EQ(store.values(), values);
  EXPECT_EQ(client.ResidualNorm(), residual);
  EXPECT_EQ(store.version(), 1u);
}

std::vector<TensorSpec> Tensors(std::initializer_list<int64_t> sizes) {
  std::vector<TensorSpec> tensors;
  int64_t at = 0;
  for (int64_t n : sizes) {
    tensors.push_back(TensorSpec{"t" + std::to_string(tensors.size()), {n}, at, n});
    at += n;
  }
  return tensors;
}

// A part's tensor pieces: each range cut where a tensor ends, consecutive pieces of one
// tensor joined, in the part's order.
TEST(TensorPieces, CutRangesAtTensorBoundsAndJoinATensorsConsecutivePieces) {
  const std::vector<TensorSpec> t = Tensors({10, 15, 5});  // [0, 10) [10, 25) [25, 30)
  using P = std::vector<int64_t>;
  EXPECT_EQ(TensorPieces(std::vector<Range>{{0, 30}}, t), (P{10, 15, 5}));
  EXPECT_EQ(TensorPieces(std::vector<Range>{{5, 10}}, t), (P{5, 5}));
  EXPECT_EQ(TensorPieces(std::vector<Range>{{12, 3}}, t), (P{3}));
  // Two ranges meeting inside tensor 1 join; tensor 2's piece follows.
  EXPECT_EQ(TensorPieces(std::vector<Range>{{20, 2}, {24, 3}}, t), (P{3, 2}));
  // Interleaved: tensor 0, tensor 1, tensor 0 again are three pieces.
  EXPECT_EQ(TensorPieces(std::vector<Range>{{0, 3}, {12, 2}, {5, 2}}, t), (P{3, 2, 2}));
  EXPECT_EQ(TensorPieces(std::vector<Range>{{29, 1}}, t), (P{1}));
  EXPECT_EQ(TensorPieces(std::vector<Range>{{0, 30}}, {}), P{});
  EXPECT_THROW(TensorPieces(std::vector<Range>{{25, 6}}, t), InvariantError);
}

// Below the compressor: a store split in two parts that cut tensor 1 (of [0, 20) [20, 47)
// [47, 67)), decoding each part.
class TwoParts final : public ParamClientWrapper {
 public:
  explicit TwoParts(std::unique_ptr<ParamClient> target) : ParamClientWrapper(std::move(target)) {}
  std::vector<PushPart> PushParts() const override {
    return {PushPart{{{0, 30}}, 30}, PushPart{{{30, 37}}, 37}};
  }
  std::vector<compression::Encoded> last;

 protected:
  Status DoPushEncoded(std::span<const compression::Encoded> parts, std::span<float> /*out*/,
                       int64_t /*step*/) override {
    last.assign(parts.begin(), parts.end());
    return Status::Ok();
  }
};

// With the model's tensors, each part is encoded in its tensor pieces: terngrad sends a
// scale per piece of each part (tensor 1 split between the parts has a piece in each),
// with and without error feedback.
TEST(CompressingClient, EncodesEachPartInItsTensorPieces) {
  const std::vector<TensorSpec> tensors = Tensors({20, 27, 20});
  for (const bool error_feedback : {false, true}) {
    MemoryStore store(std::vector<float>(kSize, 0.0f), ps::NewAddRule());
    auto parts = std::make_unique<TwoParts>(std::make_unique<MemoryClient>(&store, 0));
    TwoParts* below = parts.get();
    CompressingClient client(std::move(parts), Make("terngrad", error_feedback), error_feedback, 1,
                             tensors);
    EXPECT_EQ(std::vector<int64_t>(client.pieces(0).begin(), client.pieces(0).end()),
              (std::vector<int64_t>{20, 10}));
    EXPECT_EQ(std::vector<int64_t>(client.pieces(1).begin(), client.pieces(1).end()),
              (std::vector<int64_t>{17, 20}));
    // Piece magnitudes 1, 100, 100, 0.01: each piece's scale is its own.
    std::vector<float> x(kSize);
    for (int i = 0; i < kSize; ++i) {
      const float mag = i < 20 ? 1.0f : i < 47 ? 100.0f : 0.01f;
      x[i] = i % 2 ? mag : -mag;
    }
    ASSERT_TRUE(client.Push(x, 0).ok());
    ASSERT_EQ(below->last.size(), 2u);
    const std::vector<std::vector<float>> scales = {{1, 100}, {100, 0.01f}};
    for (std::size_t p = 0; p < 2; ++p) {
      const compression::Encoded& e = below->last[p];
      uint32_t m;
      std::memcpy(&m, e.frames[0].data(), 4);
      ASSERT_EQ(m, 2u);
      for (std::size_t j = 0; j < 2; ++j) {
        float scale;
        std::memcpy(&scale, e.frames[0].data() + 4 + 8 + 4 * j, 4);
        EXPECT_FLOAT_EQ(scale, scales[p][j]) << "part " << p << " piece " << j;
      }
    }
  }
}

// topk keeping every element is exact, so every strategy that takes compression must end
// bit for bit where it ends without (round-robin, so both runs see the same interleaving):
// the compressed path changes what travels, not what is applied.
TEST(CompressingClient, LosslessCompressionChangesNoStrategysResult) {
  const auto names = testing::StrategiesWhere(
      [](const Strategy& s) { return s.supports_compression && !s.synchronous; });
  ASSERT_FALSE(names.empty());
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    StrategyOptions so = testing::Options(0.05, 2);
    testing::Harness dense(name, 3, so), packed(name, 3, so);
    compression::CompressionOptions o;
    o.name = "topk";
    o.ratio = 1.0;
    packed.CompressPushes(o);
    dense.Run(8);
    packed.Run(8);
    EXPECT_EQ(packed.store->values(), dense.store->values());
    EXPECT_EQ(packed.store->version(), dense.store->version());
    EXPECT_GT(packed.store->version(), 0u);
    EXPECT_GT(packed.clients[0]->traffic().dense_bytes_pushed, 0);
  }
}

// Every strategy that takes compression, synchronous ones included (rounds aggregate the
// decoded pushes), trains through a lossy compressor with error feedback: the store takes
// every push and the objective falls.
TEST(CompressingClient, EveryCompressibleStrategyTrainsThroughSignWithErrorFeedback) {
  const auto names =
      testing::StrategiesWhere([](const Strategy& s) { return s.supports_compression; });
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    StrategyOptions so = testing::Options(0.05, 2);
    testing::Harness h(name, 2, so);
    compression::CompressionOptions o;
    o.name = "sign";
    o.error_feedback = true;
    h.CompressPushes(o);
    auto loss = [&h] {
      std::vector<float> g(testing::kDim);
      return h.q.Fn()(h.store->values(), g);
    };
    const float before = loss();
    h.RunThreads(40);
    EXPECT_EQ(h.store->stats().rejected, 0u);
    EXPECT_GT(h.store->version(), 0u);
    EXPECT_LT(loss(), before);
    EXPECT_LT(h.clients[0]->traffic().bytes_pushed, h.clients[0]->traffic().dense_bytes_pushed);
  }
}

}  // namespace
}  // namespace asgd::algorithms
