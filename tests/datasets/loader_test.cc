#include "datasets/loader.h"

#include <chrono>
#include <cstdio>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/file_util.h"
#include "datasets/known_files.h"
#include "tests/datasets/data_test_util.h"
#include "tests/support/test_util.h"

namespace asgd::datasets {
namespace {

using asgd::testing::TempDir;
using asgd::testing::WriteTestFile;
using test::ExpectDataError;

TEST(LoadDataset, KnownFileNamesAreVerified) {
  // Fake files under the real names: structurally valid, so only the checksum can fail.
  TempDir root;
  test::WriteFakeMnist(root.path(), true);
  DataOptions o;
  o.name = "mnist";
  o.search_dirs = {root.path()};
  std::string msg =
      ExpectDataError([&] { LoadDataset(o); }, root.path() + "/mnist/train-images-idx3-ubyte.gz");
  EXPECT_NE(msg.find("sha256 mismatch: expected " +
                     FindKnownFile("mnist", "train-images-idx3-ubyte")->content_sha256),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("re-fetch with `asgd data fetch mnist`, or set [data] verify = false"),
            std::string::npos)
      << msg;

  o.verify = false;
  TrainTest d = LoadDataset(o);
  EXPECT_EQ(d.train.name, "mnist/train");
  EXPECT_EQ(d.test.name, "mnist/test");
  EXPECT_EQ(d.train.num_examples, 6);
  EXPECT_EQ(d.test.num_examples, 3);
  EXPECT_EQ(d.test.labels, (std::vector<int32_t>{7, 2, 1}));
}

TEST(LoadDataset, PlainFilesAndSubsets) {
  TempDir root;
  test::WriteFakeMnist(root.path(), false);
  DataOptions o;
  o.search_dirs = {root.path()};
  o.verify = false;
  o.max_train = 4;
  o.max_test = 0;
  TrainTest d = LoadDataset(o);
  CheckDataset(d.train);
  CheckDataset(d.test);
  EXPECT_EQ(d.train.num_examples, 4);
  EXPECT_EQ(d.test.num_examples, 0);
  Dataset test = LoadSplit(o, Split::kTest);
  EXPECT_EQ(test.name, "mnist/test");
}

TEST(LoadDataset, Synthetic) {
  DataOptions o;
  o.name = "synthetic";
  o.synthetic.num_train = 100;
  o.synthetic.num_test = 50;
  o.synthetic.nonzeros_per_example = 4;
  o.max_train = 60;
  TrainTest d = LoadDataset(o);
  CheckDataset(d.train);
  EXPECT_EQ(d.train.num_examples, 60);
  EXPECT_EQ(d.test.num_examples, 50);
  EXPECT_TRUE(d.train.sparse);
  Dataset test = LoadSplit(o, Split::kTest);
  EXPECT_EQ(test.values, d.test.values);
}

TEST(LoadDataset, BadOptionsAreConfigErrorsNamingTheKey) {
  auto key_of = [](const DataOptions& o) {
    try {
      LoadDataset(o);
    } catch (const ConfigError& e) {
      return e.key();
    }
    return std::string("(no error)");
  };
  DataOptions o;
  o.name = "cifar";
  EXPECT_EQ(key_of(o), "data.dataset");
  o = DataOptions();
  o.max_train = -2;
  EXPECT_EQ(key_of(o), "data.train_limit");
  o = DataOptions();
  o.num_features = -5;
  EXPECT_EQ(key_of(o), "data.num_features");
  o = DataOptions();
  o.name = "synthetic";
  o.synthetic.num_classes = 0;
  EXPECT_EQ(key_of(o), "data.synthetic_classes");
}

TEST(LoadDataset, RealDataThroughTheLookup) {
  ASGD_REQUIRE_DATA();
  DataOptions o;
  o.search_dirs = {"/nonexistent-asgd-dir", asgd::testing::DataDir()};
  for (const std::string name : {"mnist", "fashion-mnist", "a9a"}) {
    o.name = name;
    auto start = std::chrono::steady_clock::now();
    TrainTest d = LoadDataset(o);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s train+test loaded and verified in %.3f s\n", name.c_str(), s);
    CheckDataset(d.train);
    CheckDataset(d.test);
    EXPECT_EQ(d.train.name, name + "/train");
    EXPECT_EQ(d.train.num_examples, name == "a9a" ? 32561 : 60000);
    EXPECT_EQ(d.test.num_examples, name == "a9a" ? 16281 : 10000);
  }
  o.name = "a9a";
  o.num_features = 130;
  EXPECT_EQ(LoadSplit(o, Split::kTest).num_features, 130);
  o.num_features = 100;
  std::string msg = ExpectDataError([&] { LoadSplit(o, Split::kTrain); }, "/a9a/a9a:");
  EXPECT_NE(msg.find("expected at most 100"), std::string::npos) << msg;
}

}  // namespace
}  // namespace asgd::datasets
