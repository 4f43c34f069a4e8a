#include "core/strings.h"

#include <gtest/gtest.h>

namespace asgd {
namespace {

TEST(Strings, StrictNumberParsing) {
  EXPECT_EQ(ParseInt64(" 42 "), 42);
  EXPECT_EQ(ParseInt64("-3"), -3);
  EXPECT_EQ(ParseInt64("+3"), 3);
  EXPECT_FALSE(ParseInt64("4x"));
  EXPECT_FALSE(ParseInt64(""));
  EXPECT_FALSE(ParseInt64("1.5"));
  EXPECT_FALSE(ParseInt64("99999999999999999999"));
  EXPECT_FALSE(ParseUint64("-1"));
  EXPECT_EQ(ParseDouble("1e-3"), 1e-3);
  EXPECT_EQ(ParseDouble(" 0.5"), 0.5);
  EXPECT_FALSE(ParseDouble("nan"));
  EXPECT_FALSE(ParseDouble("inf"));
  EXPECT_FALSE(ParseDouble("0.5.1"));
}

TEST(Strings, Bools) {
  EXPECT_EQ(ParseBool("TRUE"), true);
  EXPECT_EQ(ParseBool("off"), false);
  EXPECT_EQ(ParseBool("1"), true);
  EXPECT_FALSE(ParseBool("maybe"));
}

TEST(Strings, SplitKeepsEmptyFieldsAndJoinInverts) {
  auto parts = Split("a,,b", ',');
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(Join(parts, ","), "a,,b");
  EXPECT_EQ(Split("", ',').size(), 1u);
}

TEST(Strings, ClosestMatchSuggestsTyposOnly) {
  std::vector<std::string> keys = {"learning_rate", "batch_size", "momentum"};
  EXPECT_EQ(ClosestMatch("learning_rte", keys), "learning_rate");
  EXPECT_EQ(ClosestMatch("momentun", keys), "momentum");
  EXPECT_EQ(ClosestMatch("zzz", keys), "");
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
}

TEST(Strings, FormatBytes) {
  EXPECT_EQ(FormatBytes(64), "64 B");
  EXPECT_EQ(FormatBytes(4096), "4 KiB");
  EXPECT_EQ(FormatBytes(1.5 * 1024 * 1024), "1.5 MiB");
}

}  // namespace
}  // namespace asgd
