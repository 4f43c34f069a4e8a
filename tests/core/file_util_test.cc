#include "core/file_util.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "tests/support/test_util.h"

namespace asgd {
namespace {

TEST(FileUtil, AtomicWriteReplacesAndLeavesNoTemporary) {
  testing::TempDir dir;
  std::string path = dir.File("out.txt");
  WriteFileAtomic(path, "first");
  EXPECT_EQ(ReadFile(path), "first");
  WriteFileAtomic(path, "second, longer");
  EXPECT_EQ(ReadFile(path), "second, longer");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST(FileUtil, AtomicWriteIntoMissingDirectoryThrowsAndWritesNothing) {
  testing::TempDir dir;
  EXPECT_THROW(WriteFileAtomic(dir.File("no/such/dir/f"), "x"), IoError);
  EXPECT_FALSE(FileExists(dir.File("no")));
}

TEST(FileUtil, ReadMissingFileIsDataErrorNamingIt) {
  try {
    ReadFile("/nonexistent/asgd/file");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/asgd/file"), std::string::npos);
  }
}

TEST(FileUtil, MakeDirsCreatesParents) {
  testing::TempDir dir;
  MakeDirs(dir.File("a/b/c"));
  EXPECT_TRUE(IsDirectory(dir.File("a/b/c")));
  MakeDirs(dir.File("a/b/c"));  // idempotent
}

}  // namespace
}  // namespace asgd
