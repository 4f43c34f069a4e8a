#include "datasets/sampler.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/check.h"
#include "core/error.h"
#include "core/rng.h"

namespace asgd::datasets {

BatchView BatchBuffer::Gather(const Dataset& ds, std::span<const int64_t> indices) {
  const auto n = static_cast<int64_t>(indices.size());
  for (int64_t i : indices) {
    ASGD_CHECK(i >= 0 && i < ds.num_examples, "example ", i, " of ", ds.name, " with ",
               ds.num_examples, " examples");
  }
  BatchView b;
  b.size = n;
  b.num_features = ds.num_features;
  labels_.resize(indices.size());
  for (std::size_t r = 0; r < indices.size(); ++r) {
    labels_[r] = ds.labels[static_cast<std::size_t>(indices[r])];
  }
  b.labels = labels_.data();

  if (!ds.sparse) {
    const auto d = static_cast<std::size_t>(ds.num_features);
    // A non-null x marks the batch dense even when it has no rows.
    if (x_.capacity() == 0) x_.reserve(16);
    x_.resize(indices.size() * d);
    for (std::size_t r = 0; r < indices.size(); ++r) {
      std::memcpy(x_.data() + r * d, ds.Row(indices[r]), d * sizeof(float));
    }
    b.x = x_.data();
    return b;
  }

  indptr_.resize(indices.size() + 1);
  indptr_[0] = 0;
  for (std::size_t r = 0; r < indices.size(); ++r) {
    const auto i = static_cast<std::size_t>(indices[r]);
    indptr_[r + 1] = indptr_[r] + (ds.indptr[i + 1] - ds.indptr[i]);
  }
  const auto nnz = static_cast<std::size_t>(indptr_[indices.size()]);
  indices_.resize(nnz);
  values_.resize(nnz);
  for (std::size_t r = 0; r < indices.size(); ++r) {
    const auto i = static_cast<std::size_t>(indices[r]);
    const auto begin = static_cast<std::size_t>(ds.indptr[i]);
    const auto len = static_cast<std::size_t>(ds.indptr[i + 1]) - begin;
    const auto out = static_cast<std::size_t>(indptr_[r]);
    if (len == 0) continue;
    std::memcpy(indices_.data() + out, ds.indices.data() + begin, len * sizeof(int32_t));
    std::memcpy(values_.data() + out, ds.values.data() + begin, len * sizeof(float));
  }
  b.indptr = indptr_.data();
  b.indices = indices_.data();
  b.values = values_.data();
  return b;
}

BatchSampler::BatchSampler(const Dataset& ds, std::vector<int64_t> shard,
                           const SamplerOptions& options)
    : ds_(&ds), shard_(std::move(shard)), options_(options) {
  if (options_.batch_size < 1) {
    throw ConfigError("algorithm.batch_size", std::to_string(options_.batch_size),
                      "a positive number of examples");
  }
  if (shard_.empty()) {
    throw ConfigError("cannot sample from an empty shard of " + ds.name +
                      ": every worker needs at least one example");
  }
  if (options_.drop_last && options_.batch_size > shard_size()) {
    throw ConfigError("algorithm.batch_size", std::to_string(options_.batch_size),
                      "at most the shard's " + std::to_string(shard_size()) +
                          " examples when the last partial batch is dropped");
  }
  for (int64_t i : shard_) {
    ASGD_CHECK(i >= 0 && i < ds.num_examples, "shard index ", i, " of ", ds.name, " with ",
               ds.num_examples, " examples");
  }
  CheckAugmentOptions(options_.augment, ds);
  if (options_.augment.enabled()) {
    fill_ = FillValues(ds);
    image_.resize(static_cast<std::size_t>(ds.num_features));
  }
  StartEpoch();
}

void BatchSampler::StartEpoch() {
  position_ = 0;
  order_ = shard_;
  if (options_.shuffle) {
    Rng rng(DeriveSeed(options_.seed, "sampler/epoch", static_cast<uint64_t>(epoch_)));
    rng.Shuffle(std::span<int64_t>(order_));
  }
}

BatchView BatchSampler::Next() {
  const int64_t n = shard_size();
  const int64_t take = std::min(options_.batch_size, n - position_);
  BatchView b = buffer_.Gather(
      *ds_, std::span<const int64_t>(order_.data() + position_, static_cast<std::size_t>(take)));
  if (options_.augment.enabled()) {
    // Per batch, not per sampler: batch b's draws depend on b alone, so skipping batches
    // (a resumed run) lands on the same transforms.
    Rng rng(
        DeriveSeed(options_.augment.seed, "augment/batch", static_cast<uint64_t>(batches_drawn_)));
    const std::vector<int64_t>& shape = ds_->example_shape;
    const auto d = static_cast<std::size_t>(ds_->num_features);
    float* x = buffer_.mutable_x();
    for (int64_t r = 0; r < take; ++r) {
      float* row = x + static_cast<std::size_t>(r) * d;
      std::copy(row, row + d, image_.data());
      TransformImage(image_.data(), row, shape[0], shape[1], shape[2],
                     options_.augment.crop_padding, DrawTransform(rng, options_.augment), fill_);
    }
  }
  position_ += take;
  samples_drawn_ += take;
  ++batches_drawn_;
  const int64_t left = n - position_;
  // The batch was copied into buffer_, so reshuffling order_ now is safe.
  if (left == 0 || (options_.drop_last && left < options_.batch_size)) {
    ++epoch_;
    StartEpoch();
  }
  return b;
}

int64_t BatchSampler::batches_per_epoch() const {
  const int64_t n = shard_size();
  const int64_t bs = options_.batch_size;
  return options_.drop_last ? n / bs : (n + bs - 1) / bs;
}

int64_t BatchSampler::samples_per_epoch() const {
  return options_.drop_last ? batches_per_epoch() * options_.batch_size : shard_size();
}

double BatchSampler::epoch_progress() const {
  return static_cast<double>(epoch_) +
         static_cast<double>(position_) / static_cast<double>(samples_per_epoch());
}

}  // namespace asgd::datasets
