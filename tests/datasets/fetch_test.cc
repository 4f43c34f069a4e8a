#include "datasets/fetch.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/file_util.h"
#include "core/sha256.h"
#include "datasets/content.h"
#include "datasets/loader.h"
#include "datasets/md5.h"
#include "tests/datasets/data_test_util.h"
#include "tests/support/test_util.h"

namespace asgd::datasets {
namespace {

using asgd::testing::TempDir;
using asgd::testing::WriteTestFile;
using test::ExpectDataError;

std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> names;
  if (!IsDirectory(dir)) return names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A fake "server" directory with two files and a table that describes them.
class FetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gz_bytes_ = test::GzipBytes("hello, gzip content\n");
    WriteTestFile(server_.File("one.bin.gz"), gz_bytes_);
    WriteTestFile(server_.File("two.txt"), plain_bytes_);
    table_.name = "fake";
    table_.base_urls = {BaseUrl()};
    table_.files = {
        {"one.bin", "one.bin.gz", Sha256Hex(gz_bytes_), static_cast<int64_t>(gz_bytes_.size()),
         Sha256Hex("hello, gzip content\n")},
        {"two.txt", "two.txt", Sha256Hex(plain_bytes_), static_cast<int64_t>(plain_bytes_.size()),
         Sha256Hex(plain_bytes_)},
    };
    options_.data_dir = dest_.path();
  }
  std::string BaseUrl() const { return "file://" + server_.path(); }
  std::string Target(const std::string& name) const { return dest_.File("fake/" + name); }

  TempDir server_;
  TempDir dest_;
  std::string gz_bytes_;
  std::string plain_bytes_ = "-1 1:1\n+1 2:1\n";
  KnownDataset table_;
  FetchOptions options_;
};

TEST_F(FetchTest, DownloadsVerifiesAndLeavesNoTemporary) {
  FetchReport r = FetchFiles(table_, options_);
  EXPECT_EQ(r.downloaded, (std::vector<std::string>{Target("one.bin.gz"), Target("two.txt")}));
  EXPECT_TRUE(r.present.empty());
  EXPECT_EQ(Listing(dest_.File("fake")), (std::vector<std::string>{"one.bin.gz", "two.txt"}));
  EXPECT_EQ(Sha256File(Target("one.bin.gz")), table_.files[0].download_sha256);
  EXPECT_EQ(ContentSha256(Target("one.bin.gz")), table_.files[0].content_sha256);
  EXPECT_EQ(ReadFile(Target("two.txt")), plain_bytes_);
}

TEST_F(FetchTest, PresentValidFilesAreSkipped) {
  FetchFiles(table_, options_);
  // The server loses its files: a second fetch must not need it.
  std::filesystem::remove(server_.File("one.bin.gz"));
  std::filesystem::remove(server_.File("two.txt"));
  FetchReport r = FetchFiles(table_, options_);
  EXPECT_TRUE(r.downloaded.empty());
  EXPECT_EQ(r.present.size(), 2u);

  // A gunzipped copy with the right content counts as present too.
  std::filesystem::remove(Target("one.bin.gz"));
  WriteTestFile(Target("one.bin"), "hello, gzip content\n");
  r = FetchFiles(table_, options_);
  EXPECT_EQ(r.present, (std::vector<std::string>{Target("one.bin"), Target("two.txt")}));
}

TEST_F(FetchTest, AnInvalidLocalFileIsReplaced) {
  MakeDirs(dest_.File("fake"));
  WriteTestFile(Target("two.txt"), "stale");
  FetchReport r = FetchFiles(table_, options_);
  EXPECT_EQ(r.downloaded.size(), 2u);
  EXPECT_EQ(ReadFile(Target("two.txt")), plain_bytes_);
}

