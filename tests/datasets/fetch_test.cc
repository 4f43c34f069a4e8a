#include "datasets/fetch.h"

#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/file_util.h"
#include "core/sha256.h"
#include "datasets/content.h"
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
