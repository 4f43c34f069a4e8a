// libFuzzer target over the IDX readers (datasets/idx.h), on content in memory (not
// compressed; the gzip layer is zlib's). ReadIdxImages, ReadIdxLabels and
// LoadIdxDataset must never crash, read out of bounds or allocate for more than the
// input holds, and may throw only DataError (one line naming the file); what they accept
// must be exactly the input's payload.
//
// Each input is read as an image file and as a label file. If it starts with an image
// header and holds more than the payload that header describes, the rest is taken as a
// label file and the two are loaded as a dataset (an image file followed by a label file
// is the seed for that).
//
// Seeds: `idx_fuzz --write-seeds=DIR` writes small image and label files, valid and
// slightly broken, to DIR (the committed corpus in tests/fuzz/corpus/idx) and exits.
// See README.md.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/sha256.h"
#include "datasets/content.h"
#include "datasets/idx.h"
#include "tests/fuzz/fuzz_util.h"

namespace asgd::datasets {
namespace {

constexpr std::string_view kImagesName = "fuzz/images-idx3-ubyte";
constexpr std::string_view kLabelsName = "fuzz/labels-idx1-ubyte";
constexpr std::size_t kImagesHeader = 16;
constexpr std::size_t kLabelsHeader = 8;

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

ContentCheck ChecksumOf(std::span<const uint8_t> bytes) {
  return {Sha256Hex(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())),
          ""};
}

void FuzzImages(std::span<const uint8_t> bytes) {
  ContentReader in{std::string(kImagesName), bytes};
  IdxImages images;
  try {
    // The checksum of the input itself: accepted content must hash the same.
    images = ReadIdxImages(in, ChecksumOf(bytes));
  } catch (const DataError& e) {
    fuzz::CheckErrorMessage(e, "data: ", kImagesName);
    return;
  }
  ASGD_FUZZ_CHECK(images.count > 0 && images.rows > 0 && images.cols > 0);
  ASGD_FUZZ_CHECK(bytes.size() >= kImagesHeader);
  ASGD_FUZZ_CHECK(BigEndian32(bytes.data()) == kIdxImagesMagic);
  ASGD_FUZZ_CHECK(static_cast<uint64_t>(images.count) == BigEndian32(bytes.data() + 4));
  ASGD_FUZZ_CHECK(static_cast<uint64_t>(images.rows) == BigEndian32(bytes.data() + 8));
  ASGD_FUZZ_CHECK(static_cast<uint64_t>(images.cols) == BigEndian32(bytes.data() + 12));
  ASGD_FUZZ_CHECK(images.pixels.size() ==
                  static_cast<uint64_t>(images.count * images.rows * images.cols));
  ASGD_FUZZ_CHECK(images.pixels.size() == bytes.size() - kImagesHeader);
  ASGD_FUZZ_CHECK(std::equal(images.pixels.begin(), images.pixels.end(),
                             bytes.begin() + kImagesHeader));
}

void FuzzLabels(std::span<const uint8_t> bytes) {
  ContentReader in{std::string(kLabelsName), bytes};
  std::vector<uint8_t> labels;
  try {
    labels = ReadIdxLabels(in, ChecksumOf(bytes));
  } catch (const DataError& e) {
    fuzz::CheckErrorMessage(e, "data: ", kLabelsName);
    return;
  }
  ASGD_FUZZ_CHECK(bytes.size() > kLabelsHeader);
  ASGD_FUZZ_CHECK(BigEndian32(bytes.data()) == kIdxLabelsMagic);
  ASGD_FUZZ_CHECK(labels.size() == BigEndian32(bytes.data() + 4));
  ASGD_FUZZ_CHECK(labels.size() == bytes.size() - kLabelsHeader);
  ASGD_FUZZ_CHECK(std::equal(labels.begin(), labels.end(), bytes.begin() + kLabelsHeader));
}

// An image file followed by a label file, split where the image header says its payload
// ends; the options vary with the input's size so that every branch is reachable.
void FuzzDataset(std::span<const uint8_t> bytes) {
  if (bytes.size() < kImagesHeader || BigEndian32(bytes.data()) != kIdxImagesMagic) return;
  const uint64_t count = BigEndian32(bytes.data() + 4);
  const uint64_t per_image = uint64_t{BigEndian32(bytes.data() + 8)} * BigEndian32(bytes.data() + 12);
  // A payload larger than the input leaves no room for a label file.
  if (count != 0 && per_image > bytes.size() / count) return;
  const std::size_t split = kImagesHeader + static_cast<std::size_t>(count * per_image);
  if (split >= bytes.size()) return;

  ContentReader images{std::string(kImagesName), bytes.first(split)};
  ContentReader labels{std::string(kLabelsName), bytes.subspan(split)};
  IdxLoadOptions options;
  options.num_classes = bytes.size() % 2 == 0 ? 10 : 3;
  options.max_examples = static_cast<int64_t>(bytes.size() % 3) - 1;  // -1 (all), 0 or 1
  Dataset ds;
  try {
    ds = LoadIdxDataset("fuzz", images, labels, options);
  } catch (const DataError& e) {
    const std::string_view what = e.what();
    ASGD_FUZZ_CHECK(what.find(kImagesName) != std::string_view::npos ||
                    what.find(kLabelsName) != std::string_view::npos);
    fuzz::CheckErrorMessage(e, "data: ", "fuzz/");
    return;
  }
  CheckDataset(ds);  // InvariantError, reported by RunOne, if the loader broke one
  const auto all = static_cast<int64_t>(count);
  ASGD_FUZZ_CHECK(ds.num_examples ==
                  (options.max_examples < 0 ? all : std::min(all, options.max_examples)));
  ASGD_FUZZ_CHECK(!ds.sparse && ds.num_classes == options.num_classes);
  ASGD_FUZZ_CHECK(static_cast<uint64_t>(ds.num_features) == per_image);
  for (std::size_t i = 0; i < ds.dense.size(); ++i) {
    ASGD_FUZZ_CHECK(ds.dense[i] == static_cast<float>(bytes[kImagesHeader + i]) / 255.0f);
  }
}

void FuzzOne(const uint8_t* data, std::size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  FuzzImages(bytes);
  FuzzLabels(bytes);
  FuzzDataset(bytes);
}

// ---- Seeds ----------------------------------------------------------------------------

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

// Pixel p of image i is (i * 31 + p * 7) % 256, as in tests/datasets/data_test_util.cc.
std::string Images(uint32_t count, uint32_t rows, uint32_t cols) {
  std::string out = BigEndian(kIdxImagesMagic) + BigEndian(count) + BigEndian(rows) + BigEndian(cols);
  for (uint32_t i = 0; i < count; ++i) {
    for (uint32_t p = 0; p < rows * cols; ++p) out.push_back(static_cast<char>((i * 31 + p * 7) % 256));
  }
  return out;
}

std::string Labels(const std::vector<uint8_t>& labels) {
  std::string out = BigEndian(kIdxLabelsMagic) + BigEndian(static_cast<uint32_t>(labels.size()));
  out.append(labels.begin(), labels.end());
  return out;
}

fuzz::Seeds MakeSeeds() {
  fuzz::Seeds seeds;
  seeds.emplace_back("images_1x1x1", Images(1, 1, 1));
  seeds.emplace_back("images_3x2x4", Images(3, 2, 4));
  seeds.emplace_back("images_2x5x5", Images(2, 5, 5));
  seeds.emplace_back("labels_3", Labels({1, 0, 9}));
  seeds.emplace_back("labels_1", Labels({7}));
  seeds.emplace_back("dataset_3x2x4", Images(3, 2, 4) + Labels({1, 0, 9}));
  seeds.emplace_back("dataset_2x3x3", Images(2, 3, 3) + Labels({2, 1}));
  // Slightly broken.
  std::string cut = Images(4, 3, 3);
  cut.resize(cut.size() - 5);
  seeds.emplace_back("images_truncated", cut);
  seeds.emplace_back("images_trailing_byte", Images(2, 2, 2) + "x");
  seeds.emplace_back("images_header_only", Images(1, 2, 2).substr(0, 10));
  seeds.emplace_back("images_zero_dim",
                     BigEndian(kIdxImagesMagic) + BigEndian(5) + BigEndian(0) + BigEndian(28));
  seeds.emplace_back("images_huge_claim", BigEndian(kIdxImagesMagic) + BigEndian(2400000) +
                                              BigEndian(28) + BigEndian(28) + "abc");
  seeds.emplace_back("labels_huge_claim", BigEndian(kIdxLabelsMagic) + BigEndian(0xfffffff0u) + "abc");
  seeds.emplace_back("dataset_count_mismatch", Images(3, 2, 2) + Labels({1, 2}));
  seeds.emplace_back("dataset_label_10", Images(3, 2, 2) + Labels({1, 2, 10}));
  return seeds;
}

}  // namespace
}  // namespace asgd::datasets

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  asgd::fuzz::HandleWriteSeeds("idx_fuzz", *argc, *argv, asgd::datasets::MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  asgd::fuzz::RunOne("idx_fuzz", [&] { asgd::datasets::FuzzOne(data, size); });
  return 0;
}
