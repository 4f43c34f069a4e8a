#include "core/sha256.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/support/test_util.h"

namespace asgd {
namespace {

// FIPS 180-4 / NIST example vectors.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAcrossBlockBoundaries) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 37);
  for (std::size_t split : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 999u}) {
    Sha256 h;
    h.Update(std::string_view(data).substr(0, split));
    h.Update(std::string_view(data).substr(split));
    EXPECT_EQ(h.FinishHex(), Sha256Hex(data)) << "split " << split;
  }
}

TEST(Sha256, FileHashMatchesAndMissingFileIsDataError) {
  testing::TempDir dir;
  testing::WriteTestFile(dir.File("f"), "abc");
  EXPECT_EQ(Sha256File(dir.File("f")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_THROW(Sha256File(dir.File("missing")), DataError);
}

}  // namespace
}  // namespace asgd
