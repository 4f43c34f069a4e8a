// Minimal leveled logging to an injectable sink (stderr by default).
//
//   ASGD_LOG(kInfo, "loaded ", n, " examples from ", path);
//
// Each call writes one whole line under a lock, so lines from different threads never
// interleave. A process-wide prefix (e.g. "[worker 3] ") identifies the role when
// several processes share a terminal.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/check.h"

namespace asgd {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "debug", "info", "warning", "error", "off"; returns false if unknown.
bool ParseLogLevel(std::string_view text, LogLevel* level);
void SetLogPrefix(std::string prefix);
// Replaces the sink (for tests); nullptr restores stderr.
void SetLogSink(std::function<void(std::string_view line)> sink);

void LogLine(LogLevel level, const std::string& message);

}  // namespace asgd

#define ASGD_LOG(level, ...)                                                              \
  do {                                                                                    \
    if (::asgd::LogLevel::level >= ::asgd::GetLogLevel()) {                               \
      ::asgd::LogLine(::asgd::LogLevel::level, ::asgd::internal::StrCat(__VA_ARGS__));    \
    }                                                                                     \
  } while (0)
