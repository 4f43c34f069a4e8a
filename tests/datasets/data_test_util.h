// Helpers for the datasets tests: writing small IDX and gzip files, and checking the
// errors the readers throw.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace asgd::datasets::test {

std::string BigEndian32(uint32_t v);
// An IDX image file's bytes; pixel p of image i is (i * 31 + p * 7) % 256.
std::string IdxImagesBytes(uint32_t count, uint32_t rows, uint32_t cols);
std::string IdxLabelsBytes(const std::vector<uint8_t>& labels);
// Writes bytes gzip-compressed.
void WriteGzFile(const std::string& path, const std::string& bytes);
std::string GzipBytes(const std::string& bytes);
std::string Sha256Of(const std::string& bytes);
// Writes small, structurally valid IDX files under the four known MNIST names into
// root/mnist/ (6 training and 3 test images of 28x28), gzip-compressed or plain. Their
// checksums do not match the real files'.
void WriteFakeMnist(const std::string& root, bool gz);

// The bytes of a CIFAR binary file of `records` records: record i's label is
// (i * 3 + salt) % 10 and its pixel p is (i * 31 + p * 7 + salt * 13) % 256.
std::string CifarBytes(int64_t records, int salt);
// Writes the six CIFAR-10 files (data_batch_1..5.bin with salts 1..5, test_batch.bin with
// salt 0) of records_per_file records each into root/cifar10/, gzip-compressed or plain.
// Their checksums do not match the real files'.
void WriteFakeCifar(const std::string& root, int64_t records_per_file, bool gz);
// A tar.gz archive (libarchive, pax format) holding regular files `members` (path, bytes)
// in that order.
std::string TarGzBytes(const std::vector<std::pair<std::string, std::string>>& members);

// Runs f, which must throw DataError (not another exception) with a one-line message
// containing `must_contain` (typically the file's path). Returns the message, or "" after
// recording a test failure.
std::string ExpectDataError(const std::function<void()>& f, const std::string& must_contain);

}  // namespace asgd::datasets::test
