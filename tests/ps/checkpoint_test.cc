// Shard checkpoint files (ps/checkpoint.h): a saved shard comes back bit for bit,
// and a file that was truncated, altered, or is of another format is refused with a
// DataError naming the file, before any of its values are used.
#include "ps/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace asgd::ps {
namespace {

using ::testing::HasSubstr;

ShardSnapshot Sample() {
  ShardSnapshot s;
  s.shard = 3;
  s.version = 123456789012ULL;
  s.values = {1.5f, -2.25f, 0.0f, std::numeric_limits<float>::denorm_min(), 1e30f};
  s.rule_state = std::string("acc\0umulators", 13);
  return s;
}

std::string Refusal(const std::string& bytes) {
  try {
    (void)DecodeShardCheckpoint(bytes, "ckpt/shard-3.bin");
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(ShardCheckpoint, RoundTripsExactly) {
  const ShardSnapshot s = Sample();
  const ShardCheckpoint c = DecodeShardCheckpoint(EncodeShardCheckpoint(s, "dc_asgd"), "f");
  EXPECT_EQ(c.rule_name, "dc_asgd");
  EXPECT_EQ(c.snapshot.shard, s.shard);
  EXPECT_EQ(c.snapshot.version, s.version);
  EXPECT_EQ(c.snapshot.rule_state, s.rule_state);
  ASSERT_EQ(c.snapshot.values.size(), s.values.size());
  EXPECT_EQ(std::memcmp(c.snapshot.values.data(), s.values.data(), s.values.size() * 4), 0);
}

TEST(ShardCheckpoint, EmptyShardAndStateRoundTrip) {
  ShardSnapshot s;
  const ShardCheckpoint c = DecodeShardCheckpoint(EncodeShardCheckpoint(s, ""), "f");
  EXPECT_TRUE(c.snapshot.values.empty());
  EXPECT_TRUE(c.snapshot.rule_state.empty());
}

TEST(ShardCheckpoint, EveryTruncationIsRefused) {
  const std::string bytes = EncodeShardCheckpoint(Sample(), "add");
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string why = Refusal(bytes.substr(0, n));
    EXPECT_THAT(why, HasSubstr("ckpt/shard-3.bin")) << "prefix of " << n << " bytes";
  }
}

TEST(ShardCheckpoint, EveryFlippedByteIsRefused) {
  const std::string bytes = EncodeShardCheckpoint(Sample(), "add");
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    EXPECT_NE(Refusal(bad), "") << "byte " << i;
  }
}

TEST(ShardCheckpoint, NamesTheProblem) {
  EXPECT_THAT(Refusal("not a checkpoint at all, but long enough to hold a digest"),
              HasSubstr("not a shard checkpoint"));
  std::string bytes = EncodeShardCheckpoint(Sample(), "add");
  bytes[bytes.size() - 40] ^= 1;  // a value byte
  EXPECT_THAT(Refusal(bytes), HasSubstr("checksum mismatch"));
}

}  // namespace
}  // namespace asgd::ps
