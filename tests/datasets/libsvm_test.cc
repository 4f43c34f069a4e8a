#include "datasets/libsvm.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "datasets/known_files.h"
#include "tests/datasets/data_test_util.h"
#include "tests/support/test_util.h"

namespace asgd::datasets {
namespace {

using asgd::testing::TempDir;
using asgd::testing::WriteTestFile;
using test::ExpectDataError;

LibsvmOptions A9aOptions(const std::string& file) {
  LibsvmOptions o;
  o.num_features = 123;
  o.check.sha256 = FindKnownFile("a9a", file)->content_sha256;
  return o;
}

std::pair<int64_t, int64_t> Balance(const Dataset& ds) {
  int64_t pos = 0, neg = 0;
  for (int32_t l : ds.labels) (l == 1 ? pos : neg)++;
  return {pos, neg};
}

TEST(LibsvmReal, A9aTrainAndTest) {
  ASGD_REQUIRE_DATA();
  const std::string dir = asgd::testing::DataDir() + "/a9a/";
  // How fast this loads is measured by benchmarks/data_bench.cc, not asserted here.
  Dataset train = ReadLibsvm("a9a/train", dir + "a9a", A9aOptions("a9a"));
  Dataset test = ReadLibsvm("a9a/test", dir + "a9a.t", A9aOptions("a9a.t"));
  CheckDataset(train);
  CheckDataset(test);

  EXPECT_TRUE(train.sparse);
  EXPECT_EQ(train.num_examples, 32561);
  EXPECT_EQ(test.num_examples, 16281);
  EXPECT_EQ(train.indices.size(), 451592u);
  EXPECT_EQ(test.indices.size(), 225731u);
  EXPECT_EQ(train.num_features, 123);
  EXPECT_EQ(test.num_features, 123);
  EXPECT_EQ(train.example_shape, (std::vector<int64_t>{123}));
  EXPECT_EQ(train.num_classes, 2);
  EXPECT_EQ(Balance(train), (std::pair<int64_t, int64_t>{7841, 24720}));
  EXPECT_EQ(Balance(test), (std::pair<int64_t, int64_t>{3846, 12435}));
  // First line: "-1 3:1 11:1 14:1 19:1 39:1 42:1 55:1 64:1 67:1 73:1 75:1 76:1 80:1 83:1"
  EXPECT_EQ(train.labels[0], 0);
  EXPECT_EQ(std::vector<int32_t>(train.indices.begin(), train.indices.begin() + train.indptr[1]),
            (std::vector<int32_t>{2, 10, 13, 18, 38, 41, 54, 63, 66, 72, 74, 75, 79, 82}));
  for (float v : train.values) ASSERT_EQ(v, 1.0f);
  int32_t max_test_index = 0;
  for (int32_t j : test.indices) max_test_index = std::max(max_test_index, j);
  EXPECT_EQ(max_test_index, 121);  // the test file never uses feature 123
}

// Writes `text` to a file and parses it; for the error cases.
class LibsvmFiles : public ::testing::Test {
 protected:
  Dataset Read(const std::string& text, LibsvmOptions o = Options()) {
    WriteTestFile(path_, text);
    return ReadLibsvm("t", path_, o);
  }
  static LibsvmOptions Options() {
    LibsvmOptions o;
    o.num_features = 10;
    return o;
  }
  // Expects a DataError naming the file and `line`, containing `what`.
  void ExpectBadLine(const std::string& text, long line, const std::string& what,
                     LibsvmOptions o = Options()) {
    WriteTestFile(path_, text);
    std::string msg = ExpectDataError([&] { ReadLibsvm("t", path_, o); },
                                      path_ + ":" + std::to_string(line) + ": ");
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
  TempDir dir_;
  std::string path_ = dir_.File("data.svm");
};

TEST_F(LibsvmFiles, ParsesLabelsIndicesAndValues) {
  Dataset ds = Read("+1 1:0.5 3:-2 10:1e-3\n-1\n0 2:4\r\n1 5:+7 # comment\n\n# only a comment\n");
  CheckDataset(ds);
  EXPECT_EQ(ds.num_examples, 4);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{1, 0, 0, 1}));
  EXPECT_EQ(ds.indptr, (std::vector<int64_t>{0, 3, 3, 4, 5}));
  EXPECT_EQ(ds.indices, (std::vector<int32_t>{0, 2, 9, 1, 4}));
  EXPECT_EQ(ds.values, (std::vector<float>{0.5f, -2.0f, 1e-3f, 4.0f, 7.0f}));
  EXPECT_EQ(ds.num_features, 10);
}

TEST_F(LibsvmFiles, GzipFilesAreRead) {
  test::WriteGzFile(path_ + ".gz", "1 2:1\n-1 3:1\n");
  Dataset ds = ReadLibsvm("t", path_ + ".gz", Options());
  EXPECT_EQ(ds.num_examples, 2);
  EXPECT_EQ(ds.indices, (std::vector<int32_t>{1, 2}));
}

TEST_F(LibsvmFiles, InfersTheDimensionWhenAskedTo) {
  LibsvmOptions o;
  o.num_features = 0;
  Dataset ds = Read("1 2:1 40:1\n-1 7:1\n", o);
  EXPECT_EQ(ds.num_features, 40);
  EXPECT_EQ(ds.example_shape, (std::vector<int64_t>{40}));
}

TEST_F(LibsvmFiles, MultiClassLabels) {
  LibsvmOptions o = Options();
  o.num_classes = 3;
  o.first_label = 1;
  Dataset ds = Read("1 1:1\n3 2:1\n2 3:1\n", o);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{0, 2, 1}));
  EXPECT_EQ(ds.num_classes, 3);
  ExpectBadLine("1 1:1\n4 1:1\n", 2, "label '4': expected an integer from 1 to 3", o);
  ExpectBadLine("0 1:1\n", 1, "label '0'", o);
}

