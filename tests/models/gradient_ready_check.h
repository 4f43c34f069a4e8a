// Checks of Model::LossAndGradientReporting shared by the CPU, CUDA and TorchScript model
// tests: what a model reports while its backward pass runs, and that reporting changes
// nothing in the loss and gradient.
#pragma once

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/gradient_ready.h"
#include "core/param_layout.h"
#include "models/model.h"

namespace asgd::models::testing {

// Records each reported range and the gradient's values in it at the moment of the report.
class RecordingReady final : public GradientReady {
 public:
  explicit RecordingReady(std::span<const float> grad) : grad_(grad) {}

  void Ready(Range range) override {
    ranges.push_back(range);
    ASSERT_GE(range.begin, 0);
    ASSERT_LE(range.end(), static_cast<int64_t>(grad_.size()));
    const auto from = grad_.begin() + range.begin;
    snapshots.emplace_back(from, from + range.count);
  }

  std::vector<Range> ranges;                  // in the order reported
  std::vector<std::vector<float>> snapshots;  // the values when each was reported

 private:
  std::span<const float> grad_;
};

// Runs LossAndGradientReporting and LossAndGradient on the same inputs and expects: the
// same loss and gradient bits; reported ranges that are disjoint, cover the gradient and
// hold, when reported, the values the gradient ends with. Returns the ranges in the order
// they were reported.
inline std::vector<Range> ExpectReportsAgree(Model& model, std::span<const float> params,
                                             const datasets::BatchView& batch) {
  const std::size_t n = params.size();
  std::vector<float> plain(n), reported(n, 123.0f);
  const float plain_loss = model.LossAndGradient(params, batch, plain);
  RecordingReady ready(reported);
  const float reported_loss = model.LossAndGradientReporting(params, batch, reported, ready);
  EXPECT_EQ(std::memcmp(&plain_loss, &reported_loss, sizeof(float)), 0) << model.Describe();
  EXPECT_EQ(std::memcmp(plain.data(), reported.data(), n * sizeof(float)), 0) << model.Describe();

  std::vector<Range> sorted = ready.ranges;
  std::sort(sorted.begin(), sorted.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  int64_t next = 0;
  for (const Range& r : sorted) {
    EXPECT_EQ(r.begin, next) << model.Describe() << ": ranges must be disjoint and cover";
    EXPECT_GT(r.count, 0);
    next = r.end();
  }
  EXPECT_EQ(next, static_cast<int64_t>(n)) << model.Describe();
  for (std::size_t i = 0; i < ready.ranges.size(); ++i) {
    const Range r = ready.ranges[i];
    EXPECT_TRUE(std::equal(ready.snapshots[i].begin(), ready.snapshots[i].end(),
                           reported.begin() + r.begin))
        << model.Describe() << ": range [" << r.begin << ", " << r.end()
        << ") changed after it was reported";
  }
  return ready.ranges;
}

// The range of a layer's tensors "<layer>.weight" and "<layer>.bias", which are adjacent.
inline Range LayerRange(const ParamLayout& layout, const std::string& layer) {
  const TensorSpec& w = layout.Get(layer + ".weight");
  const TensorSpec& b = layout.Get(layer + ".bias");
  return {w.offset, b.offset + b.size - w.offset};
}

}  // namespace asgd::models::testing
