// Helpers shared by the parser fuzz targets (config_fuzz, idx_fuzz, libsvm_fuzz,
// checkpoint_fuzz): a check that aborts (which libFuzzer reports as a crash), the
// promises every parser error makes, and the `--write-seeds=DIR` mode that writes a
// target's seed corpus.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <new>
#include <string>
#include <string_view>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/error.h"

#define ASGD_FUZZ_CHECK(cond)                                                              \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "fuzz: invariant violated: %s (%s:%d)\n", #cond, __FILE__,      \
                   __LINE__);                                                              \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

namespace asgd::fuzz {

using Seeds = std::vector<std::pair<std::string, std::string>>;

// The class of an exception, for the report of one that should not have been thrown.
inline const char* KindOf(const std::exception& e) {
  if (dynamic_cast<const ConfigError*>(&e) != nullptr) return "asgd::ConfigError";
  if (dynamic_cast<const DataError*>(&e) != nullptr) return "asgd::DataError";
  if (dynamic_cast<const InputError*>(&e) != nullptr) return "asgd::InputError";
  if (dynamic_cast<const InvariantError*>(&e) != nullptr) return "asgd::InvariantError";
  if (dynamic_cast<const IoError*>(&e) != nullptr) return "asgd::IoError";
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return "std::bad_alloc";
  return typeid(e).name();
}

// Runs one input through `body`; any exception that escapes it is a finding. The bodies
// catch the error type their parser promises and check it; everything else lands here.
template <typename F>
void RunOne(const char* target, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: unexpected exception %s: %s\n", target, KindOf(e), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s: unexpected exception of a non-std type\n", target);
    std::abort();
  }
}

// What every parser error promises: one line (a CLI prints it as is) that names the input.
inline void CheckErrorMessage(const std::exception& e, std::string_view prefix,
                              std::string_view must_contain) {
  const std::string_view what = e.what();
  if (what.substr(0, prefix.size()) != prefix ||
      what.find(must_contain) == std::string_view::npos ||
      what.find_first_of("\n\r") != std::string_view::npos) {
    std::fprintf(stderr,
                 "fuzz: error message is not one line starting '%.*s' and naming '%.*s': %s\n",
                 static_cast<int>(prefix.size()), prefix.data(),
                 static_cast<int>(must_contain.size()), must_contain.data(), e.what());
    std::abort();
  }
}

inline bool WriteSeeds(const char* target, const std::string& dir, const Seeds& seeds) {
  for (const auto& [name, bytes] : seeds) {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "%s: cannot write %s/%s\n", target, dir.c_str(), name.c_str());
      return false;
    }
  }
  std::fprintf(stderr, "%s: wrote %zu seeds to %s\n", target, seeds.size(), dir.c_str());
  return true;
}

// For LLVMFuzzerInitialize, which libFuzzer calls before it parses its own flags: with
// `--write-seeds=DIR`, writes make_seeds() into DIR and exits.
inline void HandleWriteSeeds(const char* target, int argc, char** argv, Seeds (*make_seeds)()) {
  constexpr std::string_view kFlag = "--write-seeds=";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.substr(0, kFlag.size()) == kFlag) {
      const std::string dir(arg.substr(kFlag.size()));
      std::exit(WriteSeeds(target, dir, make_seeds()) ? 0 : 1);
    }
  }
}

}  // namespace asgd::fuzz
