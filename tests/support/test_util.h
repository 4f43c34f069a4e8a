// Helpers shared by the test suites.
#pragma once

#include <string>
#include <vector>

namespace asgd::testing {

// The directory holding the reference datasets ($ASGD_DATA_DIR, made absolute), or ""
// when it is unset or missing. Tests that need data call ASGD_REQUIRE_DATA().
std::string DataDir();

// A fresh empty directory under the system temp dir, removed with its contents by the
// destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes contents to path (throws on failure).
void WriteTestFile(const std::string& path, const std::string& contents);

// The workers a run test gives a strategy: 3 (an odd count), or 4 for dpsgd, which refuses
// rings of 2 and 3 (every step would be a complete average of the workers).
inline int RunTestWorkers(const std::string& strategy) { return strategy == "dpsgd" ? 4 : 3; }

// The first cells (`name`, in backticks) of the markdown table that follows `heading` in
// doc: how results/README.md documents a CSV's columns. Fails the test (and returns an
// empty list) when the heading is missing.
std::vector<std::string> MarkdownTableNames(const std::string& doc, const std::string& heading);

}  // namespace asgd::testing

// Skips the current test, saying why, when the reference data is not available.
#define ASGD_REQUIRE_DATA()                                                       \
  do {                                                                            \
    if (::asgd::testing::DataDir().empty()) {                                     \
      GTEST_SKIP() << "ASGD_DATA_DIR is not set or does not exist; set it to the " \
                      "folder holding mnist/, fashion-mnist/ and a9a/";            \
    }                                                                             \
  } while (0)
