// The run-time code choices a portable asgd pins (docs/building.md#build-modes).
//
// A portable build compiles for the baseline x86-64 (cmake/AsgdIsa.cmake), but libraries
// it uses pick code by the running CPU, and their variants round differently:
//
//   GLIBC_TUNABLES      glibc's libm: exp, log, pow, log1p, tanh... have FMA variants,
//                       chosen (ifunc) when the program is loaded; the simulator's step
//                       times, the RNG's normals and the models' softmax call them
//   OPENBLAS_CORETYPE   OpenBLAS (libtorch's BLAS): a kernel per core type, chosen when it
//                       is loaded
//   ATEN_CPU_CAPABILITY libtorch's vectorised kernels: default, AVX2 or AVX-512
//   ONEDNN_MAX_CPU_ISA  oneDNN (libtorch's convolutions): JIT code for the best ISA
//
// Each takes the environment variable on the left. libtorch is opened with dlopen the
// first time a config names a TorchScript model (models/device.cc), after main has set
// its variables; glibc reads GLIBC_TUNABLES only when a program starts, so for libm the
// binary executes itself again. A variable the user has set is left as it is (and
// recorded in the run's provenance, as every one of these is).
//
// Not a library: only experiments/ reads and writes the environment.
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace asgd::experiments {

// glibc.cpu.hwcaps masks glibc's view of the CPU (not the CPU): with AVX2, FMA and FMA4
// off, libm's selectors take the sse2 variants on every x86-64 (glibc 2.33+ names).
inline constexpr const char* kPortableHwcaps = "glibc.cpu.hwcaps=-AVX2,-FMA,-FMA4";

struct DispatchVariable {
  const char* name;
  const char* portable_value;  // GLIBC_TUNABLES: appended to what the user has set
};
// OpenBLAS's Prescott kernels need SSE3, oneDNN's SSE41 code SSE4.1: every x86-64 CPU
// since 2005 and 2008 respectively (a CPU without them gets other code).
inline constexpr DispatchVariable kDispatchVariables[] = {
    {"GLIBC_TUNABLES", kPortableHwcaps},
    {"OPENBLAS_CORETYPE", "Prescott"},
    {"ATEN_CPU_CAPABILITY", "default"},
    {"ONEDNN_MAX_CPU_ISA", "SSE41"},
};

// What a portable process changes before it computes.
struct DispatchPlan {
  std::vector<std::pair<std::string, std::string>> set;  // variable, new value
  // Execute the binary again (with `set` in effect): glibc's libm has picked FMA variants
  // and GLIBC_TUNABLES can still turn them off.
  bool reexec = false;
  // One line for stderr when libm stays on FMA variants (the user's own
  // glibc.cpu.hwcaps, or tunables that glibc ignored), else "".
  std::string warning;
};

// The plan for an environment (get: a variable's value, or nullptr when unset) and the
// libm variant glibc picked (RunningCpu::libm: "fma", "fma4", "sse2" or "").
DispatchPlan PlanPortableDispatch(const std::function<const char*(const char*)>& get,
                                  const std::string& libm);

// In a portable build (ASGD_PORTABLE): carries out the plan for this process; with
// `reexec`, executes /proc/self/exe with argv and this environment and does not return
// unless that fails (then a warning). Warnings go to err. Does nothing in other builds.
// Call first in main, before any thread starts (setenv is not thread-safe).
//
// Under qemu-user an exec runs natively: set GLIBC_TUNABLES to kPortableHwcaps before
// starting qemu (benchmarks/portable_check.sh does) so that no exec is needed.
void PinPortableDispatch(char** argv, std::ostream& err);

// The variables of kDispatchVariables that are set, with their values, for the run's
// provenance (any build).
std::map<std::string, std::string> DispatchEnvironment();

}  // namespace asgd::experiments
