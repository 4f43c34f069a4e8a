#include <gtest/gtest.h>

#include "core/log.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  asgd::SetLogLevel(asgd::LogLevel::kWarning);
  return RUN_ALL_TESTS();
}
