// The CIFAR-10 binary reader, its place in the loader and the known-file table, and MD5.
#include "datasets/cifar.h"

#include <cstdio>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/file_util.h"
#include "datasets/known_files.h"
#include "datasets/loader.h"
#include "datasets/locate.h"
#include "datasets/md5.h"
#include "tests/datasets/data_test_util.h"
#include "tests/support/test_util.h"

namespace asgd::datasets {
namespace {

using asgd::testing::TempDir;
using asgd::testing::WriteTestFile;
using test::CifarBytes;
using test::ExpectDataError;

CifarReadOptions Records(int64_t n) {
  CifarReadOptions o;
  o.records_per_file = n;
  return o;
}

TEST(ReadCifarFile, LabelsAndPixelsAsStored) {
  const std::string bytes = CifarBytes(4, 2);
  ContentReader in("mem", std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                   bytes.size()));
  CifarRecords r = ReadCifarFile(in, Records(4));
  ASSERT_EQ(r.labels.size(), 4u);
  ASSERT_EQ(r.pixels.size(), 4u * 3072);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r.labels[static_cast<std::size_t>(i)], (i * 3 + 2) % 10);
    for (int64_t p : {0, 1, 1023, 1024, 3071}) {
      EXPECT_EQ(r.pixels[static_cast<std::size_t>(i * 3072 + p)], (i * 31 + p * 7 + 26) % 256);
    }
  }
}

TEST(LoadCifarDataset, ChannelMajorImagesScaledLikeIdx) {
  TempDir dir;
  WriteTestFile(dir.File("a.bin"), CifarBytes(3, 1));
  test::WriteGzFile(dir.File("b.bin.gz"), CifarBytes(3, 2));
  CifarLoadOptions o;
  o.read = Records(3);
  Dataset ds = LoadCifarDataset("cifar10/train", {dir.File("a.bin"), dir.File("b.bin.gz")}, o);
  CheckDataset(ds);
  EXPECT_EQ(ds.name, "cifar10/train");
  EXPECT_EQ(ds.num_examples, 6);
  EXPECT_EQ(ds.num_features, 3072);
  EXPECT_EQ(ds.num_classes, 10);
  EXPECT_EQ(ds.example_shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_FALSE(ds.sparse);
  // Example e: file e / 3 (salt 1 or 2), record e % 3. Feature c * 1024 + y * 32 + x is
  // channel c's pixel (y, x): the stored order.
  for (int64_t e = 0; e < 6; ++e) {
    const int64_t salt = 1 + e / 3, i = e % 3;
    EXPECT_EQ(ds.labels[static_cast<std::size_t>(e)], (i * 3 + salt) % 10);
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t y : {0, 17, 31}) {
        for (int64_t x : {0, 5, 31}) {
          const int64_t p = c * 1024 + y * 32 + x;
          const auto v = static_cast<float>((i * 31 + p * 7 + salt * 13) % 256) / 255.0f;
          EXPECT_EQ(ds.Row(e)[p], v) << e << " " << c << " " << y << " " << x;
        }
      }
    }
  }
  // max_examples cuts across files; the files are still read in full.
  o.max_examples = 4;
  Dataset cut = LoadCifarDataset("c", {dir.File("a.bin"), dir.File("b.bin.gz")}, o);
  EXPECT_EQ(cut.num_examples, 4);
  EXPECT_EQ(cut.labels.size(), 4u);
  EXPECT_EQ(cut.dense.size(), 4u * 3072);
  EXPECT_EQ(cut.Row(3)[100], ds.Row(3)[100]);
}

