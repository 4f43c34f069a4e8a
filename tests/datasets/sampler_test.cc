#include "datasets/sampler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <gtest/gtest.h>

#include "core/error.h"
#include "datasets/partition.h"
#include "datasets/synthetic.h"

namespace asgd::datasets {
namespace {

// A dense dataset whose row i holds i * 10 + j in column j and label i % 3.
Dataset DenseCounting(int64_t n, int64_t d) {
  Dataset ds;
  ds.name = "counting";
  ds.num_examples = n;
  ds.num_features = d;
  ds.num_classes = 3;
  ds.example_shape = {d};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) ds.dense.push_back(static_cast<float>(i * 10 + j));
    ds.labels.push_back(static_cast<int32_t>(i % 3));
  }
  return ds;
}

// A sparse dataset: row i has i % 4 entries, at columns 0..(i%4 - 1), with value i.
Dataset SparseCounting(int64_t n) {
  Dataset ds;
  ds.name = "sparse";
  ds.num_examples = n;
  ds.num_features = 4;
  ds.num_classes = 2;
  ds.example_shape = {4};
  ds.sparse = true;
  ds.indptr.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    for (int32_t j = 0; j < i % 4; ++j) {
      ds.indices.push_back(j);
      ds.values.push_back(static_cast<float>(i));
    }
    ds.indptr.push_back(static_cast<int64_t>(ds.indices.size()));
    ds.labels.push_back(static_cast<int32_t>(i % 2));
  }
  return ds;
}

TEST(ContiguousBatch, DenseViewPointsIntoTheDataset) {
  Dataset ds = DenseCounting(10, 3);
  CheckDataset(ds);
  BatchView b = ContiguousBatch(ds, 4, 3);
  EXPECT_FALSE(b.sparse());
  EXPECT_EQ(b.size, 3);
  EXPECT_EQ(b.num_features, 3);
  EXPECT_EQ(b.x, ds.dense.data() + 12);
  EXPECT_EQ(b.x[0], 40.0f);
  EXPECT_EQ(b.x[8], 62.0f);
  EXPECT_EQ(b.labels[0], 1);
  EXPECT_EQ(ContiguousBatch(ds, 10, 0).size, 0);
  Dataset none = DenseCounting(0, 3);
  EXPECT_FALSE(ContiguousBatch(none, 0, 0).sparse());
  EXPECT_THROW(ContiguousBatch(ds, 8, 3), InvariantError);
  EXPECT_THROW(ContiguousBatch(ds, -1, 1), InvariantError);
}

TEST(ContiguousBatch, SparseViewKeepsAbsoluteOffsets) {
  Dataset ds = SparseCounting(10);
  CheckDataset(ds);
  BatchView b = ContiguousBatch(ds, 5, 3);  // rows 5, 6, 7 with 1, 2, 3 entries
  EXPECT_TRUE(b.sparse());
  EXPECT_EQ(b.size, 3);
  EXPECT_EQ(b.num_features, 4);
  EXPECT_EQ(b.indptr[0], ds.indptr[5]);
  EXPECT_NE(b.indptr[0], 0);
  EXPECT_EQ(b.indptr[3] - b.indptr[0], 6);
  EXPECT_EQ(b.indices[b.indptr[1]], 0);
  EXPECT_EQ(b.values[b.indptr[2] + 2], 7.0f);
  EXPECT_EQ(b.labels[0], 1);
}

TEST(Subset, DenseCopiesTheRowsLabelsAndShape) {
  Dataset ds = DenseCounting(10, 3);
  ds.channel_mean = {0.5};
  ds.channel_std = {0.25};
  const std::vector<int64_t> idx = {8, 1, 4};
  const Dataset sub = Subset(ds, idx);
  CheckDataset(sub);
  EXPECT_EQ(sub.name, "counting (3 of 10)");
  EXPECT_EQ(sub.num_examples, 3);
  EXPECT_EQ(sub.num_features, 3);
  EXPECT_EQ(sub.num_classes, 3);
  EXPECT_EQ(sub.example_shape, ds.example_shape);
  EXPECT_EQ(sub.channel_mean, ds.channel_mean);
  EXPECT_EQ(sub.channel_std, ds.channel_std);
  EXPECT_EQ(std::vector<float>(sub.dense.begin(), sub.dense.end()),
            (std::vector<float>{80, 81, 82, 10, 11, 12, 40, 41, 42}));
  EXPECT_EQ(sub.labels, (std::vector<int32_t>{2, 1, 1}));
  EXPECT_EQ(Subset(ds, {}).num_examples, 0);
  const std::vector<int64_t> outside = {3, 10};
  EXPECT_THROW(Subset(ds, outside), InvariantError);
}

