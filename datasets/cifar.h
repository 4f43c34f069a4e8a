// CIFAR-10's binary version: data_batch_1.bin ... data_batch_5.bin (training) and
// test_batch.bin (test), as extracted from cifar-10-binary.tar.gz.
//
// Format: records of 3073 bytes, one after another with no header: a label byte (the
// class, 0..9) then 3072 pixel bytes, a 32x32 image channel by channel (the 1024 red
// values row by row, then green, then blue). Each of the six files holds 10,000 records.
// Files may be stored plain or gzip-compressed (datasets/content.h).
//
// The reader trusts nothing in a file: its content must be a whole number of records,
// exactly as many as expected, and every label below the number of classes. Every
// violation is a DataError naming the file: one line that says what was expected and
// what was found.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/content.h"
#include "datasets/dataset.h"

namespace asgd::datasets {

inline constexpr int64_t kCifarChannels = 3;
inline constexpr int64_t kCifarSide = 32;
inline constexpr int64_t kCifarImageBytes = kCifarChannels * kCifarSide * kCifarSide;  // 3072
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;                     // 3073
inline constexpr int64_t kCifarRecordsPerFile = 10000;

// One file's records: labels[i] and pixels [i * 3072, (i + 1) * 3072) as stored.
struct CifarRecords {
  std::vector<uint8_t> labels;
  std::vector<uint8_t> pixels;
};

struct CifarReadOptions {
  // Records the file must hold; 0 accepts any positive number. Default: 10,000 (every file
  // of CIFAR-10). Tests use smaller files.
  int64_t records_per_file = kCifarRecordsPerFile;
  // Labels must be below this. Default: 10.
  int num_classes = 10;
};

// Reads one file (plain or gzip) and checks its content against `check`. Throws
// DataError, e.g.
//   "data: D/data_batch_1.bin: 30730001 bytes are not a whole number of 3073-byte CIFAR
//    records (a label byte, then 3072 pixel bytes): expected 10000 records (30730000 bytes)"
CifarRecords ReadCifarFile(const std::string& path, const CifarReadOptions& options = {},
                           const ContentCheck& check = {});
// As above, from an open reader (a file, or bytes in memory), which it reads to its end.
CifarRecords ReadCifarFile(ContentReader& in, const CifarReadOptions& options = {},
                           const ContentCheck& check = {});

struct CifarLoadOptions {
  CifarReadOptions read;
  // Keep only the first max_examples examples (over the files in order); -1 keeps all.
  // The files are still read and checked in full. Default: -1.
  int64_t max_examples = -1;
  // One check per path (or none: no checks); empty ones are not checked.
  std::vector<ContentCheck> checks;
};

// Reads the files in order into one dense Dataset named `name`: pixels scaled to [0, 1]
// (value / 255, as the IDX reader does), example_shape {3, 32, 32} (channel-major, as
// stored), num_features 3072, num_classes options.read.num_classes. Throws DataError.
Dataset LoadCifarDataset(std::string name, const std::vector<std::string>& paths,
                         const CifarLoadOptions& options = {});

}  // namespace asgd::datasets
