#include "tests/datasets/data_test_util.h"

#include <stdexcept>
#include <typeinfo>

#include <archive.h>
#include <archive_entry.h>
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

std::string CifarBytes(int64_t records, int salt) {
  std::string out;
  out.reserve(static_cast<std::size_t>(records * 3073));
  for (int64_t i = 0; i < records; ++i) {
    out.push_back(static_cast<char>((i * 3 + salt) % 10));
    for (int64_t p = 0; p < 3072; ++p) {
      out.push_back(static_cast<char>((i * 31 + p * 7 + salt * 13) % 256));
    }
  }
  return out;
}

void WriteFakeCifar(const std::string& root, int64_t records_per_file, bool gz) {
  MakeDirs(root + "/cifar10");
  auto put = [&](const std::string& name, const std::string& bytes) {
    std::string path = root + "/cifar10/" + name;
    gz ? WriteGzFile(path + ".gz", bytes) : asgd::testing::WriteTestFile(path, bytes);
  };
  for (int b = 1; b <= 5; ++b) {
    put("data_batch_" + std::to_string(b) + ".bin", CifarBytes(records_per_file, b));
  }
  put("test_batch.bin", CifarBytes(records_per_file, 0));
}

std::string TarGzBytes(const std::vector<std::pair<std::string, std::string>>& members) {
  asgd::testing::TempDir dir;
  const std::string path = dir.File("a.tar.gz");
  struct archive* a = archive_write_new();
  archive_write_add_filter_gzip(a);
  archive_write_set_format_pax_restricted(a);
  if (archive_write_open_filename(a, path.c_str()) != ARCHIVE_OK) {
    throw std::runtime_error(std::string("libarchive: ") + archive_error_string(a));
  }
  for (const auto& [name, bytes] : members) {
    struct archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(bytes.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_write_header(a, e);
    if (!bytes.empty()) archive_write_data(a, bytes.data(), bytes.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return ReadFile(path);
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
