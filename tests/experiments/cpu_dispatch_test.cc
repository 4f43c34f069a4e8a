// What a run records of the build mode and the CPU (provenance.json, `asgd version`), and
// the run-time dispatch a portable build pins (experiments/config/cpu_dispatch.h).
#include "experiments/config/cpu_dispatch.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/build_info.h"
#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "experiments/config/exit_status.h"
#include "experiments/record/run_dir.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// An environment for PlanPortableDispatch.
auto Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(PortableDispatch, OnAnFmaCpuSetsEveryVariableAndExecutesAgain) {
  const DispatchPlan plan = PlanPortableDispatch(Env({}), "fma");
  EXPECT_THAT(plan.set, ElementsAre(Pair("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX2,-FMA,-FMA4"),
                                    Pair("OPENBLAS_CORETYPE", "Prescott"),
                                    Pair("ATEN_CPU_CAPABILITY", "default"),
                                    Pair("ONEDNN_MAX_CPU_ISA", "SSE41")));
  EXPECT_TRUE(plan.reexec);
  EXPECT_THAT(plan.warning, IsEmpty());
  EXPECT_TRUE(PlanPortableDispatch(Env({}), "fma4").reexec);
}

// A CPU without FMA (or the process after the exec): libm is on sse2 already, so
// GLIBC_TUNABLES is not needed and nothing is executed again: no loop.
TEST(PortableDispatch, WithLibmOnSse2OnlyTheLibraryVariablesAreSet) {
  for (const char* tunables : {"", "glibc.cpu.hwcaps=-AVX2,-FMA,-FMA4"}) {
    std::map<std::string, std::string> env;
    if (*tunables != '\0') env["GLIBC_TUNABLES"] = tunables;
    const DispatchPlan plan = PlanPortableDispatch(Env(env), "sse2");
    EXPECT_FALSE(plan.reexec) << tunables;
    EXPECT_EQ(plan.set.size(), 3u);
    for (const auto& [name, value] : plan.set) EXPECT_NE(name, "GLIBC_TUNABLES");
    EXPECT_THAT(plan.warning, IsEmpty());
  }
  // Not glibc on x86-64: libm does not dispatch.
  EXPECT_FALSE(PlanPortableDispatch(Env({}), "").reexec);
}

TEST(PortableDispatch, KeepsTheUsersValuesAndAppendsToTheirTunables) {
  const DispatchPlan plan = PlanPortableDispatch(Env({{"OPENBLAS_CORETYPE", "Haswell"},
                                                      {"ATEN_CPU_CAPABILITY", "avx2"},
                                                      {"ONEDNN_MAX_CPU_ISA", "AVX2"},
                                                      {"GLIBC_TUNABLES", "glibc.malloc.check=3"}}),
                                                 "fma");
  EXPECT_THAT(plan.set,
              ElementsAre(Pair("GLIBC_TUNABLES",
                               "glibc.malloc.check=3:glibc.cpu.hwcaps=-AVX2,-FMA,-FMA4")));
  EXPECT_TRUE(plan.reexec);
}

// The user's own hwcaps mask, or ours that glibc ignored: executing again would loop.
TEST(PortableDispatch, AHwcapsMaskThatLeavesFmaOnIsAWarningNotALoop) {
  for (const char* tunables : {"glibc.cpu.hwcaps=-AVX512F", "glibc.cpu.hwcaps=-AVX2,-FMA,-FMA4"}) {
    const DispatchPlan plan = PlanPortableDispatch(Env({{"GLIBC_TUNABLES", tunables}}), "fma");
    EXPECT_FALSE(plan.reexec) << tunables;
    EXPECT_THAT(plan.warning, HasSubstr("libm runs its fma variants"));
    EXPECT_THAT(plan.warning, HasSubstr(tunables));
    EXPECT_EQ(plan.warning.find('\n'), std::string::npos);
  }
}

