#include "compression/compressor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "compression/error_feedback.h"
#include "core/error.h"
#include "core/rng.h"
#include "tests/compression/compressor_testing.h"

namespace asgd::compression {
namespace {

using testing::kCompressors;
using testing::Make;
using testing::RandomVector;
using testing::RoundTrip;

TEST(Compressor, RegistryNamesEveryCompressorAndNone) {
  std::vector<std::string> want = kCompressors;
  want.push_back("none");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(CompressorNames(), want);
  EXPECT_EQ(Make("none"), nullptr);
  for (const std::string& n : kCompressors) {
    auto c = Make(n);
    ASSERT_NE(c, nullptr) << n;
    EXPECT_EQ(c->Name(), n);
    EXPECT_EQ(EncodingName(c->encoding()), n);
    EXPECT_FALSE(CompressorDescription(n).empty());
  }
}

TEST(Compressor, BadOptionsNameTheKey) {
  auto key_of = [](CompressionOptions o) {
    try {
      NewCompressor(o);
    } catch (const ConfigError& e) {
      return e.key();
    }
    return std::string("no error");
  };
  CompressionOptions o;
  o.name = "zip";
  EXPECT_EQ(key_of(o), "compression.name");
  o = {};
  o.name = "topk";
  o.ratio = 0;
  EXPECT_EQ(key_of(o), "compression.ratio");
  o.ratio = 1.5;
  EXPECT_EQ(key_of(o), "compression.ratio");
  o = {};
  o.name = "qsgd";
  o.levels = 0;
  EXPECT_EQ(key_of(o), "compression.levels");
  o.levels = static_cast<int>(kMaxQsgdLevels) + 1;
  EXPECT_EQ(key_of(o), "compression.levels");
  o = {};
  o.name = "qsgd";
  for (int64_t bucket : {int64_t{0}, int64_t{-512}, kMaxQsgdBucket + 1}) {
    o.bucket = bucket;
    EXPECT_EQ(key_of(o), "compression.bucket") << bucket;
  }
  o.bucket = kMaxQsgdBucket;
  EXPECT_EQ(key_of(o), "no error");
  o = {};
  o.name = "terngrad";
  for (double clip : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    o.clip = clip;
    EXPECT_EQ(key_of(o), "compression.clip") << clip;
  }
  o.clip = 0;
  EXPECT_EQ(key_of(o), "no error");
  o = {};
  o.error_feedback = true;
  EXPECT_EQ(key_of(o), "compression.error_feedback");
}

// Pieces must cover the vector with pieces of at least one element.
TEST(Compressor, EncodeChecksThePieces) {
  const std::vector<float> x = RandomVector(5, 1);
  Rng rng(1);
  Encoded e;
  for (const std::string& name : kCompressors) {
    auto c = Make(name);
    EXPECT_THROW(c->Encode(x, rng, &e, std::vector<int64_t>{2, 2}), InvariantError) << name;
    EXPECT_THROW(c->Encode(x, rng, &e, std::vector<int64_t>{5, 0}), InvariantError) << name;
    EXPECT_NO_THROW(c->Encode(x, rng, &e, std::vector<int64_t>{2, 3})) << name;
  }
}

TEST(TopK, KeepingEverythingIsExact) {
  auto c = Make("topk", 1.0);
  Rng rng(1);
  for (std::size_t n : {1u, 2u, 63u, 64u, 65u, 1000u}) {
    const std::vector<float> x = RandomVector(n, n);
    const std::vector<float> back = RoundTrip(*c, x, rng);
    EXPECT_EQ(std::memcmp(back.data(), x.data(), n * 4), 0) << n;
  }
}

TEST(TopK, KeepsTheLargestMagnitudes) {
  auto c = Make("topk", 0.3);  // k = round(0.3 * 10) = 3
  const std::vector<float> x = {0.1f, -5, 0.2f, 3, -0.3f, 0, 4, 0.5f, -0.6f, 0.7f};
  Rng rng(1);
  Encoded e;
  const std::vector<float> back = RoundTrip(*c, x, rng, &e);
  EXPECT_EQ(back, (std::vector<float>{0, -5, 0, 3, 0, 0, 4, 0, 0, 0}));
  EXPECT_EQ(e.bytes(), 3 * 8);
}

// Against the definition, sorted by magnitude (ties to the lower index): small vectors
// (one nth_element) and large ones (the sampled threshold), with many ties and a spike.
TEST(TopK, MatchesTheDefinitionAtEverySizeAndWithTies) {
  for (std::size_t n : {1u, 7u, 100u, 16385u, 50000u, 200003u}) {
    for (const bool ties : {false, true}) {
      std::vector<float> x = RandomVector(n, n + ties);
      if (ties) {
        for (float& v : x) v = std::round(v * 2) / 2;  // few distinct magnitudes
      }
      x[n / 2] = 1e6f;
      for (double ratio : {0.001, 0.01, 0.2, 1.0}) {
        auto c = Make("topk", ratio);
        Rng rng(1);
        Encoded e;
        c->Encode(x, rng, &e);
        const auto k = static_cast<std::size_t>(
            std::clamp<long long>(std::llround(ratio * static_cast<double>(n)), 1, n));
        std::vector<uint32_t> order(n);
        std::iota(order.begin(), order.end(), 0u);
        std::stable_sort(order.begin(), order.end(), [&x](uint32_t a, uint32_t b) {
          return std::fabs(x[a]) > std::fabs(x[b]);
        });
        order.resize(k);
        std::sort(order.begin(), order.end());
        std::vector<uint32_t> got(e.frames[0].size() / 4);
        std::memcpy(got.data(), e.frames[0].data(), e.frames[0].size());
        ASSERT_EQ(got, order) << "n " << n << " ratio " << ratio << " ties " << ties;
      }
    }
  }
}

TEST(Sign, SendsTheSignTimesTheMeanMagnitude) {
  auto c = Make("sign");
  const std::vector<float> x = {1, -2, 0, 4, -1};
  Rng rng(1);
  Encoded e;
  const std::vector<float> back = RoundTrip(*c, x, rng, &e);
  const float s = 8.0f / 5.0f;
  EXPECT_EQ(back, (std::vector<float>{s, -s, s, s, -s}));
  EXPECT_EQ(e.bytes(), 4 + 8);
}

TEST(Qsgd, PacksInAsFewBitsAsTheLevelsNeed) {
  Rng rng(1);
  const std::vector<float> x = RandomVector(640, 5);
  for (auto [levels, bits] : {std::pair{1, 2}, {3, 3}, {4, 4}, {15, 5}, {16, 6}, {255, 9}}) {
    Encoded e;
    Make("qsgd", 0.1, levels)->Encode(x, rng, &e);
    EXPECT_EQ(e.frames[1].size(), 640u * bits / 8) << "s = " << levels;
  }
}

// What a push moves, exactly: s, d and a norm per bucket, then the codes in whole words.
TEST(Qsgd, BytesAreTheNormsAndTheCodes) {
  Rng rng(1);
  for (std::size_t n : {1u, 63u, 64u, 511u, 512u, 513u, 1000u, 4096u}) {
    const std::vector<float> x = RandomVector(n, n);
    for (int64_t d : {int64_t{1}, int64_t{100}, int64_t{512}, kMaxQsgdBucket}) {
      Encoded e;
      Make("qsgd", 0.1, 15, d)->Encode(x, rng, &e);
      const std::size_t buckets =
          (n + static_cast<std::size_t>(d) - 1) / static_cast<std::size_t>(d);
      EXPECT_EQ(e.frames[0].size(), 8 + 4 * buckets) << "n " << n << " d " << d;
      EXPECT_EQ(e.bytes(), static_cast<int64_t>(8 + 4 * buckets + (5 * n + 63) / 64 * 8))
          << "n " << n << " d " << d;
    }
  }
}

// A bucket of values so small that s / ||x_b|| overflows float is sent as zeros, with norm
// 0, next to an ordinary bucket. (It used to send its zeros as level s and set padding
// bits, so the encoder's own output was refused, and error feedback stopped the worker.)
TEST(Qsgd, ABucketBelowTheFloatRangeIsSentAsZeros) {
  // Buckets of 4 and 3, and the tiny values alone (one bucket).
  for (const std::vector<float>& x : {std::vector<float>{1e-39f, 0, -2e-39f, 0, 3, -4, 0},
                                      std::vector<float>{1e-39f, 0, -2e-39f}}) {
    for (const bool ef : {false, true}) {
      auto c = Make("qsgd", 0.1, 15, 4, 2.5, ef);
      Rng rng(1);
      Encoded e;
      const std::vector<float> back = RoundTrip(*c, x, rng, &e);
      float norm0;
      std::memcpy(&norm0, e.frames[0].data() + 8, 4);
      EXPECT_EQ(norm0, 0.0f);
      for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(back[i], 0.0f) << i;
      if (ef) {
        ErrorFeedback feedback(static_cast<int64_t>(x.size()));
        EXPECT_NO_THROW(feedback.Encode(*c, x, rng, &e));
      }
    }
  }
}

// terngrad's wire: the piece table (a count and a scale per piece) and 2 bits per element.
TEST(TernGrad, BytesAreThePieceTableAndTheCodes) {
  Rng rng(1);
  const std::vector<float> x = RandomVector(1000, 2);
  for (const std::vector<int64_t>& pieces :
       {std::vector<int64_t>{}, {1000}, {500, 500}, {1, 998, 1}, std::vector<int64_t>(1000, 1)}) {
    Encoded e;
    Make("terngrad")->Encode(x, rng, &e, pieces);
    const std::size_t m = std::max<std::size_t>(1, pieces.size());
    EXPECT_EQ(e.frames[0].size(), 4 + 8 * m);
    EXPECT_EQ(e.bytes(), static_cast<int64_t>(4 + 8 * m + 2000 / 64 * 8 + 8)) << m;
    uint32_t count;
    std::memcpy(&count, e.frames[0].data(), 4);
    EXPECT_EQ(count, m);
  }
}

// Each piece has its own scale: a piece of small values next to one of large values keeps
// its own magnitude instead of the largest of the whole part.
TEST(TernGrad, EachPieceHasItsOwnScale) {
  std::vector<float> x(200);
  for (std::size_t i = 0; i < 100; ++i) x[i] = (i % 2 ? 1 : -1) * 0.001f;
  for (std::size_t i = 100; i < 200; ++i) x[i] = (i % 2 ? 1 : -1) * 10.0f;
  Rng rng(1);
  const std::vector<float> back = RoundTrip(*Make("terngrad", 0.25, 15, 512, 0), x, rng, nullptr,
                                            std::vector<int64_t>{100, 100});
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(std::fabs(back[i]), 0.001f) << i;
  for (std::size_t i = 100; i < 200; ++i) EXPECT_EQ(std::fabs(back[i]), 10.0f) << i;
}

TEST(Stochastic, SameSeedSameEncoding) {
  const std::vector<float> x = RandomVector(300, 2);
  for (const std::string& name : kCompressors) {
    auto c = Make(name);
    Rng a(9), b(9);
    Encoded ea, eb;
    c->Encode(x, a, &ea);
    c->Encode(x, b, &eb);
    EXPECT_EQ(ea.frames, eb.frames) << name;
  }
}

using Frames = std::vector<std::span<const std::byte>>;
Frames View(const Encoded& e) { return Frames(e.frames.begin(), e.frames.end()); }

// Every truncation and mislabelling is refused, and a refused decode writes nothing.
TEST(Decode, RefusesTruncatedEncodings) {
  const std::vector<float> x = RandomVector(1000, 4);
  for (const std::string& name : kCompressors) {
    Rng rng(1);
    Encoded e;
    Make(name)->Encode(x, rng, &e);
    std::vector<float> out(x.size(), 7.0f);
    for (std::size_t f = 0; f < e.frames.size(); ++f) {
      for (std::size_t cut : {std::size_t{1}, std::size_t{4}, e.frames[f].size()}) {
        Frames frames = View(e);
        frames[f] = frames[f].first(frames[f].size() - std::min(cut, frames[f].size()));
        EXPECT_NE(Decode(e.encoding, frames, out), "") << name << " frame " << f << " cut " << cut;
      }
    }
    Frames fewer = View(e);
    fewer.pop_back();
    EXPECT_NE(Decode(e.encoding, fewer, out), "") << name;
    Frames more = View(e);
    more.push_back(more.back());
    EXPECT_NE(Decode(e.encoding, more, out), "") << name;
    // The packed forms have one size per element count; the sparse form is valid for any
    // count above its largest index (the count travels in the message header).
    std::vector<float> longer(x.size() + 64);
    const bool sparse = e.encoding == Encoding::kTopK || e.encoding == Encoding::kRandK;
    EXPECT_EQ(Decode(e.encoding, View(e), longer).empty(), sparse) << name << " into more";
    std::vector<float> shorter(x.size() - 64);  // a word fewer in every packed form
    if (!sparse) {
      EXPECT_NE(Decode(e.encoding, View(e), shorter), "") << name << " into fewer";
    }
    EXPECT_EQ(out, std::vector<float>(x.size(), 7.0f)) << name << " wrote before refusing";
  }
}

TEST(Decode, RefusesMislabelledEncodings) {
  const std::vector<float> x = RandomVector(1000, 4);
  for (const std::string& name : kCompressors) {
    Rng rng(1);
    Encoded e;
    Make(name)->Encode(x, rng, &e);
    std::vector<float> out(x.size());
    for (uint32_t label = 0; label < kEncodingEnd + 2; ++label) {
      const auto as = static_cast<Encoding>(label);
      const bool same_form = (as == Encoding::kTopK || as == Encoding::kRandK) &&
                             (e.encoding == Encoding::kTopK || e.encoding == Encoding::kRandK);
      if (as == e.encoding || same_form) continue;
      EXPECT_NE(Decode(as, View(e), out), "") << name << " read as " << label;
    }
  }
}

TEST(Decode, RefusesBadFields) {
  std::vector<float> out(100);
  auto refused = [&](Encoded e) { return !Decode(e, out).empty(); };
  Rng rng(1);
  const std::vector<float> x = RandomVector(100, 8);
  auto encode = [&](const std::string& name) {
    Encoded e;
    Make(name)->Encode(x, rng, &e);
    return e;
  };
  auto set32 = [](Encoded& e, std::size_t f, std::size_t at, auto v) {
    std::memcpy(e.frames[f].data() + at, &v, 4);
  };
  Encoded sparse = encode("topk");  // 25 pairs
  Encoded bad = sparse;
  set32(bad, 0, 4, uint32_t{0});  // index 1 <= index 0
  EXPECT_TRUE(refused(bad));
  bad = sparse;
  set32(bad, 0, 24 * 4, uint32_t{100});  // last index out of range
  EXPECT_TRUE(refused(bad));
  bad = sparse;
  bad.frames[1].resize(bad.frames[1].size() - 4);  // fewer values than indices
  EXPECT_TRUE(refused(bad));

  // qsgd at s = 15 in buckets of 512: one norm for 100 elements; and in buckets of 30,
  // four.
  Encoded q = encode("qsgd");
  ASSERT_EQ(q.frames[0].size(), 12u);
  bad = q;
  set32(bad, 0, 8, std::nanf(""));
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 8, -1.0f);
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 0, uint32_t{0});  // s = 0
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 0, uint32_t{16});  // s = 16 needs 6-bit codes, the frame has 5-bit ones
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 4, uint32_t{0});  // d = 0
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 4, uint32_t{50});  // d = 50: two norms expected, one sent
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 4, uint32_t{100});  // d = 100 or more: the same single bucket
  EXPECT_FALSE(refused(bad));
  bad = q;
  bad.frames[0].resize(8);  // no norm
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[0].resize(4);  // not even d
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[0].clear();
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[0].resize(16);  // a norm too many
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[1][0] = std::byte{0x1f};  // first code: level 15, negative: fine
  EXPECT_FALSE(refused(bad));
  set32(bad, 0, 0, uint32_t{14});  // level 15 > s = 14 (14 also needs 5 bits)
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[1][0] = (bad.frames[1][0] & std::byte{0xe0}) | std::byte{0x01};  // sign on level 0
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[1].back() |= std::byte{0x80};  // 500 bits in 8 words: padding
  EXPECT_TRUE(refused(bad));
  Encoded q30;
  Make("qsgd", 0.25, 15, 30)->Encode(x, rng, &q30);
  ASSERT_EQ(q30.frames[0].size(), 8u + 4 * 4);
  EXPECT_FALSE(refused(q30));
  for (std::size_t b = 0; b < 4; ++b) {  // a bad norm in any bucket
    for (float v : {std::nanf(""), -0.5f, std::numeric_limits<float>::infinity()}) {
      bad = q30;
      set32(bad, 0, 8 + 4 * b, v);
      EXPECT_TRUE(refused(bad)) << "bucket " << b << " norm " << v;
    }
  }

  Encoded s = encode("sign");
  bad = s;
  set32(bad, 0, 0, std::numeric_limits<float>::infinity());
  EXPECT_TRUE(refused(bad));
  bad = s;
  bad.frames[1].back() |= std::byte{0x80};  // 100 bits in 2 words: padding
  EXPECT_TRUE(refused(bad));

  // terngrad in pieces (40, 1, 59): m = 3, the counts at 4, 8, 12, the scales at 16, 20, 24.
  Encoded t;
  Make("terngrad")->Encode(x, rng, &t, std::vector<int64_t>{40, 1, 59});
  ASSERT_EQ(t.frames[0].size(), 4u + 8 * 3);
  EXPECT_FALSE(refused(t));
  bad = t;
  bad.frames[1][0] |= std::byte{0x03};  // code 3
  EXPECT_TRUE(refused(bad));
  bad = t;
  bad.frames[1].back() |= std::byte{0x80};  // 200 bits in 4 words: padding
  EXPECT_TRUE(refused(bad));
  for (uint32_t m : {0u, 2u, 4u, 101u, 0xffffffffu}) {  // a count of pieces the table is not
    bad = t;
    set32(bad, 0, 0, m);
    EXPECT_TRUE(refused(bad)) << m << " pieces";
  }
  for (auto [at, count] : {std::pair{4, 0u},
                           {4, 41u},
                           {4, 39u},
                           {8, 0u},
                           {12, 60u},
                           {12, 58u},
                           {4, 0xffffffffu}}) {  // counts that do not cover the 100 elements
    bad = t;
    set32(bad, 0, static_cast<std::size_t>(at), count);
    EXPECT_TRUE(refused(bad)) << "count " << count << " at " << at;
  }
  bad = t;  // the counts may move as long as they cover the vector
  set32(bad, 0, 4, 41u);
  set32(bad, 0, 12, 58u);
  EXPECT_FALSE(refused(bad));
  for (std::size_t j = 0; j < 3; ++j) {  // a bad scale of any piece
    for (float v : {std::nanf(""), -1.0f, std::numeric_limits<float>::infinity()}) {
      bad = t;
      set32(bad, 0, 16 + 4 * j, v);
      EXPECT_TRUE(refused(bad)) << "piece " << j << " scale " << v;
    }
  }
  for (std::size_t size : {0u, 3u, 4u, 27u, 29u}) {
    bad = t;
    bad.frames[0].resize(size);
    EXPECT_TRUE(refused(bad)) << size << " bytes";
  }
}

}  // namespace
}  // namespace asgd::compression
