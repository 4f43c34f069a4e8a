// Staleness records (DESIGN.md §4): one per push a shard applied or accepted.
//
// staleness = applied_version - pulled_version, where pulled_version is the shard
// version the worker's push was computed from (sent with the push) and applied_version
// the shard version when the push reached the rule (updates applied before it).
// A push applied right after the pull it was computed from has staleness 0.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "core/thread_annotations.h"
#include "transport/message.h"

namespace asgd::transport {

struct StalenessRecord {
  uint32_t worker = 0;
  uint32_t shard = 0;
  int64_t step = 0;              // the worker's clock sent with the push
  uint64_t pulled_version = 0;   // version the push was computed from
  uint64_t applied_version = 0;  // shard version when the push reached the rule
  int64_t staleness = 0;         // applied_version - pulled_version
  double wall_time_s = 0;        // the server's injected Clock, in seconds
  PushOutcome outcome = PushOutcome::kApplied;

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

}  // namespace asgd::transport
