#include "datasets/augment.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"
#include "datasets/normalize.h"

namespace asgd::datasets {

void CheckAugmentOptions(const AugmentOptions& options, const Dataset& ds) {
  if (options.crop_padding < 0) {
    throw ConfigError("data.random_crop_padding", std::to_string(options.crop_padding),
                      "0 (no crop) or a number of pixels > 0");
  }
  if (!options.enabled()) return;
  const char* key = options.crop_padding > 0 ? "data.random_crop_padding" : "data.random_flip";
  const std::string value =
      options.crop_padding > 0 ? std::to_string(options.crop_padding) : "true";
  if (!IsImageDataset(ds)) {
    throw ConfigError(key, value,
                      std::string(options.crop_padding > 0 ? "0" : "false") + " for " + ds.name +
                          ", which is not an image dataset (augmentation needs dense examples "
                          "shaped channels x height x width: mnist, fashion-mnist, cifar10)");
  }
  const int64_t side = std::min(ds.example_shape[1], ds.example_shape[2]);
  if (options.crop_padding > side) {
    throw ConfigError("data.random_crop_padding", std::to_string(options.crop_padding),
                      "at most " + std::to_string(side) + " pixels for " + ds.name + "'s " +
                          std::to_string(ds.example_shape[1]) + "x" +
                          std::to_string(ds.example_shape[2]) + " images");
  }
}

std::vector<float> FillValues(const Dataset& ds) {
  ASGD_CHECK(IsImageDataset(ds), ds.name, " is not an image dataset");
  const auto channels = static_cast<std::size_t>(ds.example_shape[0]);
  std::vector<float> fill(channels, 0.0f);
  if (ds.channel_mean.size() == channels && ds.channel_std.size() == channels) {
    for (std::size_t c = 0; c < channels; ++c) {
      fill[c] = static_cast<float>(-ds.channel_mean[c] / ds.channel_std[c]);
    }
  }
  return fill;
}

ImageTransform DrawTransform(Rng& rng, const AugmentOptions& options) {
  ImageTransform t;
  if (options.crop_padding > 0) {
    const auto windows = static_cast<uint64_t>(2 * options.crop_padding + 1);
    t.offset_y = static_cast<int64_t>(rng.UniformInt(windows));
    t.offset_x = static_cast<int64_t>(rng.UniformInt(windows));
  }
  if (options.flip) t.flip = (rng.NextU64() >> 63) != 0;
  return t;
}

void TransformImage(const float* src, float* dst, int64_t channels, int64_t height, int64_t width,
                    int64_t padding, const ImageTransform& t, std::span<const float> fill) {
  // Output row y reads source row y + offset_y - P; output column x reads source column
  // sx(x) = x' + offset_x - P with x' = x, or W - 1 - x when flipped. Rows and columns
  // outside the source are the fill.
  const int64_t dy = t.offset_y - padding;
  const int64_t dx = t.offset_x - padding;
  // The output columns whose crop column x' lands inside the source: x' in
  // [max(0, -dx), min(W, W - dx)).
  const int64_t lo = std::max<int64_t>(0, -dx);
  const int64_t hi = std::min<int64_t>(width, width - dx);
  for (int64_t c = 0; c < channels; ++c) {
    const float f = fill[static_cast<std::size_t>(c)];
    const float* plane = src + c * height * width;
    float* out_plane = dst + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      float* out = out_plane + y * width;
      const int64_t sy = y + dy;
      if (sy < 0 || sy >= height || lo >= hi) {
        std::fill(out, out + width, f);
        continue;
      }
      const float* row = plane + sy * width;
      if (!t.flip) {
        std::fill(out, out + lo, f);
        std::copy(row + lo + dx, row + hi + dx, out + lo);
        std::fill(out + hi, out + width, f);
      } else {
        // out[x] = crop[W - 1 - x]: crop columns [lo, hi) land at [W - hi, W - lo), reversed.
        std::fill(out, out + (width - hi), f);
        std::reverse_copy(row + lo + dx, row + hi + dx, out + (width - hi));
        std::fill(out + (width - lo), out + width, f);
      }
    }
  }
}

}  // namespace asgd::datasets