TEST(ReadCifarFile, ASizeThatIsNotWholeRecordsNamesFileAndExpectation) {
  TempDir dir;
  const std::string path = dir.File("data_batch_1.bin");
  WriteTestFile(path, CifarBytes(4, 0) + "x");
  std::string msg = ExpectDataError([&] { ReadCifarFile(path, Records(4)); }, path);
  EXPECT_NE(msg.find("12293 bytes are not a whole number of 3073-byte CIFAR records"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("expected 4 records (12292 bytes)"), std::string::npos) << msg;
  // The published count by default.
  WriteTestFile(path, "short");
  msg = ExpectDataError([&] { ReadCifarFile(path); }, path);
  EXPECT_NE(msg.find("expected 10000 records (30730000 bytes)"), std::string::npos) << msg;
}

TEST(ReadCifarFile, TheWrongNumberOfRecordsNamesFileAndExpectation) {
  TempDir dir;
  const std::string path = dir.File("test_batch.bin");
  WriteTestFile(path, CifarBytes(3, 0));
  std::string msg = ExpectDataError([&] { ReadCifarFile(path, Records(4)); }, path);
  EXPECT_NE(
      msg.find("holds 3 records (9219 bytes) of CIFAR data: expected 4 records (12292 bytes)"),
      std::string::npos)
      << msg;
  // Too many: the reader stops holding bytes after one record more, but names the size.
  WriteTestFile(path, CifarBytes(7, 0));
  msg = ExpectDataError([&] { ReadCifarFile(path, Records(4)); }, path);
  EXPECT_NE(msg.find("holds 7 records (21511 bytes)"), std::string::npos) << msg;
  WriteTestFile(path, CifarBytes(2, 0));
  msg = ExpectDataError([&] { ReadCifarFile(path); }, path);
  EXPECT_NE(msg.find("holds 2 records (6146 bytes) of CIFAR data: expected 10000 records"),
            std::string::npos)
      << msg;
  WriteTestFile(path, "");
  msg = ExpectDataError([&] { ReadCifarFile(path, Records(0)); }, path);
  EXPECT_NE(msg.find("holds 0 records"), std::string::npos) << msg;
  // Gzip-compressed, the same checks on the content.
  test::WriteGzFile(path + ".gz", CifarBytes(5, 0));
  msg = ExpectDataError([&] { ReadCifarFile(path + ".gz", Records(4)); }, path + ".gz");
  EXPECT_NE(msg.find("holds 5 records"), std::string::npos) << msg;
}

TEST(ReadCifarFile, ALabelOfTenOrMoreIsRefused) {
  TempDir dir;
  const std::string path = dir.File("data_batch_3.bin");
  std::string bytes = CifarBytes(4, 0);
  bytes[2 * 3073] = 10;
  WriteTestFile(path, bytes);
  std::string msg = ExpectDataError([&] { ReadCifarFile(path, Records(4)); }, path);
  EXPECT_NE(msg.find("label 10 of record 2 (byte offset 6146): expected a class below 10"),
            std::string::npos)
      << msg;
  bytes[2 * 3073] = static_cast<char>(255);
  WriteTestFile(path, bytes);
  msg = ExpectDataError([&] { ReadCifarFile(path, Records(4)); }, path);
  EXPECT_NE(msg.find("label 255 of record 2"), std::string::npos) << msg;
}

TEST(ReadCifarFile, ChecksumMismatch) {
  TempDir dir;
  const std::string path = dir.File("a.bin");
  WriteTestFile(path, CifarBytes(2, 0));
  ContentCheck check{std::string(64, '0'), "re-fetch"};
  std::string msg = ExpectDataError([&] { ReadCifarFile(path, Records(2), check); }, path);
  EXPECT_NE(msg.find("sha256 mismatch"), std::string::npos) << msg;
  check.sha256 = test::Sha256Of(CifarBytes(2, 0));
  EXPECT_EQ(ReadCifarFile(path, Records(2), check).labels.size(), 2u);
}

TEST(LoadDataset, Cifar10FromItsFolder) {
  TempDir root;
  test::WriteFakeCifar(root.path(), 3, true);
  DataOptions o;
  o.name = "cifar10";
  o.search_dirs = {root.path()};
  o.cifar_records_per_file = 3;
  // Verified by default against the real files' digests, which the fakes do not match.
  std::string msg =
      ExpectDataError([&] { LoadDataset(o); }, root.path() + "/cifar10/data_batch_1.bin.gz");
  EXPECT_NE(msg.find("sha256 mismatch: expected " +
                     FindKnownFile("cifar10", "data_batch_1.bin")->content_sha256),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("`asgd data fetch cifar10`"), std::string::npos) << msg;

  o.verify = false;
  TrainTest d = LoadDataset(o);
  EXPECT_EQ(d.train.name, "cifar10/train");
  EXPECT_EQ(d.test.name, "cifar10/test");
  EXPECT_EQ(d.train.num_examples, 15);  // data_batch_1..5, in order
  EXPECT_EQ(d.test.num_examples, 3);
  for (int64_t e = 0; e < 15; ++e) {
    EXPECT_EQ(d.train.labels[static_cast<std::size_t>(e)], ((e % 3) * 3 + 1 + e / 3) % 10) << e;
  }
  EXPECT_EQ(d.test.labels, (std::vector<int32_t>{0, 3, 6}));
  EXPECT_EQ(d.train.example_shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(LoadSplit(o, Split::kTest).labels, d.test.labels);

  o.max_train = 4;
  o.max_test = 1;
  d = LoadDataset(o);
  EXPECT_EQ(d.train.num_examples, 4);
  EXPECT_EQ(d.test.num_examples, 1);

  // With the published record count, the fakes are the wrong size.
  o.cifar_records_per_file = 10000;
  msg = ExpectDataError([&] { LoadDataset(o); }, "data_batch_1.bin.gz");
  EXPECT_NE(msg.find("expected 10000 records (30730000 bytes)"), std::string::npos) << msg;
}

TEST(FindDatasetDir, Cifar10NamesTheMissingFile) {
  TempDir root;
  test::WriteFakeCifar(root.path(), 1, false);
  EXPECT_EQ(FindDatasetDir("cifar10", {root.path()}), root.path());
  std::remove(root.File("cifar10/test_batch.bin").c_str());
  try {
    FindDatasetDir("cifar10", {root.path()});
    FAIL() << "no error";
  } catch (const DataError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing test_batch.bin[.gz]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("asgd data fetch cifar10"), std::string::npos) << msg;
  }
}

TEST(KnownFiles, Cifar10IsTheBinaryArchiveWithItsPublishedDigests) {
  const KnownDataset* d = FindKnownDataset("cifar10");
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->archive.has_value());
  EXPECT_EQ(d->archive->remote_name, "cifar-10-binary.tar.gz");
  EXPECT_EQ(d->archive->download_md5, "c32a1d4ab5d03f1284b67883e8d87530");
  EXPECT_EQ(d->archive->download_sha256,
            "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd");
  EXPECT_EQ(d->archive->download_size, 170052171);
  ASSERT_EQ(d->files.size(), 6u);
  for (const KnownFile& f : d->files) {
    EXPECT_EQ(f.remote_name, "cifar-10-batches-bin/" + f.name);
    EXPECT_EQ(f.download_size, 10000 * 3073);
    EXPECT_EQ(f.download_sha256, f.content_sha256);
    EXPECT_EQ(f.download_sha256.size(), 64u);
  }
  EXPECT_EQ(d->files.back().name, "test_batch.bin");
  // The other datasets have no archive.
  EXPECT_FALSE(FindKnownDataset("mnist")->archive.has_value());
}

TEST(Md5, Rfc1321TestSuite) {
  EXPECT_EQ(Md5Hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(Md5Hex("a"), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(Md5Hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(Md5Hex("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(
      Md5Hex("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
      "57edf4a22be3c955ac49da2e2107b67a");
  Md5 parts;
  parts.Update("message ");
  parts.Update("digest");
  EXPECT_EQ(parts.FinishHex(), "f96b697d7cb7938d525a2f31aaf161d0");
}

}  // namespace
}  // namespace asgd::datasets
