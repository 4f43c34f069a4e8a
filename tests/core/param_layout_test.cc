#include "core/param_layout.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "core/error.h"

namespace asgd {
namespace {

ParamLayout MlpLayout() {
  ParamLayout l;
  l.Add("fc1.weight", {784, 256});
  l.Add("fc1.bias", {256});
  l.Add("fc2.weight", {256, 10});
  l.Add("fc2.bias", {10});
  return l;
}

TEST(ParamLayout, PacksTensorsContiguouslyInOrder) {
  ParamLayout l = MlpLayout();
  ASSERT_EQ(l.tensors().size(), 4u);
  EXPECT_EQ(l.Get("fc1.weight").offset, 0);
  EXPECT_EQ(l.Get("fc1.bias").offset, 784 * 256);
  EXPECT_EQ(l.Get("fc2.weight").offset, 784 * 256 + 256);
  EXPECT_EQ(l.Get("fc2.bias").offset, 784 * 256 + 256 + 2560);
  EXPECT_EQ(l.size(), 784 * 256 + 256 + 2560 + 10);
  EXPECT_EQ(l.size_bytes(), l.size() * 4);
  EXPECT_EQ(l.Find("nope"), -1);
}

TEST(ParamLayout, ViewsAliasTheFlatBuffer) {
  ParamLayout l;
  l.Add("a", {2, 3});
  l.Add("b", {4});
  std::vector<float> flat(static_cast<std::size_t>(l.size()));
  std::iota(flat.begin(), flat.end(), 0.0f);
  auto b = l.View(std::span<float>(flat), 1);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], 6.0f);
  b[3] = -1.0f;
  EXPECT_EQ(flat[9], -1.0f);
}

TEST(ParamLayout, RejectsBadTensors) {
  ParamLayout l;
  l.Add("w", {3});
  EXPECT_THROW(l.Add("w", {1}), InvariantError);
  EXPECT_THROW(l.Add("z", {3, 0}), InvariantError);
  EXPECT_THROW(l.Get("missing"), InvariantError);
  std::vector<float> wrong(2);
  EXPECT_THROW(l.View(std::span<float>(wrong), 0), InvariantError);
}

TEST(ParamLayout, FingerprintDependsOnNamesShapesAndOrder) {
  EXPECT_EQ(MlpLayout().Fingerprint(), MlpLayout().Fingerprint());
  EXPECT_TRUE(MlpLayout() == MlpLayout());
  ParamLayout renamed;
  renamed.Add("fc1.w", {784, 256});
  renamed.Add("fc1.bias", {256});
  renamed.Add("fc2.weight", {256, 10});
  renamed.Add("fc2.bias", {10});
  EXPECT_NE(renamed.Fingerprint(), MlpLayout().Fingerprint());
  ParamLayout reshaped;
  reshaped.Add("fc1.weight", {256, 784});
  reshaped.Add("fc1.bias", {256});
  reshaped.Add("fc2.weight", {256, 10});
  reshaped.Add("fc2.bias", {10});
  EXPECT_NE(reshaped.Fingerprint(), MlpLayout().Fingerprint());
  EXPECT_FALSE(reshaped == MlpLayout());
}

TEST(ParamLayout, DescribeListsTensors) {
  EXPECT_EQ(MlpLayout().Describe(),
            "4 tensors, 203530 floats: fc1.weight[784x256]@0 fc1.bias[256]@200704 "
            "fc2.weight[256x10]@200960 fc2.bias[10]@203520");
}

}  // namespace
}  // namespace asgd
