#include "core/check.h"

namespace asgd::internal {

void CheckFailed(const char* file, int line, const std::string& expr, const std::string& detail) {
  std::string what = StrCat("check failed at ", file, ":", line, ": ", expr);
  if (!detail.empty()) what += " " + detail;
  throw InvariantError(what);
}

}  // namespace asgd::internal