TEST(Subset, SparseRebasesTheRows) {
  const Dataset ds = SparseCounting(10);
  const std::vector<int64_t> idx = {7, 0, 5};  // 3, 0 and 1 entries
  const Dataset sub = Subset(ds, idx);
  CheckDataset(sub);
  EXPECT_TRUE(sub.sparse);
  EXPECT_EQ(sub.indptr, (std::vector<int64_t>{0, 3, 3, 4}));
  EXPECT_EQ(sub.indices, (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(sub.values, (std::vector<float>{7, 7, 7, 5}));
  EXPECT_EQ(sub.labels, (std::vector<int32_t>{1, 0, 1}));
}

TEST(BatchBuffer, GatherDenseCopiesRowsInOrder) {
  Dataset ds = DenseCounting(10, 3);
  BatchBuffer buf;
  std::vector<int64_t> idx = {7, 2, 7};
  BatchView b = buf.Gather(ds, idx);
  EXPECT_FALSE(b.sparse());
  ASSERT_EQ(b.size, 3);
  EXPECT_NE(b.x, ds.Row(7));
  EXPECT_EQ(std::vector<float>(b.x, b.x + 9),
            (std::vector<float>{70, 71, 72, 20, 21, 22, 70, 71, 72}));
  EXPECT_EQ(std::vector<int32_t>(b.labels, b.labels + 3), (std::vector<int32_t>{1, 2, 1}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.x) % kBufferAlignment, 0u);
  BatchView empty = buf.Gather(ds, {});
  EXPECT_EQ(empty.size, 0);
  EXPECT_FALSE(empty.sparse());
  std::vector<int64_t> bad = {10};
  EXPECT_THROW(buf.Gather(ds, bad), InvariantError);
}

TEST(BatchBuffer, GatherSparseRebasesIndptr) {
  Dataset ds = SparseCounting(10);
  BatchBuffer buf;
  std::vector<int64_t> idx = {7, 4, 2};  // 3, 0 and 2 entries
  BatchView b = buf.Gather(ds, idx);
  EXPECT_TRUE(b.sparse());
  ASSERT_EQ(b.size, 3);
  EXPECT_EQ(std::vector<int64_t>(b.indptr, b.indptr + 4), (std::vector<int64_t>{0, 3, 3, 5}));
  EXPECT_EQ(std::vector<int32_t>(b.indices, b.indices + 5), (std::vector<int32_t>{0, 1, 2, 0, 1}));
  EXPECT_EQ(std::vector<float>(b.values, b.values + 5), (std::vector<float>{7, 7, 7, 2, 2}));
  EXPECT_EQ(std::vector<int32_t>(b.labels, b.labels + 3), (std::vector<int32_t>{1, 0, 0}));
}

// Row ids of a DenseCounting batch (x[0] of each row is 10 × id).
std::vector<int64_t> Ids(const BatchView& b) {
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < b.size; ++r)
    ids.push_back(static_cast<int64_t>(b.x[r * b.num_features]) / 10);
  return ids;
}

TEST(BatchSampler, EpochsVisitEveryShardExampleOnceWithSmallerTail) {
  Dataset ds = DenseCounting(20, 2);
  std::vector<int64_t> shard = {1, 3, 5, 7, 9, 11, 13};
  SamplerOptions o;
  o.batch_size = 3;
  o.seed = 9;
  BatchSampler s(ds, shard, o);
  EXPECT_EQ(s.batches_per_epoch(), 3);
  EXPECT_EQ(s.samples_per_epoch(), 7);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen;
    for (int b = 0; b < 3; ++b) {
      EXPECT_EQ(s.epochs_completed(), epoch);
      BatchView v = s.Next();
      EXPECT_EQ(v.size, b < 2 ? 3 : 1);
      for (int64_t id : Ids(v)) seen.push_back(id);
    }
    EXPECT_EQ(s.epochs_completed(), epoch + 1);
    EXPECT_DOUBLE_EQ(s.epoch_progress(), epoch + 1.0);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, shard);
  }
  EXPECT_EQ(s.samples_drawn(), 21);
  EXPECT_EQ(s.batches_drawn(), 9);
}

