// Mini-batches: gathering examples into owned buffers, and iterating over a worker's
// shard epoch after epoch.
//
// Thread safety: a BatchBuffer and a BatchSampler are not thread-safe; give each worker
// its own. Many of them may read one Dataset concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned.h"
#include "datasets/augment.h"
#include "datasets/dataset.h"

namespace asgd::datasets {

// Owned storage for one batch. Gather copies the chosen examples (one memcpy per dense
// row; the CSR slices of sparse rows) and returns a view of the copy; the buffers are
// reused, so a steady stream of same-sized batches allocates nothing.
class BatchBuffer {
 public:
  // Copies examples `indices` of ds, in that order (repeats allowed), and returns a view
  // valid until the next Gather on this buffer or its destruction. A sparse view's
  // indptr starts at 0. REQUIRES: every index in [0, ds.num_examples) (checked).
  BatchView Gather(const Dataset& ds, std::span<const int64_t> indices);
  // The dense rows of the last Gather, for transforming them in place (augmentation).
  // REQUIRES: the last Gather was dense.
  float* mutable_x() { return x_.data(); }

 private:
  AlignedVector<float> x_;
  std::vector<int64_t> indptr_;
  std::vector<int32_t> indices_;
  std::vector<float> values_;
  std::vector<int32_t> labels_;
};

struct SamplerOptions {
  // Examples per batch. Default: 32. Must be >= 1.
  int64_t batch_size = 32;
  // What happens at the end of an epoch when fewer than batch_size examples are left:
  // false returns them as a smaller batch; true skips them (they are seen in later
  // epochs, which are shuffled differently). Default: false.
  bool drop_last = false;
  // false visits the shard in its given order every epoch. Default: true.
  bool shuffle = true;
  // Epoch e's order is the shard shuffled with DeriveSeed(seed, "sampler/epoch", e), so
  // it depends only on (shard, seed, e), and a run can resume at any epoch.
  // Default: 0. Give each worker its own, e.g. DeriveSeed(run_seed, "sampler", worker).
  uint64_t seed = 0;
  // Random crops and flips applied to every batch returned (datasets/augment.h); batch
  // b (counting from 0 over all epochs) draws from DeriveSeed(augment.seed,
  // "augment/batch", b). Default: none.
  AugmentOptions augment;
};

// Yields batches of a shard forever: each epoch visits every example of the shard once,
// in a freshly shuffled order, in batches of batch_size (see drop_last for the tail).
//
//   BatchSampler sampler(train, ShardIndices(train.num_examples, workers, w, seed), opts);
//   while (...) { BatchView b = sampler.Next(); ... }
//
// The sampler keeps a pointer to the dataset, which must outlive it.
class BatchSampler {
 public:
  // Throws ConfigError if the shard is empty, batch_size < 1, drop_last is set and
  // the shard is smaller than one batch, or the augmentation does not fit the dataset
  // (CheckAugmentOptions). REQUIRES: shard indices in
  // [0, ds.num_examples) (checked).
  BatchSampler(const Dataset& ds, std::vector<int64_t> shard, const SamplerOptions& options);

  // The next batch; valid until the next call. Never ends: after the last batch of an
  // epoch the next call starts the next epoch.
  BatchView Next();

  // Epochs whose last batch has been returned.
  int64_t epochs_completed() const { return epoch_; }
  // Examples returned so far, over all epochs.
  int64_t samples_drawn() const { return samples_drawn_; }
  // Batches returned so far.
  int64_t batches_drawn() const { return batches_drawn_; }
  // Batches per epoch: ceil(shard / batch_size), or floor with drop_last.
  int64_t batches_per_epoch() const;
  // Examples per epoch: the shard size, less the dropped tail with drop_last.
  int64_t samples_per_epoch() const;
  // epochs_completed plus the fraction of the current epoch done: the "epoch" column
  // of the convergence CSV.
  double epoch_progress() const;
  int64_t shard_size() const { return static_cast<int64_t>(shard_.size()); }
  const SamplerOptions& options() const { return options_; }

 private:
  void StartEpoch();

  const Dataset* ds_;
  std::vector<int64_t> shard_;
  SamplerOptions options_;
  std::vector<int64_t> order_;  // this epoch's visiting order
  int64_t position_ = 0;        // next index into order_
  int64_t epoch_ = 0;
  int64_t samples_drawn_ = 0;
  int64_t batches_drawn_ = 0;
  BatchBuffer buffer_;
  std::vector<float> fill_;     // augmentation: the padding's value per channel
  AlignedVector<float> image_;  // augmentation: one example before its transform
};

}  // namespace asgd::datasets
