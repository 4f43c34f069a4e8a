// Debian's Python with PyTorch (python3-torch), for the tests that script a module or read
// back a model a run wrote. The tests run it as /usr/bin/python3, the interpreter Debian's
// packages install into, whatever python3 comes first on PATH.
#pragma once

#include <cstdlib>
#include <string>

namespace asgd::testing {

inline constexpr const char* kPython = "/usr/bin/python3";

// True when kPython can import torch (checked once).
inline bool PythonHasTorch() {
  static const bool ok =
      std::system((std::string(kPython) + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
  return ok;
}

}  // namespace asgd::testing
