#include "datasets/content.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/sha256.h"
#include "tests/datasets/data_test_util.h"
#include "tests/support/test_util.h"

namespace asgd::datasets {
namespace {

using asgd::testing::TempDir;
using asgd::testing::WriteTestFile;

TEST(ContentReader, ReadsPlainAndGzipAlike) {
  TempDir d;
  std::string text(300000, 'a');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + i * 7 % 26);
  WriteTestFile(d.File("plain"), text);
  test::WriteGzFile(d.File("z.gz"), text);
  for (const std::string name : {"plain", "z.gz"}) {
    ContentReader r(d.File(name));
    std::string out;
    r.ReadAll(&out);
    EXPECT_EQ(out, text) << name;
    EXPECT_EQ(r.bytes_read(), text.size());
    EXPECT_TRUE(r.AtEnd());
    EXPECT_EQ(r.FinishHex(), Sha256Hex(text));
    EXPECT_EQ(ContentSha256(d.File(name)), Sha256Hex(text));
  }
}

TEST(ContentReader, AtEndPeeksWithoutLosingTheByte) {
  TempDir d;
  WriteTestFile(d.File("f"), "xyz");
  ContentReader r(d.File("f"));
  uint8_t buf[2];
  EXPECT_EQ(r.Read(std::span<uint8_t>(buf, 1)), 1u);
  EXPECT_FALSE(r.AtEnd());
  EXPECT_FALSE(r.AtEnd());
  EXPECT_EQ(r.Read(std::span<uint8_t>(buf, 2)), 2u);
  EXPECT_EQ(buf[0], 'y');
  EXPECT_EQ(buf[1], 'z');
  EXPECT_TRUE(r.AtEnd());
  EXPECT_EQ(r.Read(std::span<uint8_t>(buf, 2)), 0u);
  EXPECT_NO_THROW(r.Verify({Sha256Hex("xyz"), ""}));
}

TEST(ContentReader, VerifyReportsBothDigestsAndTheHint) {
  TempDir d;
  WriteTestFile(d.File("f"), "abc");
  ContentReader r(d.File("f"));
  std::string msg = test::ExpectDataError(
      [&] {
        r.Verify({std::string(64, 'f'), "do this"});
      },
      d.File("f"));
  EXPECT_NE(msg.find("expected " + std::string(64, 'f') + ", found " + Sha256Hex("abc")),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("; do this"), std::string::npos) << msg;
}

TEST(ContentReader, ReadsBytesInMemoryLikeAFile) {
  const std::string text = "hello, content in memory";
  ContentReader r("in-memory", std::span<const uint8_t>(
                                   reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  EXPECT_EQ(r.path(), "in-memory");
  EXPECT_EQ(r.MaxRemaining(), text.size());
  uint8_t buf[5];
  EXPECT_EQ(r.Read(buf), 5u);
  EXPECT_EQ(r.MaxRemaining(), text.size() - 5);
  EXPECT_FALSE(r.AtEnd());
  EXPECT_EQ(r.MaxRemaining(), text.size() - 5) << "the peeked byte is still to come";
  std::string rest;
  r.ReadAll(&rest);
  EXPECT_EQ(rest, text.substr(5));
  EXPECT_TRUE(r.AtEnd());
  EXPECT_EQ(r.MaxRemaining(), 0u);
  EXPECT_EQ(r.bytes_read(), text.size());
  EXPECT_NO_THROW(r.Verify({Sha256Hex(text), ""}));

  ContentReader empty("empty", {});
  EXPECT_TRUE(empty.AtEnd());
  EXPECT_EQ(empty.FinishHex(), Sha256Hex(""));
}

TEST(ContentReader, MaxRemainingBoundsWhatIsLeft) {
  TempDir d;
  const std::string text(1 << 20, '\0');  // compresses about 1000:1
  WriteTestFile(d.File("plain"), text);
  test::WriteGzFile(d.File("z.gz"), text);
  ContentReader plain(d.File("plain"));
  EXPECT_EQ(plain.MaxRemaining(), text.size());
  uint8_t buf[10];
  ASSERT_EQ(plain.Read(buf), 10u);
  EXPECT_EQ(plain.MaxRemaining(), text.size() - 10);
  ASSERT_FALSE(plain.AtEnd());
  EXPECT_EQ(plain.MaxRemaining(), text.size() - 10);

  ContentReader gz(d.File("z.gz"));
  const uint64_t gz_size = std::filesystem::file_size(d.File("z.gz"));
  ASSERT_LT(gz_size, text.size() / 500);
  EXPECT_EQ(gz.MaxRemaining(), 1032 * gz_size);  // deflate's largest expansion
  EXPECT_GE(gz.MaxRemaining(), text.size());
}

TEST(ContentReader, MissingFile) {
  TempDir d;
  std::string msg = test::ExpectDataError([&] { ContentReader r(d.File("nope")); }, d.File("nope"));
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

}  // namespace
}  // namespace asgd::datasets
