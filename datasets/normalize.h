// Per-channel normalisation of image datasets: every value of channel c becomes
// (x - mean[c]) / std[c], the same in the training and the test split, with the means and
// standard deviations given, or computed from the training split.
//
// An image dataset is a dense one whose example_shape is {channels, height, width}
// (MNIST and Fashion-MNIST: 1 channel; CIFAR-10: 3), stored channel-major, so channel c
// of an example is features [c * height * width, (c + 1) * height * width).
#pragma once

#include <vector>

#include "datasets/dataset.h"

namespace asgd::datasets {

struct NormalizeOptions {
  // false: the pixels as loaded (in [0, 1]); true: per-channel normalisation.
  // Default: false.
  bool per_channel = false;
  // One mean and one standard deviation (> 0) per channel, in the units of the loaded
  // pixels ([0, 1]), e.g. 0.4914, 0.4822, 0.4465 for CIFAR-10's means. Both empty: each
  // channel's mean and population standard deviation over every pixel of the training
  // split as used (after data.train_limit). Default: empty.
  std::vector<double> mean;
  std::vector<double> std;
};

struct ChannelStats {
  std::vector<double> mean;
  std::vector<double> std;  // population standard deviation (divides by the count)
};

// True for a dense dataset with a {channels, height, width} example_shape.
bool IsImageDataset(const Dataset& ds);

// Each channel's mean and population standard deviation over all examples and pixels
// (two passes, accumulated in double). REQUIRES: IsImageDataset(ds) (checked), at least
// one example (checked).
ChannelStats ComputeChannelStats(const Dataset& ds);

// Normalises ds in place with `stats` and records them in ds->channel_mean/channel_std.
// REQUIRES: IsImageDataset(*ds), one positive std per channel, ds not yet normalised
// (all checked).
void NormalizeChannels(Dataset* ds, const ChannelStats& stats);

// Applies `options` to both splits: nothing when per_channel is false; else the given
// statistics, or those of data->train, to train and test alike. Throws ConfigError naming
// the key: data.normalize for a dataset that is not an image dataset, data.mean / data.std
// for a list of the wrong length, a std <= 0, only one of the two lists given, or a
// channel of the training split that is constant (its std would be 0), and for lists given
// while per_channel is false.
void ApplyNormalization(const NormalizeOptions& options, TrainTest* data);

}  // namespace asgd::datasets
