#include "datasets/locate.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/file_util.h"
#include "tests/datasets/data_test_util.h"
#include "tests/support/test_util.h"

namespace asgd::datasets {
namespace {

using asgd::testing::TempDir;
using asgd::testing::WriteTestFile;
using test::ExpectDataError;

TEST(FindDatasetDir, FirstDirectoryHoldingEveryFileWins) {
  TempDir a, b, c;
  test::WriteFakeMnist(b.path(), true);
  test::WriteFakeMnist(c.path(), false);
  // a has an incomplete copy: it is passed over.
  MakeDirs(a.File("mnist"));
  WriteTestFile(a.File("mnist/train-images-idx3-ubyte.gz"), "x");
  EXPECT_EQ(FindDatasetDir("mnist", {"", a.path(), b.path(), c.path()}), b.path());
  EXPECT_EQ(FindDatasetDir("mnist", {c.path(), b.path()}), c.path());
}

TEST(FindDatasetDir, MissingEverywhereListsEveryPlaceSearched) {
  TempDir a, b;
  MakeDirs(b.File("mnist"));
  WriteTestFile(b.File("mnist/train-images-idx3-ubyte"), "x");
  WriteTestFile(b.File("mnist/train-labels-idx1-ubyte.gz"), "x");
  const std::string missing = a.File("nowhere");
  std::string msg = ExpectDataError(
      [&] {
        FindDatasetDir("mnist", {a.path(), missing, b.path()});
      },
      "mnist");
  EXPECT_NE(msg.find(a.path() + "/mnist (no such directory)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(missing + "/mnist (no such directory)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(b.path() + "/mnist (missing t10k-images-idx3-ubyte[.gz], "
                                "t10k-labels-idx1-ubyte[.gz])"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("`asgd data fetch mnist`"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ASGD_DATA_DIR"), std::string::npos) << msg;

  msg = ExpectDataError([&] { FindDatasetDir("a9a", {}); }, "a9a");
  EXPECT_NE(msg.find("no data directories"), std::string::npos) << msg;
}

TEST(FindDatasetDir, UnknownNameIsAConfigError) {
  try {
    FindDatasetDir("mnst", {"."});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'mnist'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(FindDatasetDir("synthetic", {"."}), ConfigError);
}

TEST(FindDataFile, PrefersGzipThenPlain) {
  TempDir d;
  EXPECT_EQ(FindDataFile(d.path(), "f"), "");
  WriteTestFile(d.File("f"), "");
  EXPECT_EQ(FindDataFile(d.path(), "f"), d.File("f"));
  WriteTestFile(d.File("f.gz"), "");
  EXPECT_EQ(FindDataFile(d.path(), "f"), d.File("f.gz"));
}

}  // namespace
}  // namespace asgd::datasets
