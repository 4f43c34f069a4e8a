// IDX files (MNIST, Fashion-MNIST): images and labels as unsigned bytes.
//
// Format: a big-endian uint32 magic (2051 for images: unsigned bytes, 3 dimensions; 2049
// for labels: unsigned bytes, 1 dimension), one big-endian uint32 per dimension, then the
// payload, row-major. Files may be gzip-compressed or plain (datasets/content.h).
//
// The readers trust nothing in a file: the header must have the expected magic, every
// dimension must be positive and the payload it claims at most kMaxIdxPayloadBytes
// (checked before anything is allocated); the payload must be exactly as long as the
// header says, neither truncated nor followed by more data. Every violation is a
// DataError naming the file: one line that says what was expected and what was found.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/content.h"
#include "datasets/dataset.h"

namespace asgd::datasets {

inline constexpr uint32_t kIdxImagesMagic = 2051;
inline constexpr uint32_t kIdxLabelsMagic = 2049;
// A header claiming a larger payload is rejected as corrupt (MNIST's is 47 MB).
inline constexpr uint64_t kMaxIdxPayloadBytes = uint64_t{1} << 31;

struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;  // count × rows × cols bytes, row-major
};

// Reads an IDX image file and checks its content against `check` (datasets/content.h).
// Throws DataError.
IdxImages ReadIdxImages(const std::string& path, const ContentCheck& check = {});
// Reads an IDX label file (one byte per example). Throws DataError.
std::vector<uint8_t> ReadIdxLabels(const std::string& path, const ContentCheck& check = {});
// As above, from an open reader (a file, or bytes in memory), which they read to its end.
IdxImages ReadIdxImages(ContentReader& in, const ContentCheck& check = {});
std::vector<uint8_t> ReadIdxLabels(ContentReader& in, const ContentCheck& check = {});

struct IdxLoadOptions {
  // Labels must be below this. Default: 10 (MNIST, Fashion-MNIST).
  int num_classes = 10;
  // Keep only the first max_examples examples; -1 keeps all. The files are still read
  // and checked in full. Default: -1.
  int64_t max_examples = -1;
  // Checksums of the two files' decompressed content; empty ones are not checked.
  ContentCheck images_check;
  ContentCheck labels_check;
};

// Reads an image file and its label file into a dense Dataset named `name`: pixels
// scaled to [0, 1] (value / 255), example_shape {1, rows, cols}, num_features
// rows × cols. Throws DataError if either file is bad, if the two counts differ or if a
// label is not below options.num_classes.
Dataset LoadIdxDataset(std::string name, const std::string& images_path,
                       const std::string& labels_path, const IdxLoadOptions& options = {});
// As above, from two open readers; messages name them by their path().
Dataset LoadIdxDataset(std::string name, ContentReader& images, ContentReader& labels,
                       const IdxLoadOptions& options = {});

}  // namespace asgd::datasets