TEST_F(FetchTest, ChecksumMismatchWritesNothing) {
  WriteTestFile(server_.File("one.bin.gz"), test::GzipBytes("tampered content\n"));
  std::string msg = ExpectDataError([&] { FetchFiles(table_, options_); }, Target("one.bin.gz"));
  EXPECT_NE(msg.find("sha256 mismatch: expected " + table_.files[0].download_sha256),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(BaseUrl() + "/one.bin.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nothing was written"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--url"), std::string::npos) << msg;
  EXPECT_TRUE(Listing(dest_.File("fake")).empty());
}

TEST_F(FetchTest, MissingRemoteFileWritesNothing) {
  std::filesystem::remove(server_.File("two.txt"));
  std::string msg = ExpectDataError([&] { FetchFiles(table_, options_); }, Target("two.txt"));
  EXPECT_NE(msg.find(BaseUrl() + "/two.txt: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("Download it by hand from " + BaseUrl() + "/two.txt into " +
                     dest_.File("fake") + "/"),
            std::string::npos)
      << msg;
  // The first file was fetched before the failure and is complete; nothing else is there.
  EXPECT_EQ(Listing(dest_.File("fake")), (std::vector<std::string>{"one.bin.gz"}));
}

TEST_F(FetchTest, OversizedDownloadIsCutOff) {
  table_.files[1].download_size = 5;
  std::string msg = ExpectDataError([&] { FetchFiles(table_, options_); }, Target("two.txt"));
  EXPECT_NE(msg.find("more than the expected 5 bytes"), std::string::npos) << msg;
  EXPECT_EQ(Listing(dest_.File("fake")), (std::vector<std::string>{"one.bin.gz"}));
}

TEST_F(FetchTest, LocationsAreTriedInOrder) {
  TempDir empty;
  table_.base_urls = {"http://127.0.0.1:1/", "file://" + empty.path() + "/", BaseUrl()};
  FetchReport r = FetchFiles(table_, options_);
  EXPECT_EQ(r.downloaded.size(), 2u);

  // With every location failing, each is listed with its reason.
  TempDir dest2;
  options_.data_dir = dest2.path();
  table_.base_urls.pop_back();
  std::string msg = ExpectDataError([&] { FetchFiles(table_, options_); }, "one.bin.gz");
  EXPECT_NE(msg.find("http://127.0.0.1:1/one.bin.gz: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("file://" + empty.path() + "/one.bin.gz: "), std::string::npos) << msg;
  EXPECT_TRUE(Listing(dest2.File("fake")).empty());
}

TEST_F(FetchTest, BaseUrlOverridesTheTable) {
  table_.base_urls = {"http://127.0.0.1:1/"};
  options_.base_url = BaseUrl() + "/";
  FetchReport r = FetchFiles(table_, options_);
  EXPECT_EQ(r.downloaded.size(), 2u);
}

// CIFAR-10's way: one archive, verified by its MD5 and SHA-256, then the files extracted
// from it. The server holds a small archive in the published layout; the table is the
// real one with the digests and sizes of the small files.
class CifarFetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_ = *FindKnownDataset("cifar10");
    table_.base_urls = {BaseUrl()};
    for (KnownFile& f : table_.files) {
      const int salt = f.name == "test_batch.bin" ? 0 : f.name[11] - '0';
      contents_[f.name] = test::CifarBytes(2, salt);
      f.download_sha256 = f.content_sha256 = Sha256Hex(contents_[f.name]);
      f.download_size = static_cast<int64_t>(contents_[f.name].size());
    }
    ServeArchive(Members());
    options_.data_dir = dest_.path();
  }
  std::vector<std::pair<std::string, std::string>> Members(const std::string& leave_out = "") {
    std::vector<std::pair<std::string, std::string>> m = {
        {"cifar-10-batches-bin/readme.html", "<html></html>"},
        {"cifar-10-batches-bin/batches.meta.txt", "airplane\nautomobile\n"}};
    for (const KnownFile& f : table_.files) {
      if (f.name != leave_out) m.emplace_back(f.remote_name, contents_[f.name]);
    }
    return m;
  }
  // Puts `bytes` on the server as the archive and makes the table describe them.
  void ServeArchive(const std::vector<std::pair<std::string, std::string>>& members) {
    ServeBytes(test::TarGzBytes(members));
  }
  void ServeBytes(const std::string& bytes) {
    archive_bytes_ = bytes;
    WriteTestFile(server_.File("cifar-10-binary.tar.gz"), bytes);
    table_.archive->download_sha256 = Sha256Hex(bytes);
    table_.archive->download_md5 = Md5Hex(bytes);
    table_.archive->download_size = static_cast<int64_t>(bytes.size());
  }
  std::string BaseUrl() const { return "file://" + server_.path(); }
  std::string Target(const std::string& name) const { return dest_.File("cifar10/" + name); }
  std::vector<std::string> Bins() const {
    return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
            "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
  }

  TempDir server_;
  TempDir dest_;
  KnownDataset table_;
  FetchOptions options_;
  std::map<std::string, std::string> contents_;
  std::string archive_bytes_;
};

TEST_F(CifarFetchTest, DownloadsVerifiesTheArchiveAndExtractsTheSixFiles) {
  FetchReport r = FetchFiles(table_, options_);
  std::vector<std::string> expected = {Target("cifar-10-binary.tar.gz")};
  for (const std::string& b : Bins()) expected.push_back(Target(b));
  EXPECT_EQ(r.downloaded, expected);
  EXPECT_TRUE(r.present.empty());
  // The six files and the archive; nothing else from the archive, no temporaries.
  std::vector<std::string> listing = Bins();
  listing.insert(listing.begin(), "cifar-10-binary.tar.gz");
  std::sort(listing.begin(), listing.end());
  EXPECT_EQ(Listing(dest_.File("cifar10")), listing);
  for (const std::string& b : Bins()) EXPECT_EQ(ReadFile(Target(b)), contents_[b]) << b;
  EXPECT_EQ(ReadFile(Target("cifar-10-binary.tar.gz")), archive_bytes_);

  // The loader reads what the fetch wrote (the real table's digests are not these files').
  DataOptions o;
  o.name = "cifar10";
  o.search_dirs = {dest_.path()};
  o.verify = false;
  o.cifar_records_per_file = 2;
  TrainTest d = LoadDataset(o);
  EXPECT_EQ(d.train.num_examples, 10);
  EXPECT_EQ(d.test.num_examples, 2);
}

TEST_F(CifarFetchTest, PresentFilesAndAPresentArchiveNeedNoServer) {
  FetchFiles(table_, options_);
  std::filesystem::remove(server_.File("cifar-10-binary.tar.gz"));
  FetchReport r = FetchFiles(table_, options_);
  EXPECT_TRUE(r.downloaded.empty());
  EXPECT_EQ(r.present.size(), 6u);
  // A missing file is extracted again from the archive already there.
  std::filesystem::remove(Target("test_batch.bin"));
  std::filesystem::remove(Target("data_batch_2.bin"));
  r = FetchFiles(table_, options_);
  EXPECT_EQ(r.downloaded,
            (std::vector<std::string>{Target("data_batch_2.bin"), Target("test_batch.bin")}));
  EXPECT_EQ(ReadFile(Target("test_batch.bin")), contents_["test_batch.bin"]);
  // A gzip-compressed copy with the right content counts as present.
  std::filesystem::remove(Target("data_batch_1.bin"));
  test::WriteGzFile(Target("data_batch_1.bin.gz"), contents_["data_batch_1.bin"]);
  r = FetchFiles(table_, options_);
  EXPECT_TRUE(r.downloaded.empty());
  EXPECT_EQ(r.present.front(), Target("data_batch_1.bin.gz"));
}

TEST_F(CifarFetchTest, AnMd5MismatchWritesNothing) {
  const std::string published = table_.archive->download_md5;
  table_.archive->download_md5 = "c32a1d4ab5d03f1284b67883e8d87530";  // not these bytes'
  std::string msg =
      ExpectDataError([&] { FetchFiles(table_, options_); }, Target("cifar-10-binary.tar.gz"));
  EXPECT_NE(msg.find("md5 mismatch: expected c32a1d4ab5d03f1284b67883e8d87530 (as published), "
                     "found " +
                     published),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("nothing was written"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected md5 c32a1d4ab5d03f1284b67883e8d87530, sha256 "), std::string::npos)
      << msg;
  EXPECT_TRUE(Listing(dest_.File("cifar10")).empty());
}

TEST_F(CifarFetchTest, ASha256MismatchWritesNothing) {
  table_.archive->download_sha256 = std::string(64, 'a');
  std::string msg =
      ExpectDataError([&] { FetchFiles(table_, options_); }, Target("cifar-10-binary.tar.gz"));
  EXPECT_NE(msg.find("sha256 mismatch: expected " + std::string(64, 'a')), std::string::npos)
      << msg;
  EXPECT_TRUE(Listing(dest_.File("cifar10")).empty());
  // A tampered archive fails the MD5 first.
  ServeArchive(Members());
  const std::string good_md5 = table_.archive->download_md5;
  std::string tampered = archive_bytes_;
  tampered[tampered.size() / 2] ^= 1;
  WriteTestFile(server_.File("cifar-10-binary.tar.gz"), tampered);
  msg = ExpectDataError([&] { FetchFiles(table_, options_); }, "cifar-10-binary.tar.gz");
  EXPECT_NE(msg.find("md5 mismatch: expected " + good_md5), std::string::npos) << msg;
  EXPECT_TRUE(Listing(dest_.File("cifar10")).empty());
}

TEST_F(CifarFetchTest, AnArchiveWithoutAFileIsRefused) {
  ServeArchive(Members("test_batch.bin"));
  std::string msg =
      ExpectDataError([&] { FetchFiles(table_, options_); }, Target("cifar-10-binary.tar.gz"));
  EXPECT_NE(msg.find("has no member cifar-10-batches-bin/test_batch.bin"), std::string::npos)
      << msg;
  EXPECT_EQ(Listing(dest_.File("cifar10")).size(), 6u);  // the archive and five verified files
}

TEST_F(CifarFetchTest, AMemberOfTheWrongSizeOrContentIsRefused) {
  table_.files[2].download_size += 1;
  std::string msg =
      ExpectDataError([&] { FetchFiles(table_, options_); }, "cifar-10-binary.tar.gz");
  EXPECT_NE(msg.find("member cifar-10-batches-bin/data_batch_3.bin is 6146 bytes: expected 6147"),
            std::string::npos)
      << msg;
  table_.files[2].download_size -= 1;
  table_.files[2].download_sha256 = std::string(64, 'b');
  msg = ExpectDataError([&] { FetchFiles(table_, options_); }, "cifar-10-binary.tar.gz");
  EXPECT_NE(msg.find("member cifar-10-batches-bin/data_batch_3.bin: expected 6146 bytes with "
                     "sha256 " +
                     std::string(64, 'b')),
            std::string::npos)
      << msg;
  // The files before it stay (complete and verified); no temporary is left.
  EXPECT_EQ(
      Listing(dest_.File("cifar10")),
      (std::vector<std::string>{"cifar-10-binary.tar.gz", "data_batch_1.bin", "data_batch_2.bin"}));
}

TEST_F(CifarFetchTest, ACorruptArchiveWithMatchingDigestsIsRefused) {
  // Digests cannot vouch for a publisher's broken file: the reader still has to fail.
  ServeBytes(test::GzipBytes("this is not a tar archive at all, just some text\n"));
  std::string msg =
      ExpectDataError([&] { FetchFiles(table_, options_); }, "cifar-10-binary.tar.gz");
  EXPECT_NE(msg.find("delete it and fetch again"), std::string::npos) << msg;
  std::string truncated = test::TarGzBytes(Members());
  truncated.resize(truncated.size() / 2);
  ServeBytes(truncated);
  msg = ExpectDataError([&] { FetchFiles(table_, options_); }, "cifar-10-binary.tar.gz");
  EXPECT_NE(msg.find("truncated gzip input; delete it and fetch again"), std::string::npos) << msg;
}

TEST(Fetch, BadArguments) {
  TempDir dest;
  FetchOptions o;
  o.data_dir = dest.path();
  EXPECT_THROW(FetchDataset("synthetic", o), ConfigError);
  o.data_dir = "";
  EXPECT_THROW(FetchDataset("mnist", o), ConfigError);
}

TEST(Fetch, RealTableAgainstTheReferenceFiles) {
  ASGD_REQUIRE_DATA();
  TempDir dest;
  FetchOptions o;
  o.data_dir = dest.path();
  for (const std::string name : {"a9a", "mnist", "fashion-mnist"}) {
    o.base_url = "file://" + asgd::testing::DataDir() + "/" + name;
    FetchReport r = FetchDataset(name, o);
    EXPECT_EQ(r.downloaded.size(), name == "a9a" ? 2u : 4u) << name;
    r = FetchDataset(name, o);
    EXPECT_TRUE(r.downloaded.empty()) << name;
  }
}

}  // namespace
}  // namespace asgd::datasets
