#include "core/clock.h"

#include <gtest/gtest.h>

#include <regex>

namespace asgd {
namespace {

using std::chrono::milliseconds;

TEST(ManualClock, MovesOnlyWhenTold) {
  ManualClock clock;
  EXPECT_EQ(clock.Now(), Duration::zero());
  clock.Advance(milliseconds(5));
  EXPECT_EQ(clock.Now(), milliseconds(5));
  clock.SleepFor(milliseconds(10));  // a virtual sleep advances time
  EXPECT_EQ(clock.Now(), milliseconds(15));
  EXPECT_DOUBLE_EQ(clock.NowSeconds(), 0.015);
}

TEST(Stopwatch, MeasuresOnTheGivenClock) {
  ManualClock clock(milliseconds(100));
  Stopwatch sw(clock);
  clock.Advance(milliseconds(250));
  EXPECT_DOUBLE_EQ(sw.ElapsedSeconds(), 0.25);
  sw.Reset();
  EXPECT_EQ(sw.Elapsed(), Duration::zero());
}

TEST(SystemClock, IsMonotonic) {
  auto clock = NewSystemClock();
  Duration a = clock->Now();
  Duration b = clock->Now();
  EXPECT_LE(a, b);
}

TEST(WallTime, Formats) {
  EXPECT_TRUE(std::regex_match(WallTimeIso8601(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  EXPECT_TRUE(std::regex_match(WallTimeCompact(), std::regex(R"(\d{8}-\d{6})")));
}

}  // namespace
}  // namespace asgd
