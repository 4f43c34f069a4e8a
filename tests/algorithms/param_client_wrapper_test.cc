// ParamClientWrapper: every call reaches the wrapped client, each layer counts what passed
// through it, and a wrapper overriding one call changes only that call.
#include "ps/param_client_wrapper.h"

#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/memory_store.h"
#include "ps/server_rule.h"

namespace asgd::algorithms {

using ps::ParamClientWrapper;
using ps::Status;
namespace {

constexpr int kSize = 4;

std::unique_ptr<MemoryStore> AddStore() {
  return std::make_unique<MemoryStore>(std::vector<float>(kSize, 1.0f), ps::NewAddRule());
}

TEST(ParamClientWrapper, ForwardsEveryCallAndCountsAtEachLayer) {
  auto store = AddStore();
  MemoryClient direct(store.get(), 0);
  ParamClientWrapper outer(std::make_unique<ParamClientWrapper>(&direct));
  EXPECT_EQ(outer.size(), kSize);

  std::vector<float> out(kSize);
  ASSERT_TRUE(outer.Pull(out).ok());
  EXPECT_EQ(out, std::vector<float>(kSize, 1.0f));
  const std::vector<float> update = {1, 2, 3, 4};
  ASSERT_TRUE(outer.Push(update, 1).ok());
  ASSERT_TRUE(outer.PushPull(update, out, 2).ok());
  EXPECT_EQ(out, (std::vector<float>{3, 5, 7, 9}));
  EXPECT_EQ(store->version(), 2u);
  // The version the pull read reached the store through both layers: the push-pull was
  // computed from version 0 and arrived at version 1.
  EXPECT_EQ(store->stats().staleness_sum, 1);
  ASSERT_TRUE(outer.SendClock(3).ok());

  const int64_t bytes = kSize * sizeof(float);
  EXPECT_EQ(outer.traffic().bytes_pushed, 2 * bytes);
  EXPECT_EQ(outer.traffic().bytes_pulled, 2 * bytes);
  EXPECT_EQ(outer.target()->traffic().bytes_pushed, 2 * bytes);
  EXPECT_EQ(direct.traffic().bytes_pushed, 2 * bytes);
  EXPECT_EQ(direct.traffic().bytes_pulled, 2 * bytes);
}

TEST(ParamClientWrapper, SparseCallsStaySparseBelow) {
  auto store = AddStore();
  MemoryClient direct(store.get(), 0);
  ParamClientWrapper wrapper(&direct);
  const std::vector<int64_t> indices = {1, 3};
  const std::vector<float> values = {0.5f, -1.0f};
  ASSERT_TRUE(wrapper.PushSparse(indices, values, 1).ok());
  // The target was asked for a sparse push (12 bytes an entry), not the dense form the
  // base class would make of it (4 bytes a coordinate).
  EXPECT_EQ(direct.traffic().bytes_pushed, 2 * static_cast<int64_t>(sizeof(int64_t) + sizeof(float)));
  EXPECT_EQ(store->values(), (std::vector<float>{1.0f, 1.5f, 1.0f, 0.0f}));
  std::vector<float> out(kSize);
  ASSERT_TRUE(wrapper.PullSparse(indices, out).ok());
  EXPECT_EQ(out[1], 1.5f);
  EXPECT_EQ(out[3], 0.0f);
}

// A decorator in the shape the fault-injection, delay and compression layers take: it
// overrides one call and inherits the rest.
class DropEveryOtherPush final : public ParamClientWrapper {
 public:
  using ParamClientWrapper::ParamClientWrapper;

 protected:
  Status DoPush(std::span<const float> update, int64_t step) override {
    if (++pushes_ % 2 == 0) {
      return Status(ps::StatusCode::kRemoteError, "dropped by the test wrapper");
    }
    return ParamClientWrapper::DoPush(update, step);
  }

 private:
  int pushes_ = 0;
};

TEST(ParamClientWrapper, OverridingOneCallLeavesTheOthers) {
  auto store = AddStore();
  MemoryClient direct(store.get(), 0);
  DropEveryOtherPush faulty(&direct);
  const std::vector<float> update(kSize, 1.0f);
  EXPECT_TRUE(faulty.Push(update, 1).ok());
  EXPECT_FALSE(faulty.Push(update, 2).ok());
  EXPECT_TRUE(faulty.Push(update, 3).ok());
  EXPECT_EQ(store->version(), 2u);
  // Failed calls are not counted, at either layer.
  EXPECT_EQ(faulty.traffic().bytes_pushed, 2 * kSize * static_cast<int64_t>(sizeof(float)));
  EXPECT_EQ(direct.traffic().bytes_pushed, 2 * kSize * static_cast<int64_t>(sizeof(float)));
  std::vector<float> out(kSize);
  ASSERT_TRUE(faulty.Pull(out).ok());
  EXPECT_EQ(out, std::vector<float>(kSize, 3.0f));
}

}  // namespace
}  // namespace asgd::algorithms
