#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace asgd {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};

struct LogState {
  std::mutex mu;
  std::string prefix;                                // guarded by mu
  std::function<void(std::string_view line)> sink;   // guarded by mu
};

LogState& State() {
  static LogState* state = new LogState();  // never destroyed: safe in exit paths
  return *state;
}

const char* LevelTag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      break;
  }
  return "";
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(level); }
LogLevel GetLogLevel() { return g_level.load(); }

bool ParseLogLevel(std::string_view text, LogLevel* level) {
  static constexpr std::pair<std::string_view, LogLevel> kNames[] = {
      {"debug", LogLevel::kDebug},     {"info", LogLevel::kInfo}, {"warning", LogLevel::kWarning},
      {"error", LogLevel::kError},     {"off", LogLevel::kOff}};
  for (const auto& [name, value] : kNames) {
    if (text == name) {
      *level = value;
      return true;
    }
  }
  return false;
}

void SetLogPrefix(std::string prefix) {
  std::lock_guard<std::mutex> lock(State().mu);
  State().prefix = std::move(prefix);
}

void SetLogSink(std::function<void(std::string_view line)> sink) {
  std::lock_guard<std::mutex> lock(State().mu);
  State().sink = std::move(sink);
}

void LogLine(LogLevel level, const std::string& message) {
  LogState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  std::string line = s.prefix;
  if (level != LogLevel::kInfo) {
    line += LevelTag(level);
    line += ": ";
  }
  line += message;
  if (s.sink) {
    s.sink(line);
  } else {
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stderr);
    std::fflush(stderr);
  }
}

}  // namespace asgd
