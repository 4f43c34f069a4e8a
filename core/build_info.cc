#include "core/build_info.h"

#include <unistd.h>

#include <climits>

namespace asgd {

std::string BuildDescription() {
  std::string commit = GitCommit();
  if (commit.size() > 12) commit.resize(12);
  std::string s = std::string("asgd ") + ASGD_VERSION + " (commit " + commit +
                  (GitDirty() ? "+dirty" : "") + ", " + ASGD_CXX_COMPILER + ", " +
                  ASGD_BUILD_TYPE + ", CUDA " + (ASGD_HAVE_CUDA ? ASGD_CUDA_COMPILER : "off");
  if (std::string(ASGD_SANITIZE).size() > 0) s += std::string(", sanitize=") + ASGD_SANITIZE;
  return s + ")";
}

std::string HostName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace asgd
