#include "tests/datasets/data_test_util.h"

#include <stdexcept>
#include <typeinfo>

#include <gtest/gtest.h>
#include <zlib.h>

#include "core/error.h"
#include "core/file_util.h"
#include "core/sha256.h"
#include "tests/support/test_util.h"

namespace asgd::datasets::test {

std::string BigEndian32(uint32_t v) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (24 - 8 * i)) & 0xff);
  return out;
}

std::string IdxImagesBytes(uint32_t count, uint32_t rows, uint32_t cols) {
  std::string out = BigEndian32(2051) + BigEndian32(count) + BigEndian32(rows) + BigEndian32(cols);
  const uint32_t per = rows * cols;
  for (uint32_t i = 0; i < count; ++i) {
    for (uint32_t p = 0; p < per; ++p) out.push_back(static_cast<char>((i * 31 + p * 7) % 256));
  }
  return out;
}

std::string IdxLabelsBytes(const std::vector<uint8_t>& labels) {
  std::string out = BigEndian32(2049) + BigEndian32(static_cast<uint32_t>(labels.size()));
  for (uint8_t l : labels) out.push_back(static_cast<char>(l));
  return out;
}

void WriteGzFile(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  if (!bytes.empty() && gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) !=
                            static_cast<int>(bytes.size())) {
    gzclose(f);
    throw std::runtime_error("cannot write " + path);
  }
  if (gzclose(f) != Z_OK) throw std::runtime_error("cannot close " + path);
}

std::string GzipBytes(const std::string& bytes) {
  asgd::testing::TempDir dir;
  WriteGzFile(dir.File("x.gz"), bytes);
  return ReadFile(dir.File("x.gz"));
}

std::string Sha256Of(const std::string& bytes) { return Sha256Hex(bytes); }

void WriteFakeMnist(const std::string& root, bool gz) {
  MakeDirs(root + "/mnist");
  auto put = [&](const std::string& name, const std::string& bytes) {
    std::string path = root + "/mnist/" + name;
    gz ? WriteGzFile(path + ".gz", bytes) : asgd::testing::WriteTestFile(path, bytes);
  };
  put("train-images-idx3-ubyte", IdxImagesBytes(6, 28, 28));
  put("train-labels-idx1-ubyte", IdxLabelsBytes({5, 0, 4, 1, 9, 2}));
  put("t10k-images-idx3-ubyte", IdxImagesBytes(3, 28, 28));
  put("t10k-labels-idx1-ubyte", IdxLabelsBytes({7, 2, 1}));
}

std::string ExpectDataError(const std::function<void()>& f, const std::string& must_contain) {
  try {
    f();
  } catch (const DataError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(must_contain), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    EXPECT_EQ(msg.rfind("data: ", 0), 0u) << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected DataError, got " << typeid(e).name() << ": " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected DataError, nothing was thrown";
  return "";
}

}  // namespace asgd::datasets::test
