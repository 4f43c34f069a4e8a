#include "datasets/synthetic.h"

#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "core/error.h"

namespace asgd::datasets {
namespace {

SyntheticOptions Small() {
  SyntheticOptions o;
  o.num_train = 500;
  o.num_test = 200;
  o.num_features = 16;
  o.num_classes = 3;
  o.seed = 42;
  return o;
}

bool SameData(const Dataset& a, const Dataset& b) {
  return a.labels == b.labels && a.dense == b.dense && a.indptr == b.indptr &&
         a.indices == b.indices && a.values == b.values;
}

// Accuracy of the nearest-class-mean classifier fitted on train, on test: high when the
// clusters are well separated, near chance when they are not.
double NearestMeanAccuracy(const TrainTest& d) {
  const int64_t f = d.train.num_features;
  const int k = d.train.num_classes;
  std::vector<double> mean(static_cast<std::size_t>(k * f), 0.0);
  std::vector<int64_t> count(static_cast<std::size_t>(k), 0);
  for (int64_t i = 0; i < d.train.num_examples; ++i) {
    int32_t y = d.train.labels[i];
    ++count[y];
    for (int64_t j = 0; j < f; ++j) mean[y * f + j] += d.train.Row(i)[j];
  }
  for (int c = 0; c < k; ++c) {
    for (int64_t j = 0; j < f; ++j) mean[c * f + j] /= std::max<int64_t>(1, count[c]);
  }
  int64_t correct = 0;
  for (int64_t i = 0; i < d.test.num_examples; ++i) {
    int best = 0;
    double best_dist = 1e300;
    for (int c = 0; c < k; ++c) {
      double dist = 0;
      for (int64_t j = 0; j < f; ++j) {
        double diff = d.test.Row(i)[j] - mean[c * f + j];
        dist += diff * diff;
      }
      if (dist < best_dist) best_dist = dist, best = c;
    }
    correct += best == d.test.labels[i];
  }
  return static_cast<double>(correct) / static_cast<double>(d.test.num_examples);
}

TEST(Synthetic, DenseShapesAndValidity) {
  TrainTest d = MakeSynthetic(Small());
  CheckDataset(d.train);
  CheckDataset(d.test);
  EXPECT_EQ(d.train.name, "synthetic/train");
  EXPECT_EQ(d.test.name, "synthetic/test");
  EXPECT_EQ(d.train.num_examples, 500);
  EXPECT_EQ(d.test.num_examples, 200);
  EXPECT_EQ(d.train.num_features, 16);
  EXPECT_EQ(d.train.num_classes, 3);
  EXPECT_FALSE(d.train.sparse);
  std::set<int32_t> classes(d.train.labels.begin(), d.train.labels.end());
  EXPECT_EQ(classes.size(), 3u);
}

TEST(Synthetic, SameSeedSameDataDifferentSeedDifferentData) {
  TrainTest a = MakeSynthetic(Small());
  TrainTest b = MakeSynthetic(Small());
  EXPECT_TRUE(SameData(a.train, b.train));
  EXPECT_TRUE(SameData(a.test, b.test));
  EXPECT_FALSE(SameData(a.train, a.test));
  SyntheticOptions o = Small();
  o.seed = 43;
  TrainTest c = MakeSynthetic(o);
  EXPECT_FALSE(SameData(a.train, c.train));
  EXPECT_FALSE(SameData(a.test, c.test));
}

TEST(Synthetic, TestSplitDoesNotDependOnTrainSize) {
  SyntheticOptions o = Small();
  o.num_train = 77;
  EXPECT_TRUE(SameData(MakeSynthetic(Small()).test, MakeSynthetic(o).test));
}

TEST(Synthetic, SeparationControlsDifficulty) {
  SyntheticOptions o = Small();
  o.num_classes = 2;
  o.separation = 6.0;
  EXPECT_GT(NearestMeanAccuracy(MakeSynthetic(o)), 0.97);
  o.separation = 0.0;
  EXPECT_LT(NearestMeanAccuracy(MakeSynthetic(o)), 0.65);
}

TEST(Synthetic, NoiseFreeExamplesSitOnTheirCentre) {
  SyntheticOptions o = Small();
  o.noise = 0.0;
  TrainTest d = MakeSynthetic(o);
  for (int64_t i = 1; i < d.train.num_examples; ++i) {
    if (d.train.labels[i] != d.train.labels[0]) continue;
    for (int64_t j = 0; j < o.num_features; ++j) ASSERT_EQ(d.train.Row(i)[j], d.train.Row(0)[j]);
  }
}

TEST(Synthetic, SparseVariantHasKDistinctSortedCoordinates) {
  SyntheticOptions o = Small();
  o.num_features = 1000;
  o.nonzeros_per_example = 7;
  TrainTest d = MakeSynthetic(o);
  CheckDataset(d.train);  // strictly increasing indices within each row
  CheckDataset(d.test);
  EXPECT_TRUE(d.train.sparse);
  EXPECT_TRUE(d.train.dense.empty());
  EXPECT_EQ(d.train.indices.size(), 500u * 7u);
  for (int64_t i = 0; i < d.train.num_examples; ++i) {
    EXPECT_EQ(d.train.indptr[i + 1] - d.train.indptr[i], 7);
  }
  std::set<int32_t> used(d.train.indices.begin(), d.train.indices.end());
  EXPECT_GT(used.size(), 900u);  // spread over the whole dimension
  TrainTest again = MakeSynthetic(o);
  EXPECT_TRUE(SameData(d.train, again.train));

  o.nonzeros_per_example = o.num_features;  // every coordinate
  TrainTest full = MakeSynthetic(o);
  CheckDataset(full.train);
  EXPECT_EQ(full.train.indices.size(), 500u * 1000u);
}

TEST(Synthetic, InvalidOptionsNameTheKey) {
  auto expect_key = [](SyntheticOptions o, const std::string& key) {
    try {
      MakeSynthetic(o);
      ADD_FAILURE() << "no error for " << key;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), key) << e.what();
    }
  };
  SyntheticOptions o = Small();
  o.num_features = 0;
  expect_key(o, "data.synthetic_features");
  o = Small();
  o.num_train = 0;
  expect_key(o, "data.synthetic_train");
  o = Small();
  o.num_classes = 1;
  expect_key(o, "data.synthetic_classes");
  o = Small();
  o.noise = std::nan("");
  expect_key(o, "data.synthetic_noise");
  o = Small();
  o.separation = -1;
  expect_key(o, "data.synthetic_separation");
  o = Small();
  o.nonzeros_per_example = 17;
  expect_key(o, "data.synthetic_nonzeros");
  o = Small();
  o.num_features = 1 << 30;
  o.num_train = 1 << 30;
  expect_key(o, "data.synthetic_train");
}

}  // namespace
}  // namespace asgd::datasets
