// The shard values each worker last received (in its pull or push-pull reply), for server
// rules that compare the centre now with the centre a worker computed from: ADAG's
// distance damping and DC-ASGD's delay compensation. Memory: one copy of the shard per
// worker that ever read it (the paper's "backup" w_bak(m); n + 1 copies of the range).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace asgd::algorithms {

class ReceivedCopies {
 public:
  // Remembers values as what worker received.
  void Remember(uint32_t worker, std::span<const float> values) {
    copies_[worker].assign(values.begin(), values.end());
  }
  // The copy for worker; empty if it never received values (no compensation applies).
  std::span<const float> Of(uint32_t worker) const {
    auto it = copies_.find(worker);
    return it == copies_.end() ? std::span<const float>() : std::span<const float>(it->second);
  }

  // For checkpoints (ServerRule::SaveState): per copy, the worker (u32), the number of
  // values (u64) and the values, in host byte order.
  std::string Save() const {
    std::string out;
    for (const auto& [worker, values] : copies_) {
      const uint64_t n = values.size();
      out.append(reinterpret_cast<const char*>(&worker), sizeof(worker));
      out.append(reinterpret_cast<const char*>(&n), sizeof(n));
      out.append(reinterpret_cast<const char*>(values.data()), n * sizeof(float));
    }
    return out;
  }
  // Replaces the copies with those in state. Throws InputError, changing nothing, if the
  // bytes are malformed or a copy is not `size` values long.
  void Load(std::string_view state, std::size_t size) {
    std::map<uint32_t, std::vector<float>> copies;
    while (!state.empty()) {
      uint32_t worker = 0;
      uint64_t n = 0;
      if (state.size() < sizeof(worker) + sizeof(n)) throw InputError("received copies: truncated");
      std::memcpy(&worker, state.data(), sizeof(worker));
      std::memcpy(&n, state.data() + sizeof(worker), sizeof(n));
      state.remove_prefix(sizeof(worker) + sizeof(n));
      if (n != size || state.size() < n * sizeof(float)) {
        throw InputError("received copies: a copy of the wrong size or truncated");
      }
      std::vector<float>& v = copies[worker];
      v.resize(static_cast<std::size_t>(n));
      std::memcpy(v.data(), state.data(), n * sizeof(float));
      state.remove_prefix(static_cast<std::size_t>(n * sizeof(float)));
    }
    copies_.swap(copies);
  }

 private:
  std::map<uint32_t, std::vector<float>> copies_;
};

}  // namespace asgd::algorithms
