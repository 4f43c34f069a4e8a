#include "core/check.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace asgd {
namespace {

TEST(Check, PassingChecksDoNothing) {
  EXPECT_NO_THROW(ASGD_CHECK(1 + 1 == 2));
  EXPECT_NO_THROW(ASGD_CHECK_EQ(3, 3, "never shown"));
  EXPECT_NO_THROW(ASGD_CHECK_LT(1, 2));
}

TEST(Check, FailureNamesExpressionValuesAndMessage) {
  int size = 7;
  try {
    ASGD_CHECK_EQ(size, 8, "while packing ", "fc1");
    FAIL() << "expected a throw";
  } catch (const InvariantError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("size == 8"), std::string::npos) << what;
    EXPECT_NE(what.find("(7 vs 8)"), std::string::npos) << what;
    EXPECT_NE(what.find("while packing fc1"), std::string::npos) << what;
    EXPECT_NE(what.find("check_test.cc"), std::string::npos) << what;
  }
}

TEST(Check, EvaluatesOperandsOnce) {
  int calls = 0;
  auto next = [&calls] { return ++calls; };
  ASGD_CHECK_GE(next(), 1);
  EXPECT_EQ(calls, 1);
}

TEST(Errors, ConfigErrorIsOneLineNamingKeyValueExpectation) {
  ConfigError e("model.hidden", "12a\nx", "a comma-separated list of positive integers");
  std::string what = e.what();
  EXPECT_EQ(what,
            "config: model.hidden = '12a\\nx': expected a comma-separated list of positive "
            "integers");
  EXPECT_EQ(what.find('\n'), std::string::npos);
  EXPECT_EQ(e.key(), "model.hidden");
}

TEST(Errors, DataErrorNamesFileAndLine) {
  DataError e("a9a.t", "bad index '0:1': expected an integer >= 1", 17);
  EXPECT_STREQ(e.what(), "data: a9a.t:17: bad index '0:1': expected an integer >= 1");
  DataError whole("x.gz", "truncated");
  EXPECT_STREQ(whole.what(), "data: x.gz: truncated");
}

TEST(Errors, QuoteShortensLongValues) {
  std::string quoted = QuoteForMessage(std::string(200, 'a'), 10);
  EXPECT_EQ(quoted, "'aaaaaaaaaa...'");
}

}  // namespace
}  // namespace asgd
