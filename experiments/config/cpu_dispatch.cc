#include "experiments/config/cpu_dispatch.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <unistd.h>

#include "core/build_info.h"

namespace asgd::experiments {
namespace {

constexpr std::string_view kTunables = "GLIBC_TUNABLES";

}  // namespace

DispatchPlan PlanPortableDispatch(const std::function<const char*(const char*)>& get,
                                  const std::string& libm) {
  DispatchPlan plan;
  for (const auto& v : kDispatchVariables) {
    if (v.name != kTunables) {
      if (get(v.name) == nullptr) plan.set.emplace_back(v.name, v.portable_value);
      continue;
    }
    // libm already on its sse2 variants (a CPU without FMA, or after the exec below):
    // nothing to change.
    if (libm != "fma" && libm != "fma4") continue;
    const char* current = get(v.name);
    const std::string tunables = current == nullptr ? "" : current;
    if (tunables.find("glibc.cpu.hwcaps") != std::string::npos) {
      // The user's own mask, or ours that glibc did not apply (it ignores GLIBC_TUNABLES
      // in setuid programs): executing again would change nothing.
      plan.warning = "asgd: warning: glibc's libm runs its " + libm + " variants although " +
                     std::string(kTunables) + " sets glibc.cpu.hwcaps (" + tunables +
                     "): this portable build's results may differ on another CPU (expected " +
                     kPortableHwcaps + ")";
      continue;
    }
    plan.set.emplace_back(
        v.name, tunables.empty() ? std::string(kPortableHwcaps) : tunables + ":" + kPortableHwcaps);
    plan.reexec = true;
  }
  return plan;
}

void PinPortableDispatch(char** argv, std::ostream& err) {
  if (!ASGD_PORTABLE) return;
  const DispatchPlan plan = PlanPortableDispatch([](const char* name) { return std::getenv(name); },
                                                 DetectRunningCpu().libm);
  if (!plan.warning.empty()) err << plan.warning << "\n";
  for (const auto& [name, value] : plan.set) ::setenv(name.c_str(), value.c_str(), 1);
  if (!plan.reexec) return;
  // The same PID, arguments and (now) environment: to anything watching, one process.
  ::execv("/proc/self/exe", argv);
  err << "asgd: warning: cannot execute /proc/self/exe again to set " << kTunables << " ("
      << std::strerror(errno) << "): glibc's libm runs its FMA variants, so this portable "
      << "build's results may differ on another CPU\n";
}

std::map<std::string, std::string> DispatchEnvironment() {
  std::map<std::string, std::string> env;
  for (const auto& v : kDispatchVariables) {
    if (const char* value = std::getenv(v.name)) env[v.name] = value;
  }
  return env;
}

}  // namespace asgd::experiments
