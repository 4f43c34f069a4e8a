#include "datasets/idx.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>

#include <gtest/gtest.h>

#include "core/error.h"
#include "datasets/known_files.h"
#include "tests/datasets/data_test_util.h"
#include "tests/support/test_util.h"

namespace asgd::datasets {
namespace {

using asgd::testing::TempDir;
using asgd::testing::WriteTestFile;
using test::BigEndian32;
using test::ExpectDataError;
using test::IdxImagesBytes;
using test::IdxLabelsBytes;
using test::WriteGzFile;

IdxLoadOptions KnownChecks(const std::string& dataset, const std::string& prefix) {
  IdxLoadOptions o;
  o.images_check.sha256 = FindKnownFile(dataset, prefix + "-images-idx3-ubyte")->content_sha256;
  o.labels_check.sha256 = FindKnownFile(dataset, prefix + "-labels-idx1-ubyte")->content_sha256;
  return o;
}

Dataset LoadReal(const std::string& dataset, const std::string& prefix, double* seconds) {
  const std::string dir = asgd::testing::DataDir() + "/" + dataset + "/";
  auto start = std::chrono::steady_clock::now();
  Dataset ds = LoadIdxDataset(dataset + "/" + prefix, dir + prefix + "-images-idx3-ubyte.gz",
                              dir + prefix + "-labels-idx1-ubyte.gz", KnownChecks(dataset, prefix));
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ds;
}

std::vector<int64_t> ClassCounts(const Dataset& ds) {
  std::vector<int64_t> counts(static_cast<std::size_t>(ds.num_classes), 0);
  for (int32_t l : ds.labels) ++counts[static_cast<std::size_t>(l)];
  return counts;
}

double RowSum(const Dataset& ds, int64_t i) {
  double s = 0;
  for (int64_t j = 0; j < ds.num_features; ++j) s += ds.Row(i)[j];
  return s;
}

TEST(IdxReal, MnistTrain) {
  ASGD_REQUIRE_DATA();
  double seconds = 0;
  Dataset ds = LoadReal("mnist", "train", &seconds);
  std::printf("mnist train loaded and verified in %.3f s\n", seconds);
  CheckDataset(ds);
  EXPECT_EQ(ds.name, "mnist/train");
  EXPECT_EQ(ds.num_examples, 60000);
  EXPECT_EQ(ds.num_features, 784);
  EXPECT_EQ(ds.num_classes, 10);
  EXPECT_EQ(ds.example_shape, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_FALSE(ds.sparse);
  EXPECT_EQ(std::vector<int32_t>(ds.labels.begin(), ds.labels.begin() + 10),
            (std::vector<int32_t>{5, 0, 4, 1, 9, 2, 1, 3, 1, 4}));
  EXPECT_EQ(ClassCounts(ds),
            (std::vector<int64_t>{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}));
  auto [lo, hi] = std::minmax_element(ds.dense.begin(), ds.dense.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  EXPECT_EQ(ds.Row(0)[14 * 28 + 14], 240.0f / 255.0f);
  EXPECT_NEAR(RowSum(ds, 0) * 255.0, 27525.0, 1e-2);
  EXPECT_NEAR(RowSum(ds, 59999) * 255.0, 20920.0, 1e-2);
}

TEST(IdxReal, MnistTest) {
  ASGD_REQUIRE_DATA();
  double seconds = 0;
  Dataset ds = LoadReal("mnist", "t10k", &seconds);
  CheckDataset(ds);
  EXPECT_EQ(ds.num_examples, 10000);
  EXPECT_EQ(std::vector<int32_t>(ds.labels.begin(), ds.labels.begin() + 5),
            (std::vector<int32_t>{7, 2, 1, 0, 4}));
  EXPECT_EQ(ClassCounts(ds),
            (std::vector<int64_t>{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}));
  EXPECT_NEAR(RowSum(ds, 0) * 255.0, 18454.0, 1e-2);
}

TEST(IdxReal, FashionMnist) {
  ASGD_REQUIRE_DATA();
  double seconds = 0;
  Dataset train = LoadReal("fashion-mnist", "train", &seconds);
  Dataset test = LoadReal("fashion-mnist", "t10k", &seconds);
  CheckDataset(train);
  CheckDataset(test);
  EXPECT_EQ(train.num_examples, 60000);
  EXPECT_EQ(test.num_examples, 10000);
  EXPECT_EQ(ClassCounts(train), std::vector<int64_t>(10, 6000));
  EXPECT_EQ(ClassCounts(test), std::vector<int64_t>(10, 1000));
  EXPECT_EQ(train.labels[0], 9);
  EXPECT_EQ(test.labels[0], 9);
  EXPECT_EQ(train.Row(0)[14 * 28 + 14], 217.0f / 255.0f);
  EXPECT_NEAR(RowSum(train, 0) * 255.0, 76247.0, 1e-2);
}

TEST(IdxReal, MaxExamplesKeepsThePrefix) {
  ASGD_REQUIRE_DATA();
  const std::string dir = asgd::testing::DataDir() + "/mnist/";
  IdxLoadOptions o = KnownChecks("mnist", "t10k");
  o.max_examples = 100;
  Dataset ds = LoadIdxDataset("mnist/test", dir + "t10k-images-idx3-ubyte.gz",
                              dir + "t10k-labels-idx1-ubyte.gz", o);
  CheckDataset(ds);
  EXPECT_EQ(ds.num_examples, 100);
  EXPECT_EQ(ds.dense.size(), 100u * 784u);
  EXPECT_EQ(ds.labels[0], 7);
}

// Small files written by the tests.
class IdxFiles : public ::testing::Test {
 protected:
  std::string Images(const std::string& bytes, bool gz = false) {
    std::string path = dir_.File(gz ? "images.gz" : "images");
    gz ? WriteGzFile(path, bytes) : WriteTestFile(path, bytes);
    return path;
  }
  std::string Labels(const std::string& bytes, bool gz = false) {
    std::string path = dir_.File(gz ? "labels.gz" : "labels");
    gz ? WriteGzFile(path, bytes) : WriteTestFile(path, bytes);
    return path;
  }
  TempDir dir_;
};

TEST_F(IdxFiles, PlainAndGzipReadTheSame) {
  const std::string images = IdxImagesBytes(3, 2, 4);
  const std::string labels = IdxLabelsBytes({1, 0, 9});
  Dataset plain = LoadIdxDataset("t", Images(images), Labels(labels));
  Dataset gz = LoadIdxDataset("t", Images(images, true), Labels(labels, true));
  CheckDataset(plain);
  EXPECT_EQ(plain.num_examples, 3);
  EXPECT_EQ(plain.num_features, 8);
  EXPECT_EQ(plain.example_shape, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(plain.labels, (std::vector<int32_t>{1, 0, 9}));
  for (int i = 0; i < 3; ++i) {
    for (int p = 0; p < 8; ++p) {
      EXPECT_EQ(plain.Row(i)[p], static_cast<float>((i * 31 + p * 7) % 256) / 255.0f);
    }
  }
  EXPECT_TRUE(std::equal(plain.dense.begin(), plain.dense.end(), gz.dense.begin(), gz.dense.end()));
  EXPECT_EQ(plain.labels, gz.labels);
}

TEST_F(IdxFiles, RawReadersReturnBytes) {
  IdxImages im = ReadIdxImages(Images(IdxImagesBytes(2, 3, 3), true));
  EXPECT_EQ(im.count, 2);
  EXPECT_EQ(im.rows, 3);
  EXPECT_EQ(im.cols, 3);
  ASSERT_EQ(im.pixels.size(), 18u);
  EXPECT_EQ(im.pixels[9 + 2], (31 + 2 * 7) % 256);
  EXPECT_EQ(ReadIdxLabels(Labels(IdxLabelsBytes({4, 2}))), (std::vector<uint8_t>{4, 2}));
}

TEST_F(IdxFiles, WrongMagicNamesBothMagics) {
  // A label file where the images should be.
  std::string path = Images(IdxLabelsBytes({1, 2}));
  std::string msg = ExpectDataError([&] { ReadIdxImages(path); }, path);
  EXPECT_NE(msg.find("expected IDX magic 2051"), std::string::npos) << msg;
  EXPECT_NE(msg.find("found 2049"), std::string::npos) << msg;

  std::string lpath = Labels(IdxImagesBytes(1, 2, 2), true);
  msg = ExpectDataError([&] { ReadIdxLabels(lpath); }, lpath);
  EXPECT_NE(msg.find("expected IDX magic 2049"), std::string::npos) << msg;
}

TEST_F(IdxFiles, DoublyCompressedFileIsRecognised) {
  std::string path = Images(test::GzipBytes(IdxImagesBytes(1, 2, 2)), true);
  std::string msg = ExpectDataError([&] { ReadIdxImages(path); }, path);
  EXPECT_NE(msg.find("compressed twice"), std::string::npos) << msg;
}

TEST_F(IdxFiles, TruncatedPayloadPlainAndGzip) {
  std::string bytes = IdxImagesBytes(4, 3, 3);
  bytes.resize(bytes.size() - 5);
  for (bool gz : {false, true}) {
    std::string path = Images(bytes, gz);
    std::string msg = ExpectDataError([&] { ReadIdxImages(path); }, path);
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("promises 36 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("has 31"), std::string::npos) << msg;
  }
  std::string labels = IdxLabelsBytes({1, 2, 3});
  labels.pop_back();
  std::string lpath = Labels(labels);
  ExpectDataError([&] { ReadIdxLabels(lpath); }, "truncated");
}

TEST_F(IdxFiles, TruncatedOrEmptyHeader) {
  std::string path = Images(IdxImagesBytes(1, 2, 2).substr(0, 10));
  std::string msg = ExpectDataError([&] { ReadIdxImages(path); }, path);
  EXPECT_NE(msg.find("ends inside the IDX header (10 of 16 bytes)"), std::string::npos) << msg;
  std::string empty = Images("");
  msg = ExpectDataError([&] { ReadIdxImages(empty); }, empty);
  EXPECT_NE(msg.find("is empty"), std::string::npos) << msg;
}

TEST_F(IdxFiles, TrailingBytesAreRejected) {
  for (bool gz : {false, true}) {
    std::string path = Images(IdxImagesBytes(2, 2, 2) + "x", gz);
    std::string msg = ExpectDataError([&] { ReadIdxImages(path); }, path);
    EXPECT_NE(msg.find("more data after the 8 bytes"), std::string::npos) << msg;
  }
  std::string lpath = Labels(IdxLabelsBytes({1, 2}) + std::string(100, '\0'));
  ExpectDataError([&] { ReadIdxLabels(lpath); }, "more data after");
}

TEST_F(IdxFiles, CountMismatchNamesBothFiles) {
  std::string images = Images(IdxImagesBytes(3, 2, 2));
  std::string labels = Labels(IdxLabelsBytes({1, 2}));
  std::string msg = ExpectDataError([&] { LoadIdxDataset("t", images, labels); }, labels);
  EXPECT_NE(msg.find("has 2 labels but " + images + " has 3 images"), std::string::npos) << msg;
}

TEST_F(IdxFiles, LabelOutOfRange) {
  std::string images = Images(IdxImagesBytes(3, 2, 2));
  std::string labels = Labels(IdxLabelsBytes({1, 2, 10}));
  std::string msg = ExpectDataError([&] { LoadIdxDataset("t", images, labels); }, labels);
  EXPECT_NE(msg.find("label 10 of example 2: expected a class below 10"), std::string::npos) << msg;
  IdxLoadOptions three;
  three.num_classes = 3;
  std::string labels2 = Labels(IdxLabelsBytes({1, 2, 3}));
  ExpectDataError([&] { LoadIdxDataset("t", images, labels2, three); }, "below 3");
}

TEST_F(IdxFiles, AbsurdHeaderSizesAreRejectedBeforeAllocating) {
  std::string huge = BigEndian32(2051) + BigEndian32(0xffffffffu) + BigEndian32(0xffffffffu) +
                     BigEndian32(0xffffffffu) + "abc";
  std::string path = Images(huge);
  std::string msg = ExpectDataError([&] { ReadIdxImages(path); }, path);
  EXPECT_NE(msg.find("more than the 2147483648-byte limit"), std::string::npos) << msg;

  std::string lpath = Labels(BigEndian32(2049) + BigEndian32(0xfffffff0u) + "abc");
  msg = ExpectDataError([&] { ReadIdxLabels(lpath); }, lpath);
  EXPECT_NE(msg.find("limit"), std::string::npos) << msg;

  // Under the limit but a lie: 1.9 GB promised, 3 bytes present. The buffer grows only
  // with data actually read, so this fails fast with "truncated".
  std::string lie =
      BigEndian32(2051) + BigEndian32(2400000) + BigEndian32(28) + BigEndian32(28) + "abc";
  std::string lie_path = Images(lie, true);
  msg = ExpectDataError([&] { ReadIdxImages(lie_path); }, lie_path);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

// Regression: ReadPayload reserved up to 256 MiB on the header's word before reading a
// byte of payload, so a 19-byte file claiming 1.9 GB got std::bad_alloc instead of
// DataError where address space is limited (ulimit -v 250000), and 16 MiB touched
// otherwise. The claim is now checked against what the content can hold first; the
// message still names the bytes the file has.
TEST_F(IdxFiles, ClaimBeyondTheContentIsRefusedBeforeAllocating) {
  const std::string lie =
      BigEndian32(2051) + BigEndian32(2400000) + BigEndian32(28) + BigEndian32(28) + "abc";
  const std::string expected =
      "truncated: the IDX header promises 1881600000 bytes of pixels (2400000 images of "
      "28x28), the file has 3";
  for (bool gz : {false, true}) {
    std::string path = Images(lie, gz);
    std::string msg = ExpectDataError([&] { ReadIdxImages(path); }, path);
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }
  ContentReader in("lie", std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(lie.data()),
                                                   lie.size()));
  std::string msg = ExpectDataError([&] { ReadIdxImages(in); }, "data: lie: ");
  EXPECT_NE(msg.find(expected), std::string::npos) << msg;

  const std::string labels = BigEndian32(2049) + BigEndian32(1000) + "abc";
  std::string lpath = Labels(labels);
  msg = ExpectDataError([&] { ReadIdxLabels(lpath); }, lpath);
  EXPECT_NE(msg.find("promises 1000 bytes of labels (1000 examples), the file has 3"),
            std::string::npos)
      << msg;
}

TEST(IdxMemory, ReadersTakeContentInMemory) {
  const std::string images = IdxImagesBytes(3, 2, 4);
  const std::string labels = IdxLabelsBytes({1, 0, 9});
  auto bytes = [](const std::string& s) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  ContentReader images_in("mem/images", bytes(images));
  ContentReader labels_in("mem/labels", bytes(labels));
  Dataset ds = LoadIdxDataset("t", images_in, labels_in);
  CheckDataset(ds);
  EXPECT_EQ(ds.num_examples, 3);
  EXPECT_EQ(ds.example_shape, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{1, 0, 9}));
  EXPECT_EQ(ds.Row(2)[5], static_cast<float>((2 * 31 + 5 * 7) % 256) / 255.0f);

  const std::string two_labels = IdxLabelsBytes({1, 0});  // outlives the reader
  ContentReader short_labels("mem/labels", bytes(two_labels));
  ContentReader images_again("mem/images", bytes(images));
  std::string msg = ExpectDataError(
      [&] { LoadIdxDataset("t", images_again, short_labels); }, "data: mem/labels: ");
  EXPECT_NE(msg.find("has 2 labels but mem/images has 3 images"), std::string::npos) << msg;
}

TEST_F(IdxFiles, ZeroDimensionIsRejected) {
  std::string path = Images(BigEndian32(2051) + BigEndian32(5) + BigEndian32(0) + BigEndian32(28));
  std::string msg = ExpectDataError([&] { ReadIdxImages(path); }, path);
  EXPECT_NE(msg.find("dimension 1 is 0"), std::string::npos) << msg;
}

TEST_F(IdxFiles, CorruptGzipStream) {
  std::string gz = test::GzipBytes(IdxImagesBytes(50, 10, 10));
  ASSERT_GT(gz.size(), 100u);
  std::string corrupt = gz;
  for (std::size_t i = 20; i < 60; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5a);
  std::string path = dir_.File("corrupt.gz");
  WriteTestFile(path, corrupt);
  std::string msg = ExpectDataError([&] { ReadIdxImages(path); }, path);
  EXPECT_NE(msg.find("gzip"), std::string::npos) << msg;

  std::string cut = dir_.File("cut.gz");
  WriteTestFile(cut, gz.substr(0, gz.size() / 2));
  msg = ExpectDataError([&] { ReadIdxImages(cut); }, cut);
  EXPECT_NE(msg.find("gzip stream is truncated"), std::string::npos) << msg;

  // A damaged CRC in the gzip trailer: every byte decompresses, the check fails.
  std::string bad_crc = gz;
  bad_crc[bad_crc.size() - 8] = static_cast<char>(bad_crc[bad_crc.size() - 8] ^ 1);
  std::string crc_path = dir_.File("crc.gz");
  WriteTestFile(crc_path, bad_crc);
  msg = ExpectDataError([&] { ReadIdxImages(crc_path); }, crc_path);
  EXPECT_NE(msg.find("corrupt gzip stream"), std::string::npos) << msg;
}

TEST_F(IdxFiles, ContentChecksumCoversDecompressedBytes) {
  const std::string bytes = IdxImagesBytes(2, 2, 2);
  ContentCheck good{test::Sha256Of(bytes), "hint"};
  EXPECT_NO_THROW(ReadIdxImages(Images(bytes), good));
  EXPECT_NO_THROW(ReadIdxImages(Images(bytes, true), good));

  ContentCheck bad{std::string(64, '0'), "re-fetch with `asgd data fetch mnist`"};
  std::string path = Images(bytes, true);
  std::string msg = ExpectDataError([&] { ReadIdxImages(path, bad); }, path);
  EXPECT_NE(msg.find("sha256 mismatch: expected " + std::string(64, '0') + ", found " +
                     test::Sha256Of(bytes)),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("re-fetch with `asgd data fetch mnist`"), std::string::npos) << msg;
}

}  // namespace
}  // namespace asgd::datasets
