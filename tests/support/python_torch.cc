#include "tests/support/python_torch.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <system_error>

#include <unistd.h>

namespace asgd::testing {
namespace {

namespace fs = std::filesystem;

fs::path CacheDir() {
  const fs::path dir = fs::path(ASGD_BINARY_DIR) / "test_cache" / "python_torch";
  fs::create_directories(dir);
  return dir;
}

// FNV-1a, 64 bits: stable across processes and builds (std::hash need not be).
std::string Fingerprint(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// A name in the cache folder no other process uses at the same time.
fs::path Temporary(const fs::path& final_path) {
  return final_path.string() + ".tmp" + std::to_string(::getpid());
}

}  // namespace

bool PythonHasTorch() {
  static const bool ok = [] {
    const fs::path marker = CacheDir() / "imports_torch";
    if (fs::exists(marker)) return true;
    const bool imports =
        std::system((std::string(kPython) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
    if (imports) {
      const fs::path tmp = Temporary(marker);
      std::ofstream(tmp) << kPython << " imports torch\n";
      fs::rename(tmp, marker);
    }
    return imports;
  }();
  return ok;
}

bool WriteByPython(const std::string& program, const std::string& out) {
  const fs::path dir = CacheDir();
  const std::string key = Fingerprint(program);
  const fs::path cached = dir / (key + ".out");
  if (!fs::exists(cached)) {
    const fs::path source = dir / (key + ".py");
    const fs::path tmp_source = Temporary(source);
    std::ofstream(tmp_source) << program;
    fs::rename(tmp_source, source);
    const fs::path tmp = Temporary(cached);
    const std::string command = std::string(kPython) + " " + source.string() + " " + tmp.string();
    if (std::system(command.c_str()) != 0) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return false;
    }
    fs::rename(tmp, cached);
  }
  fs::copy_file(cached, out, fs::copy_options::overwrite_existing);
  return true;
}

}  // namespace asgd::testing
