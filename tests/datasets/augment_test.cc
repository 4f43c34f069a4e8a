// Random crops with padding and horizontal flips: the transform against its definition,
// the draws' distribution, and the sampler that applies them to training batches.
#include "datasets/augment.h"

#include <map>
#include <set>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"
#include "datasets/normalize.h"
#include "datasets/sampler.h"

namespace asgd::datasets {
namespace {

constexpr int64_t kC = 3, kH = 6, kW = 7;

// An image whose values are all distinct and non-zero: 1 + index.
std::vector<float> Image(float base = 1.0f) {
  std::vector<float> x(static_cast<std::size_t>(kC * kH * kW));
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = base + static_cast<float>(k);
  return x;
}

float At(const std::vector<float>& x, int64_t c, int64_t y, int64_t xx) {
  return x[static_cast<std::size_t>((c * kH + y) * kW + xx)];
}

// The transform spelled out as in the header: pad, crop, then mirror.
std::vector<float> Reference(const std::vector<float>& src, int64_t p, const ImageTransform& t,
                             const std::vector<float>& fill) {
  const int64_t ph = kH + 2 * p, pw = kW + 2 * p;
  std::vector<float> padded(static_cast<std::size_t>(kC * ph * pw));
  for (int64_t c = 0; c < kC; ++c) {
    for (int64_t i = 0; i < ph; ++i) {
      for (int64_t j = 0; j < pw; ++j) {
        const bool inside = i >= p && i < p + kH && j >= p && j < p + kW;
        padded[static_cast<std::size_t>((c * ph + i) * pw + j)] =
            inside ? At(src, c, i - p, j - p) : fill[static_cast<std::size_t>(c)];
      }
    }
  }
  std::vector<float> out(src.size());
  for (int64_t c = 0; c < kC; ++c) {
    for (int64_t y = 0; y < kH; ++y) {
      for (int64_t x = 0; x < kW; ++x) {
        const int64_t cx = t.flip ? kW - 1 - x : x;
        out[static_cast<std::size_t>((c * kH + y) * kW + x)] =
            padded[static_cast<std::size_t>((c * ph + y + t.offset_y) * pw + cx + t.offset_x)];
      }
    }
  }
  return out;
}

std::vector<float> Apply(const std::vector<float>& src, int64_t p, const ImageTransform& t,
                         const std::vector<float>& fill = {0.0f, 0.0f, 0.0f}) {
  std::vector<float> out(src.size(), -99.0f);
  TransformImage(src.data(), out.data(), kC, kH, kW, p, t, fill);
  return out;
}

TEST(TransformImage, NoShiftNoFlipIsTheImage) {
  const std::vector<float> x = Image();
  EXPECT_EQ(Apply(x, 4, {4, 4, false}), x);
  EXPECT_EQ(Apply(x, 0, {0, 0, false}), x);
}

TEST(TransformImage, AFlipIsAMirror) {
  const std::vector<float> x = Image();
  const std::vector<float> out = Apply(x, 4, {4, 4, true});
  for (int64_t c = 0; c < kC; ++c) {
    for (int64_t y = 0; y < kH; ++y) {
      for (int64_t xx = 0; xx < kW; ++xx) EXPECT_EQ(At(out, c, y, xx), At(x, c, y, kW - 1 - xx));
    }
  }
  // Twice is the identity.
  const std::vector<float> twice = Apply(out, 0, {0, 0, true});
  EXPECT_EQ(twice, x);
}

TEST(TransformImage, ACropIsAShiftedWindowWithZerosOutside) {
  const std::vector<float> x = Image();
  // offset (4 + 2, 4 - 3): out(y, x) = src(y + 2, x - 3).
  const std::vector<float> out = Apply(x, 4, {6, 1, false});
  for (int64_t c = 0; c < kC; ++c) {
    for (int64_t y = 0; y < kH; ++y) {
      for (int64_t xx = 0; xx < kW; ++xx) {
        const int64_t sy = y + 2, sx = xx - 3;
        const bool inside = sy < kH && sx >= 0;
        EXPECT_EQ(At(out, c, y, xx), inside ? At(x, c, sy, sx) : 0.0f) << c << y << xx;
      }
    }
  }
  // The corner windows keep a (H - P) x (W - P) block of the image.
  const std::vector<float> corner = Apply(x, 4, {0, 0, false});
  EXPECT_EQ(At(corner, 0, 4, 4), At(x, 0, 0, 0));
  EXPECT_EQ(At(corner, 0, 3, 6), 0.0f);
  EXPECT_EQ(At(corner, 2, 5, 6), At(x, 2, 1, 2));
}

TEST(TransformImage, EveryOffsetAndFlipMatchesTheDefinition) {
  const std::vector<float> x = Image();
  const std::vector<float> fill = {-1.5f, 0.0f, 2.25f};
  for (int64_t p : {1, 2, 4, 6}) {
    for (int64_t oy = 0; oy <= 2 * p; ++oy) {
      for (int64_t ox = 0; ox <= 2 * p; ++ox) {
        for (bool flip : {false, true}) {
          const ImageTransform t{oy, ox, flip};
          ASSERT_EQ(Apply(x, p, t, fill), Reference(x, p, t, fill))
              << "P " << p << " offset " << oy << "," << ox << " flip " << flip;
        }
      }
    }
  }
}

TEST(DrawTransform, EveryOneOfThe81OffsetsAndBothFlipsOccurEvenly) {
  AugmentOptions o;
  o.crop_padding = 4;
  o.flip = true;
  Rng rng(17);
  std::map<std::pair<int64_t, int64_t>, int> offsets;
  int flips = 0;
  constexpr int kDraws = 81 * 400;
  for (int i = 0; i < kDraws; ++i) {
    const ImageTransform t = DrawTransform(rng, o);
    ASSERT_TRUE(t.offset_y >= 0 && t.offset_y <= 8 && t.offset_x >= 0 && t.offset_x <= 8);
    ++offsets[{t.offset_y, t.offset_x}];
    flips += t.flip ? 1 : 0;
  }
  ASSERT_EQ(offsets.size(), 81u);
  // 400 expected per offset (standard deviation about 20); a seeded, fixed sequence.
  for (const auto& [at, n] : offsets) {
    EXPECT_GT(n, 300) << at.first << "," << at.second;
    EXPECT_LT(n, 500) << at.first << "," << at.second;
  }
  EXPECT_NEAR(flips, kDraws / 2, 500);  // standard deviation 90
  // Off: no draws change anything.
  const ImageTransform none = DrawTransform(rng, AugmentOptions{});
  EXPECT_EQ(none.offset_y, 0);
  EXPECT_EQ(none.offset_x, 0);
  EXPECT_FALSE(none.flip);
}

// Ten 3x6x7 images with distinct values, labelled by their index.
Dataset Images(int n) {
  Dataset ds;
  ds.name = "images/train";
  ds.num_examples = n;
  ds.num_features = kC * kH * kW;
  ds.num_classes = n;
  ds.example_shape = {kC, kH, kW};
  for (int i = 0; i < n; ++i) {
    const std::vector<float> x = Image(1.0f + 1000.0f * static_cast<float>(i));
    ds.dense.insert(ds.dense.end(), x.begin(), x.end());
    ds.labels.push_back(i);
  }
  return ds;
}

std::vector<int64_t> All(int n) {
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

SamplerOptions Augmented(uint64_t seed) {
  SamplerOptions o;
  o.batch_size = 4;
  o.seed = 3;
  o.augment.crop_padding = 2;
  o.augment.flip = true;
  o.augment.seed = seed;
  return o;
}

std::vector<float> Rows(const BatchView& b) {
  return std::vector<float>(b.x, b.x + b.size * b.num_features);
}

TEST(BatchSampler, AugmentedBatchesAreDeterministicPerSeed) {
  const Dataset ds = Images(10);
  BatchSampler a(ds, All(10), Augmented(5));
  BatchSampler b(ds, All(10), Augmented(5));
  BatchSampler other(ds, All(10), Augmented(6));
  bool differs = false;
  for (int i = 0; i < 8; ++i) {
    const std::vector<float> ra = Rows(a.Next());
    EXPECT_EQ(ra, Rows(b.Next())) << i;
    const BatchView o = other.Next();
    differs = differs || ra != Rows(o);
  }
  EXPECT_TRUE(differs);
}

TEST(BatchSampler, EachAugmentedRowIsOneTransformOfItsExample) {
  const Dataset ds = Images(10);
  const Dataset before = ds;
  BatchSampler s(ds, All(10), Augmented(9));
  const std::vector<float> zeros = {0.0f, 0.0f, 0.0f};
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  for (int i = 0; i < 200; ++i) {
    const BatchView b = s.Next();
    for (int64_t r = 0; r < b.size; ++r) {
      const int64_t e = b.labels[r];
      const std::vector<float> src(ds.Row(e), ds.Row(e) + ds.num_features);
      const std::vector<float> row(b.x + r * b.num_features, b.x + (r + 1) * b.num_features);
      bool found = false;
      for (int64_t oy = 0; oy <= 4 && !found; ++oy) {
        for (int64_t ox = 0; ox <= 4 && !found; ++ox) {
          for (bool flip : {false, true}) {
            if (Apply(src, 2, {oy, ox, flip}, zeros) == row) {
              found = true;
              seen.insert({oy, ox, flip});
              break;
            }
          }
        }
      }
      ASSERT_TRUE(found) << "batch " << i << " row " << r;
    }
  }
  EXPECT_EQ(seen.size(), 50u);  // all 25 windows, both ways
  // The dataset, which evaluation reads, is untouched.
  EXPECT_EQ(ds.dense, before.dense);
  // Evaluation's view of it is the plain images.
  const BatchView eval = ContiguousBatch(ds, 0, 10);
  EXPECT_EQ(std::vector<float>(eval.x, eval.x + 10 * ds.num_features),
            std::vector<float>(before.dense.begin(), before.dense.end()));
}

TEST(BatchSampler, TheSameBatchesWithoutAugmentation) {
  const Dataset ds = Images(10);
  SamplerOptions plain = Augmented(0);
  plain.augment = AugmentOptions{};
  SamplerOptions aug = Augmented(1);
  BatchSampler p(ds, All(10), plain);
  BatchSampler a(ds, All(10), aug);
  for (int i = 0; i < 5; ++i) {
    const BatchView bp = p.Next();
    const BatchView ba = a.Next();
    // The same examples in the same order: augmentation draws from its own seed.
    EXPECT_EQ(std::vector<int32_t>(bp.labels, bp.labels + bp.size),
              std::vector<int32_t>(ba.labels, ba.labels + ba.size));
    for (int64_t r = 0; r < bp.size; ++r) {
      EXPECT_TRUE(std::equal(bp.x + r * bp.num_features, bp.x + (r + 1) * bp.num_features,
                             ds.Row(bp.labels[r])));
    }
  }
}

TEST(BatchSampler, ThePaddingIsBlackAfterNormalisation) {
  Dataset ds = Images(2);
  NormalizeChannels(&ds, {{0.5, 0.25, 0.0}, {0.5, 2.0, 4.0}});
  EXPECT_EQ(FillValues(ds), (std::vector<float>{-1.0f, -0.125f, 0.0f}));
  SamplerOptions o = Augmented(2);
  o.augment.flip = false;
  o.augment.crop_padding = kH;  // some windows are all padding
  BatchSampler s(ds, All(2), o);
  std::set<float> corner_values;
  for (int i = 0; i < 300; ++i) {
    const BatchView b = s.Next();
    for (int64_t r = 0; r < b.size; ++r) corner_values.insert(b.x[r * b.num_features]);
  }
  EXPECT_TRUE(corner_values.count(-1.0f)) << "channel 0's fill";
}

TEST(CheckAugmentOptions, NamesTheKey) {
  Dataset flat;
  flat.name = "a9a/train";
  flat.num_examples = 1;
  flat.num_features = 4;
  flat.num_classes = 2;
  flat.example_shape = {4};
  flat.dense.assign(4, 0.0f);
  flat.labels = {0};
  AugmentOptions o;
  o.flip = true;
  try {
    CheckAugmentOptions(o, flat);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "data.random_flip");
  }
  o.crop_padding = 2;
  try {
    BatchSampler s(flat, {0}, SamplerOptions{.batch_size = 1, .augment = o});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "data.random_crop_padding");
  }
  const Dataset images = Images(1);
  o.crop_padding = kH + 1;
  try {
    CheckAugmentOptions(o, images);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "data.random_crop_padding");
    EXPECT_NE(std::string(e.what()).find("at most 6 pixels"), std::string::npos) << e.what();
  }
  o.crop_padding = kH;
  CheckAugmentOptions(o, images);
}

}  // namespace
}  // namespace asgd::datasets
