#include "core/error.h"

#include <cstdio>

namespace asgd {

std::string QuoteForMessage(std::string_view value, std::size_t max_len) {
  std::string out = "'";
  std::size_t n = 0;
  for (char c : value) {
    if (n++ == max_len) {
      out += "...";
      break;
    }
    auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\'') {
      out += "\\'";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

ConfigError::ConfigError(std::string key, std::string value, std::string expected)
    : InputError("config: " + key + " = " + QuoteForMessage(value) + ": expected " + expected),
      key_(std::move(key)),
      value_(std::move(value)) {}

ConfigError::ConfigError(const std::string& what) : InputError("config: " + what) {}

namespace {

// Built with append rather than operator+ chains: GCC 12 reports a false -Wrestrict on
// the latter.
std::string DataMessage(const std::string& file, const std::string& what, long line) {
  std::string msg = "data: ";
  msg.append(file);
  if (line > 0) {
    msg.append(":");
    msg.append(std::to_string(line));
  }
  msg.append(": ");
  msg.append(what);
  return msg;
}

}  // namespace

DataError::DataError(std::string file, std::string what, long line)
    : InputError(DataMessage(file, what, line)),
      file_(std::move(file)),
      line_(line) {}

}  // namespace asgd
