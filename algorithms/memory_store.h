// An in-memory parameter store that runs the same ServerRule objects as a ShardServer,
// without sockets: for deterministic tests of every strategy (exact staleness, bit-exact
// equivalences) and for runs that want the rules without the transport.
//
// One store holds the whole flat vector as one shard. Every request runs the rule under
// the store's mutex, so requests are serialised exactly as on a ShardServer's thread. A
// rule that defers a reply (synchronous rounds, SSP) blocks the calling thread until the
// rule releases it; tests that use deferring rules run one thread per worker.
//
// The shard's bookkeeping (staleness: version at arrival minus the version the client
// last pulled, one StalenessRecord per push, dropped ones included; outcome counts;
// non-finite rejection; held requests; snapshots) is ps::ShardCore's, the same as
// a ShardServer's. This class is its in-process adapter: it serialises requests under
// its mutex and blocks a deferred request's thread on a condition variable.
//
// Thread safety: MemoryStore is thread-safe; a MemoryClient is used by one thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "algorithms/strategy.h"
#include "core/clock.h"
#include "ps/param_store.h"
#include "ps/shard_core.h"
#include "ps/staleness.h"

namespace asgd::algorithms {

class MemoryStore final : public ps::ParamStore {
 public:
  // clock and sink are not owned and may be null (then: a system clock; records are
  // only counted). REQUIRES: rule != nullptr.
  MemoryStore(std::vector<float> initial, std::unique_ptr<ps::ServerRule> rule,
              const Clock* clock = nullptr, ps::StalenessSink* sink = nullptr);
  ~MemoryStore() override;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  int64_t size() const override { return static_cast<int64_t>(size_); }
  // A copy of the values and the version, read atomically.
  std::vector<float> values() const;
  uint64_t version() const;
  // The shard's counts (ShardCore's).
  ps::StoreStats stats() const override;
  // Fails every held request (kShuttingDown) and every later one.
  void Shutdown();

  // ParamStore: "the in-memory store", transport "memory", one shard.
  std::string Describe() const override { return "the in-memory store"; }
  std::string transport() const override { return "memory"; }
  int ps_shards() const override { return 1; }
  int snapshot_count() const override { return 1; }
  std::unique_ptr<ps::ParamClient> NewClient(uint32_t id, ps::Role role) override;
  ps::Status Read(std::span<float> out) override;
  std::vector<ps::ShardSnapshot> Snapshot(const std::function<void()>& while_held = {}) override;
  void Restore(const std::vector<ps::ShardSnapshot>& snapshots, const std::string& source) override;
  void Close() override { Shutdown(); }

  // Checkpoints, as ShardServer's (shard 0: the whole vector). Snapshot runs while_held
  // (if any) under the store's lock, so that staleness records, which pushes make under
  // the same lock, can be read consistently with the values. Restore replaces values,
  // version and rule state; InvariantError for a snapshot of another size, InputError if
  // the rule cannot read its state (nothing changed then).
  ps::ShardSnapshot SnapshotShard(const std::function<void()>& while_held = {}) const;
  void RestoreShard(const ps::ShardSnapshot& snapshot);

  // The requests a MemoryClient makes. `version` is what the client last pulled;
  // `oldest_version` (pushes) what it had pulled when its push window began, if earlier.
  struct Result {
    ps::Status status;
    uint64_t version = 0;  // after the request (pull: the version read)
    ps::PushOutcome outcome = ps::PushOutcome::kApplied;
  };
  // A compressed push passes `encoded` (count = size()) and an empty update.
  Result Request(ps::Op op, uint32_t worker, int64_t step, uint64_t version,
                 std::span<const float> update, std::span<float> out,
                 std::optional<uint64_t> oldest_version = std::nullopt,
                 const compression::Encoded* encoded = nullptr);

 private:
  class Replies;
  struct Held;

  mutable std::mutex mu_;
  std::condition_variable released_;
  std::size_t size_;
  std::unique_ptr<Clock> own_clock_;
  std::unique_ptr<ps::VectorStorage> storage_;
  std::unique_ptr<Replies> replies_;
  std::unique_ptr<ps::ShardCore> core_;
  bool shut_down_ = false;
};

// A worker's client of a MemoryStore.
class MemoryClient final : public ps::ParamClient {
 public:
  MemoryClient(MemoryStore* store, uint32_t worker) : store_(store), worker_(worker) {}
  int64_t size() const override { return store_->size(); }
  int64_t dropped_pushes() const override { return dropped_; }
  uint64_t pulled_version() const { return pulled_version_; }

 protected:
  ps::Status DoPull(std::span<float> out) override;
  ps::Status DoPush(std::span<const float> update, int64_t step) override;
  ps::Status DoPushPull(std::span<const float> update, std::span<float> out, int64_t step) override;
  ps::Status DoSendClock(int64_t clock) override;
  void DoMarkWindowStart() override { window_version_ = pulled_version_; }
  bool TakesEncodedPushes() const override { return true; }
  ps::Status DoPushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                           int64_t step) override;

 private:
  // The oldest version of the push to come: the mark's, when it is older than the last pull.
  std::optional<uint64_t> TakeOldestVersion();

  MemoryStore* store_;
  uint32_t worker_;
  uint64_t pulled_version_ = 0;
  std::optional<uint64_t> window_version_;  // pulled_version_ at the last MarkWindowStart
  int64_t dropped_ = 0;
};

}  // namespace asgd::algorithms
