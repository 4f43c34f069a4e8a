// Staleness records (docs/architecture.md#staleness): one per push a shard handled —
// applied, accepted, or
// dropped (a synchronous round's backup workers, SAGN's late windows: outcome kDropped).
//
// staleness = applied_version - pulled_version, where pulled_version is the shard
// version the worker's push was computed from (sent with the push) and applied_version
// the shard version when the push reached the rule (updates applied before it).
// A push applied right after the pull it was computed from has staleness 0.
//
// A push that covers several local steps may hold gradients computed on parameters of
// several pulls (DOWNPOUR with n_fetch < n_push pulls inside its push window):
// pulled_version is then the newest of them (the last pull) and oldest_version() the
// oldest (the pull in force when the window's first gradient was computed), so
// oldest_staleness() = applied_version - oldest_version() is the age of the push's oldest
// gradient. For every other push the two are equal.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "core/thread_annotations.h"
#include "ps/message.h"

namespace asgd::ps {

struct StalenessRecord {
  uint32_t worker = 0;
  uint32_t shard = 0;
  int64_t step = 0;              // the worker's clock sent with the push
  uint64_t pulled_version = 0;   // version the push was computed from
  uint64_t applied_version = 0;  // shard version when the push reached the rule
  int64_t staleness = 0;         // applied_version - pulled_version
  // pulled_version - the version of the oldest parameters the push's gradients were
  // computed on; 0 unless the worker pulled inside its push window.
  uint64_t oldest_lag = 0;
  double wall_time_s = 0;        // the server's injected Clock, in seconds
  PushOutcome outcome = PushOutcome::kApplied;

  uint64_t oldest_version() const { return pulled_version - oldest_lag; }
  // staleness counted from the oldest parameters (in the rule's unit, as staleness).
  int64_t oldest_staleness() const { return staleness + static_cast<int64_t>(oldest_lag); }
  bool dropped() const { return outcome == PushOutcome::kDropped; }

  bool operator==(const StalenessRecord&) const = default;
};

// Receives records. Thread safety: shards call Record concurrently from their serving
// threads, so implementations must be thread-safe; Record runs on the request path, so
// keep it cheap (append and return).
class StalenessSink {
 public:
  virtual ~StalenessSink() = default;
  virtual void Record(const StalenessRecord& record) = 0;
};

// Keeps every record in memory. Thread-safe.
class MemoryStalenessSink final : public StalenessSink {
 public:
  void Record(const StalenessRecord& record) override {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(record);
  }
  std::vector<StalenessRecord> records() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<StalenessRecord> records_ ASGD_GUARDED_BY(mu_);
};

}  // namespace asgd::ps
