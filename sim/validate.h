// Helpers for the options' Validate() methods (internal to sim/).
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"

namespace asgd::sim {

// Shortest round-tripping form of a number for messages ("0.5", "-1", "nan").
inline std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  for (int precision = 1; precision < 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

// Throws asgd::ConfigError(key, value, expected) unless value is finite and ok.
inline void RequireFinite(std::string_view key, double value, std::string_view expected, bool ok) {
  if (!std::isfinite(value) || !ok) {
    throw ConfigError(std::string(key), FormatNumber(value), std::string(expected));
  }
}

}  // namespace asgd::sim
