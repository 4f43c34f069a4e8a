#include "tests/support/test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace asgd::testing {

std::string DataDir() {
  const char* env = std::getenv("ASGD_DATA_DIR");
  if (env == nullptr || *env == '\0') return "";
  std::error_code ec;
  auto p = std::filesystem::absolute(env, ec);
  if (ec || !std::filesystem::is_directory(p)) return "";
  return p.lexically_normal().string();
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "asgd-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteTestFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace asgd::testing
