// Data augmentation of training images: the standard random crop with zero padding and
// random horizontal flip (as used for CIFAR-10 since He et al. 2016: pad 4, crop 32x32,
// flip with probability 1/2).
//
// One example's transform, for an image of C channels, H rows and W columns and padding P:
//   padded(c, i, j) = x(c, i - P, j - P) inside the image, fill[c] outside
//                     (i in [0, H + 2P), j in [0, W + 2P));
//   crop(c, y, x)   = padded(c, y + offset_y, x + offset_x), offsets in [0, 2P];
//   out(c, y, x)    = crop(c, y, W - 1 - x) when flipped, else crop(c, y, x).
// Offsets are uniform over the (2P + 1)^2 windows and the flip a fair coin, independently
// per example. The fill is black: 0, or the value a 0 pixel takes after the dataset's
// per-channel normalisation, (0 - mean[c]) / std[c] (FillValues).
//
// Applied to training batches only, by the BatchSampler (datasets/sampler.h); evaluation
// reads the dataset as it is.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/rng.h"
#include "datasets/dataset.h"

namespace asgd::datasets {

struct AugmentOptions {
  // P: pixels of padding on each side before a random crop of the original size; 0 means
  // no crop. Default: 0. At most the image's height and width.
  int64_t crop_padding = 0;
  // Mirror each image left-right with probability 1/2. Default: false.
  bool flip = false;
  // Seed of the random draws; batch b's draws come from DeriveSeed(seed, "augment/batch", b),
  // so they depend only on (seed, b) and a resumed run that skips b batches continues the
  // sequence. Give each worker its own, e.g. DeriveSeed(run_seed, "augment", worker).
  // Default: 0.
  uint64_t seed = 0;

  bool enabled() const { return crop_padding > 0 || flip; }
};

// One example's draw.
struct ImageTransform {
  int64_t offset_y = 0;  // in [0, 2P]; P means no shift
  int64_t offset_x = 0;
  bool flip = false;
};

// Throws ConfigError naming the key (data.random_crop_padding, data.random_flip) if
// options are enabled and ds is not an image dataset (datasets/normalize.h), or the
// padding is negative or larger than the image's height or width.
void CheckAugmentOptions(const AugmentOptions& options, const Dataset& ds);

// The fill of the padding, one value per channel: -mean[c] / std[c] for a dataset
// normalised per channel, else 0. REQUIRES: an image dataset.
std::vector<float> FillValues(const Dataset& ds);

// Draws one example's transform: offset_y, offset_x (uniform in [0, 2P]), then the flip.
ImageTransform DrawTransform(Rng& rng, const AugmentOptions& options);

// Writes the transformed image of `src` into `dst` (both channels x height x width,
// channel-major; they must not overlap). fill has one value per channel.
void TransformImage(const float* src, float* dst, int64_t channels, int64_t height, int64_t width,
                    int64_t padding, const ImageTransform& t, std::span<const float> fill);

}  // namespace asgd::datasets
