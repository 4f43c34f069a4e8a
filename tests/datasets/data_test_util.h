// Helpers for the datasets tests: writing small IDX and gzip files, and checking the
// errors the readers throw.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
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

// Runs f, which must throw DataError (not another exception) with a one-line message
// containing `must_contain` (typically the file's path). Returns the message, or "" after
// recording a test failure.
std::string ExpectDataError(const std::function<void()>& f, const std::string& must_contain);

}  // namespace asgd::datasets::test