TEST_F(LibsvmFiles, MaxExamplesKeepsThePrefixButChecksEverything) {
  LibsvmOptions o = Options();
  o.max_examples = 2;
  Dataset ds = Read("1 1:1\n-1 2:1\n1 3:1\n", o);
  CheckDataset(ds);
  EXPECT_EQ(ds.num_examples, 2);
  EXPECT_EQ(ds.indices, (std::vector<int32_t>{0, 1}));
  ExpectBadLine("1 1:1\n-1 2:1\n1 0:1\n", 3, "feature index 0", o);
}

TEST_F(LibsvmFiles, BadLinesNameTheLine) {
  ExpectBadLine("1 1:1\n2 1:1\n", 2, "label '2': expected -1, +1, 0 or 1");
  ExpectBadLine("1 1:1\nabc 1:1\n", 2, "label 'abc'");
  ExpectBadLine("1.5 1:1\n", 1, "label '1.5'");
  ExpectBadLine("1 1:1\n1 0:1\n", 2, "feature index 0 in '0:1': expected an index from 1");
  ExpectBadLine("1 -3:1\n", 1, "feature index -3");
  ExpectBadLine("1 1:1\n\n1 3:1 2:1\n", 3,
                "feature index 2 in '2:1' after index 3: expected "
                "strictly increasing indices");
  ExpectBadLine("1 3:1 3:1\n", 1, "after index 3");
  ExpectBadLine("1 11:1\n", 1, "feature index 11 in '11:1': expected at most 10");
  ExpectBadLine("1 1:1 2\n", 1, "expected <index>:<value>, found '2'");
  ExpectBadLine("1 x:1\n", 1, "feature index in 'x:1': expected an integer");
  ExpectBadLine("1 1:abc\n", 1, "value in '1:abc': expected a number");
  ExpectBadLine("1 1:\n", 1, "value in '1:': expected a number");
  ExpectBadLine("1 1:nan\n", 1, "value in '1:nan': expected a finite number");
  ExpectBadLine("1 1:inf\n", 1, "expected a finite number");
  ExpectBadLine("1 1:1e99\n", 1, "value in '1:1e99'");
}

// The last line may lack its '\n'. The line loop used to step its pointer past the end
// of the text there (undefined behaviour, though never read; see libsvm.cc).
TEST(LibsvmText, LastLineWithoutNewline) {
  LibsvmOptions o;
  o.num_features = 10;
  Dataset ds = ParseLibsvm("t", "mem.svm", "1 1:1\n-1 2:0.5", o);
  CheckDataset(ds);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(ds.indices, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ParseLibsvm("t", "mem.svm", "1 1:1\n# the end", o).num_examples, 1);
  EXPECT_EQ(ParseLibsvm("t", "mem.svm", "1 1:1\n  ", o).num_examples, 1);
  std::string msg = ExpectDataError([&] { ParseLibsvm("t", "mem.svm", "1 1:1\n1 0:1", o); },
                                    "mem.svm:2: ");
  EXPECT_NE(msg.find("feature index 0"), std::string::npos) << msg;
}

TEST_F(LibsvmFiles, EmptyFileIsAnError) {
  WriteTestFile(path_, "\n# nothing\n");
  std::string msg = ExpectDataError([&] { ReadLibsvm("t", path_, Options()); }, path_);
  EXPECT_NE(msg.find("no examples"), std::string::npos) << msg;
}

TEST_F(LibsvmFiles, ChecksumMismatchIsReportedBeforeParsing) {
  LibsvmOptions o = Options();
  o.check = {std::string(64, 'a'), "re-fetch with `asgd data fetch a9a`"};
  WriteTestFile(path_, "7 bad line\n");
  std::string msg = ExpectDataError([&] { ReadLibsvm("t", path_, o); }, path_);
  EXPECT_NE(msg.find("sha256 mismatch"), std::string::npos) << msg;
  o.check.sha256 = test::Sha256Of("1 1:1\n");
  EXPECT_NO_THROW(Read("1 1:1\n", o));
}

TEST_F(LibsvmFiles, InvalidOptionsAreConfigErrors) {
  LibsvmOptions o;
  o.num_features = -1;
  WriteTestFile(path_, "1 1:1\n");
  EXPECT_THROW(ReadLibsvm("t", path_, o), ConfigError);
  o.num_features = 5;
  o.num_classes = 1;
  EXPECT_THROW(ReadLibsvm("t", path_, o), ConfigError);
}

TEST_F(LibsvmFiles, MissingFileIsDataError) {
  ExpectDataError([&] { ReadLibsvm("t", dir_.File("nope"), Options()); }, dir_.File("nope"));
}

}  // namespace
}  // namespace asgd::datasets
