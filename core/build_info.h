// What was built (version, commit, compiler, build mode, CUDA) and the CPU it runs on.
// Recorded in every run's provenance.
#pragma once

#include <string>
#include <vector>

#include "core/build_config.h"

namespace asgd {

// The git commit the binary was built from ("unknown" outside a checkout), and whether
// tracked files had uncommitted changes at build time.
const char* GitCommit();
bool GitDirty();

// "asgd 0.1.0 (commit abc123, GNU 12.2.0, Release, native (znver3), CUDA nvcc 13.0 ...)";
// the build mode is "portable x86-64" in a portable build (docs/building.md#build-modes).
std::string BuildDescription();
// The host name of this machine.
std::string HostName();

// The x86 instruction-set extensions that change which code asgd or a library it uses runs,
// in this order: sse2 sse3 ssse3 sse4_1 sse4_2 avx avx2 fma fma4 bmi2 avx512f. Empty on
// other architectures.
//
// Those the build was compiled to use (its -march): any of them missing from the running
// CPU and the binary may stop on an illegal instruction.
std::vector<std::string> CompiledIsa();

// The CPU this process runs on, as its CPUID instruction reports it: under an emulator
// (qemu-user's -cpu) the emulated model, not the host's.
struct RunningCpu {
  // The brand string, e.g. "AMD EPYC"; /proc/cpuinfo's "model name" where CPUID has none;
  // "unknown" where neither does.
  std::string model;
  // The extensions of the list above the CPU has and the kernel enables.
  std::vector<std::string> isa;
  // The variant of glibc's libm that exp, log, pow, log1p, tanh and the other dispatched
  // functions run: "fma" (FMA and AVX2 active), "fma4" or "sse2". The FMA variants round
  // differently (exp: about 7 results in 10,000 random arguments); a portable asgd pins
  // "sse2" (experiments/config/cpu_dispatch.h). "" where libm does not dispatch (not
  // glibc 2.33+ on x86-64).
  std::string libm;
};
RunningCpu DetectRunningCpu();

// "AMD EPYC [sse2 sse3 ... avx512f], glibc libm sse2", for `asgd version`.
std::string DescribeRunningCpu(const RunningCpu& cpu);

}  // namespace asgd
