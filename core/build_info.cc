#include "core/build_info.h"

#include <climits>
#include <cstring>
#include <fstream>
#include <utility>

#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && __has_include(<sys/platform/x86.h>)
// glibc 2.33+: the CPU features as glibc's dispatch sees them. The header is C: it spells
// bool _Bool, which GCC's C++ accepts and clang's does not.
#if defined(__clang__)
#define _Bool bool
#include <sys/platform/x86.h>
#undef _Bool
#else
#include <sys/platform/x86.h>
#endif
#define ASGD_HAVE_GLIBC_X86_FEATURES 1
#else
#define ASGD_HAVE_GLIBC_X86_FEATURES 0
#endif

#include "core/strings.h"

namespace asgd {
namespace {

std::string ProcCpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return std::string(Trim(line.substr(colon + 1)));
    }
  }
  return "unknown";
}

// CPUID leaves 0x80000002-4 (Intel SDM vol. 2A, CPUID "Processor Brand String"): 48 bytes,
// NUL-padded, often with leading blanks.
std::string CpuidBrand() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned int max_leaf = __get_cpuid_max(0x80000000u, nullptr);
  if (max_leaf < 0x80000004u) return "";
  char brand[49] = {};
  for (unsigned int i = 0; i < 3; ++i) {
    unsigned int regs[4] = {};
    __get_cpuid(0x80000002u + i, &regs[0], &regs[1], &regs[2], &regs[3]);
    std::memcpy(brand + 16 * i, regs, sizeof(regs));
  }
  return std::string(Trim(brand));
#else
  return "";
#endif
}

}  // namespace

std::string BuildDescription() {
  std::string commit = GitCommit();
  if (commit.size() > 12) commit.resize(12);
  const std::string mode = ASGD_PORTABLE ? std::string("portable ") + ASGD_MARCH : ASGD_MARCH;
  std::string s = std::string("asgd ") + ASGD_VERSION + " (commit " + commit +
                  (GitDirty() ? "+dirty" : "") + ", " + ASGD_CXX_COMPILER + ", " + ASGD_BUILD_TYPE +
                  ", " + mode + ", CUDA " + (ASGD_HAVE_CUDA ? ASGD_CUDA_COMPILER : "off");
  if (std::string(ASGD_SANITIZE).size() > 0) s += std::string(", sanitize=") + ASGD_SANITIZE;
  return s + ")";
}

std::string HostName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

std::vector<std::string> CompiledIsa() {
  std::vector<std::string> isa;
#if defined(__SSE2__)
  isa.push_back("sse2");
#endif
#if defined(__SSE3__)
  isa.push_back("sse3");
#endif
#if defined(__SSSE3__)
  isa.push_back("ssse3");
#endif
#if defined(__SSE4_1__)
  isa.push_back("sse4_1");
#endif
#if defined(__SSE4_2__)
  isa.push_back("sse4_2");
#endif
#if defined(__AVX__)
  isa.push_back("avx");
#endif
#if defined(__AVX2__)
  isa.push_back("avx2");
#endif
#if defined(__FMA__)
  isa.push_back("fma");
#endif
#if defined(__FMA4__)
  isa.push_back("fma4");
#endif
#if defined(__BMI2__)
  isa.push_back("bmi2");
#endif
#if defined(__AVX512F__)
  isa.push_back("avx512f");
#endif
  return isa;
}

RunningCpu DetectRunningCpu() {
  RunningCpu cpu;
  cpu.model = CpuidBrand();
  if (cpu.model.empty()) cpu.model = ProcCpuModel();
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's CPUID reading, which also asks the kernel (XGETBV) whether the AVX state is
  // enabled. The names are literals: __builtin_cpu_supports takes nothing else.
  __builtin_cpu_init();
  const std::pair<const char*, bool> flags[] = {
      {"sse2", __builtin_cpu_supports("sse2")},      {"sse3", __builtin_cpu_supports("sse3")},
      {"ssse3", __builtin_cpu_supports("ssse3")},    {"sse4_1", __builtin_cpu_supports("sse4.1")},
      {"sse4_2", __builtin_cpu_supports("sse4.2")},  {"avx", __builtin_cpu_supports("avx")},
      {"avx2", __builtin_cpu_supports("avx2")},      {"fma", __builtin_cpu_supports("fma")},
      {"fma4", __builtin_cpu_supports("fma4")},      {"bmi2", __builtin_cpu_supports("bmi2")},
      {"avx512f", __builtin_cpu_supports("avx512f")}};
  for (const auto& [name, has] : flags) {
    if (has) cpu.isa.push_back(name);
  }
#endif
#if ASGD_HAVE_GLIBC_X86_FEATURES
  // glibc's own selector (sysdeps/x86_64/fpu/multiarch/ifunc-fma4-fma.h, glibc 2.36):
  // FMA and AVX2 usable -> the fma variant, else FMA4 -> fma4, else sse2. "Active" is
  // after GLIBC_TUNABLES=glibc.cpu.hwcaps has masked features off.
  if (CPU_FEATURE_ACTIVE(FMA) && CPU_FEATURE_ACTIVE(AVX2)) {
    cpu.libm = "fma";
  } else if (CPU_FEATURE_ACTIVE(FMA4)) {
    cpu.libm = "fma4";
  } else {
    cpu.libm = "sse2";
  }
#endif
  return cpu;
}

std::string DescribeRunningCpu(const RunningCpu& cpu) {
  std::string s = cpu.model + " [" + Join(cpu.isa, " ") + "]";
  if (!cpu.libm.empty()) s += ", glibc libm " + cpu.libm;
  return s;
}

}  // namespace asgd
