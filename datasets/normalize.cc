#include "datasets/normalize.h"

#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace asgd::datasets {
namespace {

std::string Shape(const Dataset& ds) {
  std::vector<std::string> dims;
  for (int64_t d : ds.example_shape) dims.push_back(std::to_string(d));
  return Join(dims, "x");
}

std::string List(const std::vector<double>& v) {
  std::vector<std::string> out;
  for (double x : v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", x);
    out.emplace_back(buf);
  }
  return Join(out, ",");
}

}  // namespace

bool IsImageDataset(const Dataset& ds) {
  return !ds.sparse && ds.example_shape.size() == 3 && ds.example_shape[0] >= 1 &&
         ds.example_shape[0] * ds.example_shape[1] * ds.example_shape[2] == ds.num_features;
}

ChannelStats ComputeChannelStats(const Dataset& ds) {
  ASGD_CHECK(IsImageDataset(ds), ds.name, " is not an image dataset");
  ASGD_CHECK(ds.num_examples > 0, ds.name, " has no examples");
  const int64_t channels = ds.example_shape[0];
  const int64_t plane = ds.example_shape[1] * ds.example_shape[2];
  const double count = static_cast<double>(ds.num_examples) * static_cast<double>(plane);
  ChannelStats stats;
  stats.mean.assign(static_cast<std::size_t>(channels), 0.0);
  stats.std.assign(static_cast<std::size_t>(channels), 0.0);
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0.0;
    for (int64_t i = 0; i < ds.num_examples; ++i) {
      const float* p = ds.Row(i) + c * plane;
      for (int64_t k = 0; k < plane; ++k) sum += p[k];
    }
    const double mean = sum / count;
    // The second pass subtracts the mean first: no cancellation as in E[x^2] - E[x]^2.
    double sq = 0.0;
    for (int64_t i = 0; i < ds.num_examples; ++i) {
      const float* p = ds.Row(i) + c * plane;
      for (int64_t k = 0; k < plane; ++k) {
        const double d = p[k] - mean;
        sq += d * d;
      }
    }
    stats.mean[static_cast<std::size_t>(c)] = mean;
    stats.std[static_cast<std::size_t>(c)] = std::sqrt(sq / count);
  }
  return stats;
}

void NormalizeChannels(Dataset* ds, const ChannelStats& stats) {
  ASGD_CHECK(IsImageDataset(*ds), ds->name, " is not an image dataset");
  ASGD_CHECK(ds->channel_mean.empty(), ds->name, " is already normalised");
  const int64_t channels = ds->example_shape[0];
  const int64_t plane = ds->example_shape[1] * ds->example_shape[2];
  ASGD_CHECK(static_cast<int64_t>(stats.mean.size()) == channels &&
                 static_cast<int64_t>(stats.std.size()) == channels,
             "one mean and one std per channel");
  for (int64_t c = 0; c < channels; ++c) {
    const double mean = stats.mean[static_cast<std::size_t>(c)];
    const double sd = stats.std[static_cast<std::size_t>(c)];
    ASGD_CHECK(sd > 0.0 && std::isfinite(sd) && std::isfinite(mean), "channel ", c, " std ", sd);
    // x * (1 / std) - mean / std: one multiply-add per value.
    const auto scale = static_cast<float>(1.0 / sd);
    const auto shift = static_cast<float>(-mean / sd);
    for (int64_t i = 0; i < ds->num_examples; ++i) {
      float* p = ds->dense.data() + i * ds->num_features + c * plane;
      for (int64_t k = 0; k < plane; ++k) p[k] = p[k] * scale + shift;
    }
  }
  ds->channel_mean = stats.mean;
  ds->channel_std = stats.std;
}

void ApplyNormalization(const NormalizeOptions& options, TrainTest* data) {
  if (!options.per_channel) {
    if (!options.mean.empty()) {
      throw ConfigError("data.mean", List(options.mean),
                        "empty unless data.normalize = per_channel");
    }
    if (!options.std.empty()) {
      throw ConfigError("data.std", List(options.std), "empty unless data.normalize = per_channel");
    }
    return;
  }
  const Dataset& train = data->train;
  if (!IsImageDataset(train)) {
    throw ConfigError("data.normalize", "per_channel",
                      "none for " + train.name +
                          ", which is not an image dataset (per_channel needs dense examples "
                          "shaped channels x height x width: mnist, fashion-mnist, cifar10)");
  }
  const auto channels = static_cast<std::size_t>(train.example_shape[0]);
  const std::string per_channel = std::to_string(channels) + " values, one per channel of " +
                                  train.name + " (examples " + Shape(train) + ")";
  ChannelStats stats;
  if (options.mean.empty() && options.std.empty()) {
    if (train.num_examples == 0) {
      throw ConfigError("data.mean", "",
                        per_channel + ": " + train.name + " has no examples to compute them from");
    }
    stats = ComputeChannelStats(train);
    for (std::size_t c = 0; c < channels; ++c) {
      if (!(stats.std[c] > 0.0)) {
        throw ConfigError("data.std", "",
                          per_channel + ": channel " + std::to_string(c) + " of " + train.name +
                              " is constant, so its computed std is 0; give data.mean and "
                              "data.std");
      }
    }
  } else {
    if (options.mean.size() != channels) {
      throw ConfigError("data.mean", List(options.mean), per_channel + " (with data.std)");
    }
    if (options.std.size() != channels) {
      throw ConfigError("data.std", List(options.std), per_channel + " (with data.mean)");
    }
    for (double sd : options.std) {
      if (!(sd > 0.0) || !std::isfinite(sd)) {
        throw ConfigError("data.std", List(options.std), per_channel + ", each > 0");
      }
    }
    for (double m : options.mean) {
      if (!std::isfinite(m))
        throw ConfigError("data.mean", List(options.mean), per_channel + ", finite");
    }
    stats.mean = options.mean;
    stats.std = options.std;
  }
  NormalizeChannels(&data->train, stats);
  NormalizeChannels(&data->test, stats);
}

}  // namespace asgd::datasets