// Every run's provenance says how the binary was built (mode, -march, the extensions it
// was compiled to use) and what it ran on (CPU, its extensions, libm's variant, the
// dispatch variables), at the start and again at each resumption.
TEST(Provenance, RecordsTheBuildModeTheInstructionSetsAndTheCpu) {
  testing::TempDir dir;
  testing::WriteTestFile(dir.File("tiny.ini"),
                         "[experiment]\nname = isa\nepochs = 1\nprogress = off\n"
                         "log_level = error\nout_dir = " +
                             dir.File("runs") +
                             "\n[data]\ndataset = synthetic\nsynthetic_train = 500\n"
                             "synthetic_test = 100\n[model]\nname = softmax\n");
  std::ostringstream out, err;
  ASSERT_EQ(Main({"run", dir.File("tiny.ini")}, out, err), kExitOk) << err.str();
  std::vector<fs::path> runs(fs::directory_iterator(dir.File("runs")), {});
  ASSERT_EQ(runs.size(), 1u);
  RunDir::Resume(runs[0].string(), {"asgd", "run", "--resume", runs[0].string()});
  const auto p = nlohmann::json::parse(ReadFile((runs[0] / "provenance.json").string()));
  ASSERT_TRUE(p.contains("resumed"));
  const RunningCpu cpu = DetectRunningCpu();
  for (const nlohmann::json& record : {p, p["resumed"][0]}) {
    EXPECT_EQ(record["build_mode"], ASGD_PORTABLE ? "portable" : ASGD_BUILD_MODE);
    EXPECT_EQ(record["march"], ASGD_MARCH);
    EXPECT_EQ(record["compiled_isa"].get<std::vector<std::string>>(), CompiledIsa());
    EXPECT_EQ(record["cpu"], cpu.model);
    EXPECT_EQ(record["cpu_isa"].get<std::vector<std::string>>(), cpu.isa);
    EXPECT_EQ(record["libm"], cpu.libm);
    const auto dispatch_env = record["dispatch_env"].get<std::map<std::string, std::string>>();
    EXPECT_EQ(dispatch_env, DispatchEnvironment());
  }
  EXPECT_THAT(p["resumed"][0]["build"].get<std::string>(), HasSubstr(ASGD_MARCH));
#if defined(__x86_64__)
  EXPECT_NE(cpu.model, "unknown");
  EXPECT_THAT(cpu.isa, ::testing::Contains("sse2"));
  // The binary runs here, so the CPU has every extension it was compiled to use.
  for (const std::string& ext : CompiledIsa()) {
    EXPECT_THAT(cpu.isa, ::testing::Contains(ext)) << "compiled for " << ext;
  }
  if (ASGD_PORTABLE) {
    EXPECT_EQ(ASGD_MARCH, std::string("x86-64"));
    EXPECT_EQ(CompiledIsa(), std::vector<std::string>{"sse2"});
  } else {
    EXPECT_THAT(std::string(ASGD_MARCH), ::testing::StartsWith("native"));
  }
  // glibc's choice follows the features it sees: fma needs FMA and AVX2 on the CPU.
  if (cpu.libm == "fma") {
    EXPECT_THAT(cpu.isa, ::testing::IsSupersetOf({"fma", "avx2"}));
  }
#endif
}

// `asgd version` as a process: the build, then the CPU. A portable asgd on a CPU with FMA
// executes itself again with GLIBC_TUNABLES and reports libm's sse2 variants; a native
// one reports what glibc picked, as this test process sees it.
TEST(Version, NamesTheBuildAndTheRunningCpuWithLibmAsPinned) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (ASGD_PORTABLE && tunables != nullptr &&
      std::string(tunables).find("glibc.cpu.hwcaps") != std::string::npos) {
    GTEST_SKIP() << "GLIBC_TUNABLES sets glibc.cpu.hwcaps here (" << tunables
                 << "): a portable asgd keeps it";
  }
  testing::TempDir dir;
  testing::Subprocess child({std::string(ASGD_BINARY_DIR) + "/asgd", "version"},
                            dir.File("version.out"));
  ASSERT_EQ(child.Wait(60s), kExitOk) << child.Output();
  const std::string output = child.Output();
  const RunningCpu cpu = DetectRunningCpu();
  std::string expected_cpu = cpu.model + " [";
  EXPECT_EQ(output.substr(0, output.find('\n')), BuildDescription());
  EXPECT_THAT(output, HasSubstr("\nrunning on " + expected_cpu));
  if (!cpu.libm.empty()) {
    const std::string libm = ASGD_PORTABLE ? "sse2" : cpu.libm;
    EXPECT_THAT(output, HasSubstr("], glibc libm " + libm + "\n"));
  }
  EXPECT_THAT(output, ::testing::Not(HasSubstr("warning")));
}

}  // namespace
}  // namespace asgd::experiments
