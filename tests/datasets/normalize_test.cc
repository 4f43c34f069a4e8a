// Per-channel normalisation: the statistics, the transform, and the loader's use of them.
#include "datasets/normalize.h"

#include <cmath>

#include <gtest/gtest.h>

#include "core/error.h"
#include "datasets/loader.h"
#include "tests/datasets/data_test_util.h"
#include "tests/support/test_util.h"

namespace asgd::datasets {
namespace {

// Two channels of 1x2 pixels; example i's values are given row by row.
Dataset TwoChannels(const std::vector<std::vector<float>>& examples) {
  Dataset ds;
  ds.name = "tiny/train";
  ds.num_examples = static_cast<int64_t>(examples.size());
  ds.num_features = 4;
  ds.num_classes = 2;
  ds.example_shape = {2, 1, 2};
  for (const auto& e : examples) ds.dense.insert(ds.dense.end(), e.begin(), e.end());
  ds.labels.assign(examples.size(), 0);
  return ds;
}

std::string KeyOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.key();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

TEST(ChannelStats, MeanAndPopulationStdPerChannel) {
  // Channel 0: 0, 1, 0.5, 0.5 -> mean 0.5, variance (0.25 + 0.25) / 4 = 0.125.
  // Channel 1: 0.25 x 4 + ... -> 0.2, 0.4, 0.6, 0.8: mean 0.5, variance 0.05.
  Dataset ds = TwoChannels({{0.0f, 1.0f, 0.2f, 0.4f}, {0.5f, 0.5f, 0.6f, 0.8f}});
  ChannelStats s = ComputeChannelStats(ds);
  ASSERT_EQ(s.mean.size(), 2u);
  EXPECT_NEAR(s.mean[0], 0.5, 1e-12);
  EXPECT_NEAR(s.std[0], std::sqrt(0.125), 1e-12);
  EXPECT_NEAR(s.mean[1], 0.5, 1e-7);
  EXPECT_NEAR(s.std[1], std::sqrt(0.05), 1e-7);
}

TEST(NormalizeChannels, EachValueOfChannelCIsShiftedAndScaledByItsOwnStatistics) {
  Dataset ds = TwoChannels({{0.0f, 1.0f, 0.2f, 0.4f}, {0.5f, 0.5f, 0.6f, 0.8f}});
  NormalizeChannels(&ds, {{0.5, 0.25}, {0.5, 2.0}});
  const std::vector<float> expected = {-1.0f, 1.0f, -0.025f, 0.075f, 0.0f, 0.0f, 0.175f, 0.275f};
  for (std::size_t k = 0; k < expected.size(); ++k)
    EXPECT_NEAR(ds.dense[k], expected[k], 1e-6) << k;
  EXPECT_EQ(ds.channel_mean, (std::vector<double>{0.5, 0.25}));
  EXPECT_EQ(ds.channel_std, (std::vector<double>{0.5, 2.0}));
}

TEST(ApplyNormalization, TheTrainingStatisticsApplyToBothSplits) {
  TrainTest data;
  data.train = TwoChannels({{0.0f, 1.0f, 0.2f, 0.4f}, {0.5f, 0.5f, 0.6f, 0.8f}});
  data.test = TwoChannels({{0.5f, 0.0f, 0.5f, 1.0f}});
  data.test.name = "tiny/test";
  NormalizeOptions o;
  o.per_channel = true;
  ApplyNormalization(o, &data);
  // The training split has mean 0 and std 1 per channel now.
  ChannelStats after = ComputeChannelStats(data.train);
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(after.mean[c], 0.0, 1e-6);
    EXPECT_NEAR(after.std[c], 1.0, 1e-6);
  }
  // The test split with the training split's statistics, not its own.
  const double s0 = std::sqrt(0.125), s1 = std::sqrt(0.05);
  EXPECT_NEAR(data.test.dense[0], 0.0, 1e-6);
  EXPECT_NEAR(data.test.dense[1], -0.5 / s0, 1e-5);
  EXPECT_NEAR(data.test.dense[2], 0.0, 1e-5);
  EXPECT_NEAR(data.test.dense[3], 0.5 / s1, 1e-5);
  EXPECT_EQ(data.test.channel_mean, data.train.channel_mean);
  EXPECT_EQ(data.test.channel_std, data.train.channel_std);

