// Debian's Python with PyTorch (python3-torch), for the tests that script a module or read
// back a model a run wrote. The tests run it as /usr/bin/python3, the interpreter Debian's
// packages install into, whatever python3 comes first on PATH.
//
// Starting that Python and importing torch takes seconds, and ctest runs every test in a
// process of its own, so what does not depend on the test is done once per build tree and
// kept in <build>/test_cache/python_torch/: the answer to "can it import torch" (when yes)
// and every scripted module, under a hash of the program that wrote it. A file there is
// written under a temporary name and renamed, so tests running at once never read half of
// one. Removing the folder (or the build tree) makes them again.
#pragma once

#include <string>

namespace asgd::testing {

inline constexpr const char* kPython = "/usr/bin/python3";

// True when kPython can import torch (checked once per build tree when it can, once per
// process when it cannot).
bool PythonHasTorch();

// Copies to `out` the file that `program` (Python source; it gets the output path as
// sys.argv[1]) writes, running it under kPython only the first time the build tree sees that
// program. False when the program fails (its output is on stderr), with `out` left absent.
bool WriteByPython(const std::string& program, const std::string& out);

}  // namespace asgd::testing