TEST(BatchSampler, DropLastSkipsTheTail) {
  Dataset ds = DenseCounting(20, 2);
  SamplerOptions o;
  o.batch_size = 3;
  o.drop_last = true;
  BatchSampler s(ds, AllIndices(7), o);
  EXPECT_EQ(s.batches_per_epoch(), 2);
  EXPECT_EQ(s.samples_per_epoch(), 6);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(s.Next().size, 3);
    EXPECT_EQ(s.epochs_completed(), (i + 1) / 2);
  }
  EXPECT_EQ(s.samples_drawn(), 18);
  o.batch_size = 8;
  EXPECT_THROW({ BatchSampler bad(ds, AllIndices(7), o); }, ConfigError);
}

TEST(BatchSampler, ReshufflesEachEpochDeterministically) {
  Dataset ds = DenseCounting(50, 1);
  SamplerOptions o;
  o.batch_size = 50;
  o.seed = 3;
  BatchSampler a(ds, AllIndices(50), o);
  BatchSampler b(ds, AllIndices(50), o);
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> ids = Ids(a.Next());
    EXPECT_EQ(ids, Ids(b.Next()));
    EXPECT_NE(ids, AllIndices(50));
    epochs.push_back(ids);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  o.seed = 4;
  BatchSampler c(ds, AllIndices(50), o);
  EXPECT_NE(Ids(c.Next()), epochs[0]);
  o.shuffle = false;
  BatchSampler d(ds, AllIndices(50), o);
  EXPECT_EQ(Ids(d.Next()), AllIndices(50));
  EXPECT_EQ(Ids(d.Next()), AllIndices(50));
}

TEST(BatchSampler, EpochProgressCountsFractions) {
  Dataset ds = DenseCounting(10, 1);
  SamplerOptions o;
  o.batch_size = 4;
  BatchSampler s(ds, AllIndices(10), o);
  EXPECT_DOUBLE_EQ(s.epoch_progress(), 0.0);
  s.Next();
  EXPECT_DOUBLE_EQ(s.epoch_progress(), 0.4);
  s.Next();
  s.Next();
  EXPECT_DOUBLE_EQ(s.epoch_progress(), 1.0);
  s.Next();
  EXPECT_DOUBLE_EQ(s.epoch_progress(), 1.4);
}

TEST(BatchSampler, SparseBatches) {
  Dataset ds = SparseCounting(30);
  SamplerOptions o;
  o.batch_size = 8;
  BatchSampler s(ds, AllIndices(30), o);
  int64_t entries = 0;
  for (int b = 0; b < 4; ++b) {
    BatchView v = s.Next();
    EXPECT_TRUE(v.sparse());
    EXPECT_EQ(v.indptr[0], 0);
    for (int64_t r = 0; r < v.size; ++r) {
      const int64_t len = v.indptr[r + 1] - v.indptr[r];
      if (len > 0) {
        const auto id = static_cast<int64_t>(v.values[v.indptr[r]]);
        EXPECT_EQ(len, id % 4);
        EXPECT_EQ(v.labels[r], id % 2);
      }
      entries += len;
    }
  }
  EXPECT_EQ(entries, static_cast<int64_t>(ds.indices.size()));
  EXPECT_EQ(s.epochs_completed(), 1);
}

TEST(BatchSampler, BadArguments) {
  Dataset ds = DenseCounting(5, 1);
  SamplerOptions o;
  EXPECT_THROW({ BatchSampler bad(ds, {}, o); }, ConfigError);
  o.batch_size = 0;
  EXPECT_THROW({ BatchSampler bad(ds, AllIndices(5), o); }, ConfigError);
  o.batch_size = 2;
  EXPECT_THROW({ BatchSampler bad(ds, std::vector<int64_t>{0, 5}, o); }, InvariantError);
}

TEST(BatchSampler, DenseMnistSizedBatchesAreFast) {
  SyntheticOptions so;
  so.num_train = 8192;
  so.num_test = 1;
  so.num_features = 784;
  so.num_classes = 10;
  Dataset ds = MakeSynthetic(so).train;
  SamplerOptions o;
  o.batch_size = 128;
  BatchSampler s(ds, AllIndices(ds.num_examples), o);
  double checksum = 0;
  auto start = std::chrono::steady_clock::now();
  const int kBatches = 2000;
  for (int i = 0; i < kBatches; ++i) checksum += s.Next().x[0];
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      kBatches;
  std::printf("dense 128x784 batch: %.1f us (checksum %g)\n", us, checksum);
  EXPECT_EQ(s.samples_drawn(), 128 * kBatches);
  EXPECT_EQ(s.epochs_completed(), 128 * kBatches / 8192);
}

}  // namespace
}  // namespace asgd::datasets