  // Given statistics are used as they are.
  TrainTest given;
  given.train = TwoChannels({{0.0f, 1.0f, 0.2f, 0.4f}});
  given.test = TwoChannels({{1.0f, 1.0f, 1.0f, 1.0f}});
  o.mean = {1.0, 0.0};
  o.std = {0.5, 4.0};
  ApplyNormalization(o, &given);
  EXPECT_EQ(given.train.dense[1], 0.0f);
  EXPECT_EQ(given.train.dense[0], -2.0f);
  EXPECT_EQ(given.test.dense[3], 0.25f);

  // per_channel off: nothing changes.
  TrainTest off;
  off.train = TwoChannels({{0.0f, 1.0f, 0.2f, 0.4f}});
  ApplyNormalization(NormalizeOptions{}, &off);
  EXPECT_EQ(off.train.dense[1], 1.0f);
  EXPECT_TRUE(off.train.channel_mean.empty());
}

TEST(ApplyNormalization, BadOptionsNameTheKey) {
  auto data = [] {
    TrainTest d;
    d.train = TwoChannels({{0.0f, 1.0f, 0.2f, 0.4f}});
    d.test = TwoChannels({{0.0f, 1.0f, 0.2f, 0.4f}});
    return d;
  };
  NormalizeOptions o;
  o.per_channel = true;
  o.mean = {0.5};
  o.std = {0.5};
  EXPECT_EQ(KeyOf([&] {
              auto d = data();
              ApplyNormalization(o, &d);
            }),
            "data.mean");
  o.mean = {0.5, 0.5};
  EXPECT_EQ(KeyOf([&] {
              auto d = data();
              ApplyNormalization(o, &d);
            }),
            "data.std");
  o.std = {0.5, 0.0};
  EXPECT_EQ(KeyOf([&] {
              auto d = data();
              ApplyNormalization(o, &d);
            }),
            "data.std");
  o.std = {};
  EXPECT_EQ(KeyOf([&] {
              auto d = data();
              ApplyNormalization(o, &d);
            }),
            "data.std");
  // Lists without per_channel are refused, not ignored.
  o.per_channel = false;
  o.std = {0.5, 0.5};
  EXPECT_EQ(KeyOf([&] {
              auto d = data();
              ApplyNormalization(o, &d);
            }),
            "data.mean");
  // A constant channel has std 0.
  o = NormalizeOptions{};
  o.per_channel = true;
  EXPECT_EQ(KeyOf([&] {
              TrainTest d;
              d.train = TwoChannels({{0.3f, 0.3f, 0.2f, 0.4f}, {0.3f, 0.3f, 0.1f, 0.4f}});
              ApplyNormalization(o, &d);
            }),
            "data.std");
  // Not an image dataset (a9a-like: sparse; synthetic: a flat vector).
  DataOptions s;
  s.name = "synthetic";
  s.normalize.per_channel = true;
  EXPECT_EQ(KeyOf([&] { LoadDataset(s); }), "data.normalize");
}

TEST(LoadDataset, PerChannelNormalisationOfMnist) {
  asgd::testing::TempDir root;
  test::WriteFakeMnist(root.path(), false);
  DataOptions o;
  o.name = "mnist";
  o.search_dirs = {root.path()};
  o.verify = false;
  TrainTest raw = LoadDataset(o);
  o.normalize.per_channel = true;
  TrainTest d = LoadDataset(o);
  const ChannelStats s = ComputeChannelStats(raw.train);
  ASSERT_EQ(d.train.channel_mean.size(), 1u);
  EXPECT_EQ(d.train.channel_mean, s.mean);
  EXPECT_EQ(d.train.channel_std, s.std);
  for (std::size_t k : {std::size_t{0}, std::size_t{100}, std::size_t{783}}) {
    EXPECT_NEAR(d.test.dense[k], (raw.test.dense[k] - s.mean[0]) / s.std[0], 1e-5);
  }
  // The test split alone gets the same values (the training split is read for them).
  Dataset test_only = LoadSplit(o, Split::kTest);
  EXPECT_EQ(test_only.dense, d.test.dense);
  // Explicit statistics need no training split.
  o.normalize.mean = {0.25};
  o.normalize.std = {0.5};
  test_only = LoadSplit(o, Split::kTest);
  EXPECT_NEAR(test_only.dense[5], (raw.test.dense[5] - 0.25) / 0.5, 1e-6);
}

}  // namespace
}  // namespace asgd::datasets
