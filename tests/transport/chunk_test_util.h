// What the chunked push and chunked reply tests share: bit patterns to compare floats
// exactly, a deterministic ramp of values, and the loopback address of a test's server.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace asgd::transport::chunk_test {

inline std::vector<uint32_t> Bits(std::span<const float> values) {
  std::vector<uint32_t> out;
  out.reserve(values.size());
  for (float f : values) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

// scale * (i % 97 - 48): small integers times scale, exact in float, with both signs.
inline std::vector<float> Ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = scale * static_cast<float>(i % 97 - 48);
  }
  return v;
}

// An ipc:// path in dir, or a free loopback tcp:// port.
inline std::string Address(const std::string& scheme, const std::string& dir,
                           const std::string& name) {
  if (scheme == "ipc") return "ipc://" + dir + "/" + name;
  return "tcp://127.0.0.1:*";
}

}  // namespace asgd::transport::chunk_test
