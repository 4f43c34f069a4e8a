#include "tests/support/test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
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

std::vector<std::string> MarkdownTableNames(const std::string& doc, const std::string& heading) {
  std::vector<std::string> names;
  const std::size_t at = doc.find(heading);
  EXPECT_NE(at, std::string::npos) << heading;
  if (at == std::string::npos) return names;
  std::istringstream in(doc.substr(at + heading.size()));
  std::string line;
  bool in_table = false;
  static const std::regex row(R"(^\| `([a-z_0-9.]+)` \|)");
  while (std::getline(in, line)) {
    if (line.rfind("|", 0) == 0) {
      in_table = true;
      std::smatch m;
      if (std::regex_search(line, m, row)) names.push_back(m[1]);
    } else if (in_table) {
      break;
    }
  }
  return names;
}

}  // namespace asgd::testing
