// The shard values each worker last received (in its pull or push-pull reply), for server
// rules that compare the centre now with the centre a worker computed from: ADAG's
// distance damping and DC-ASGD's delay compensation. Memory: one copy of the shard per
// worker that ever read it (the paper's "backup" w_bak(m); n + 1 copies of the range).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <vector>

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

 private:
  std::map<uint32_t, std::vector<float>> copies_;
};

}  // namespace asgd::algorithms
