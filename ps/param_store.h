// The store side of the parameter server, as a driver sees it: one interface for every
// place the parameters can live while a run trains them.
//
//   HogwildStore          one shared vector, lock-free (algorithms/hogwild.h)
//   MemoryStore           one ShardCore behind a mutex, in this process (algorithms/memory_store.h)
//   ShardServerStore      N ZeroMQ shard servers over inproc:// (transport/shard_server_store.h)
//   SimStore              N simulated shards in virtual time (sim/sim_store.h)
//
// The worker side is ParamClient (ps/param_client.h): a store hands out one client per
// worker and one for the evaluator, and the driver never needs to know which store it has.
// experiments/run/param_stores.h makes the right one from the run's plan.
//
// Thread-safety: clients are used concurrently, each by one thread; Read, Snapshot, Close and
// stats() may be called from the driver's thread while workers run. Restore is called
// before any client exists.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ps/message.h"
#include "ps/param_client.h"
#include "ps/shard_core.h"
#include "ps/status.h"

namespace asgd::ps {

// What a store did, summed over its shards: the one stats type of every store. The
// shard servers' own richer counters (bytes, requests by kind) stay in ShardStats.
using StoreStats = ShardCoreStats;

// Adds b's counts to a (sums; the maximum for staleness_max).
void Accumulate(StoreStats& a, const StoreStats& b);

class ParamStore {
 public:
  virtual ~ParamStore() = default;

  // One phrase for the run's log: "4 shard servers over inproc://".
  virtual std::string Describe() const = 0;
  // summary.csv's transport column: "shared", "memory", "inproc" or "sim".
  virtual std::string transport() const = 0;
  // summary.csv's ps_shards column (0 for the shared vector, which has no server).
  virtual int ps_shards() const = 0;
  // The snapshots a checkpoint of this store holds (1 for the single-vector stores).
  virtual int snapshot_count() const = 0;
  // The parameters it holds.
  virtual int64_t size() const = 0;

  // A client for worker `id` (0 .. workers - 1) or the evaluator (id = workers).
  virtual std::unique_ptr<ParamClient> NewClient(uint32_t id, Role role) = 0;

  // The whole vector now: what an evaluation reads. REQUIRES out.size() == size().
  virtual Status Read(std::span<float> out) = 0;

  // Every shard's snapshot, taken while all of them are held, so that no push lands
  // between them; while_held (if any) runs then, once (the driver reads its counters and
  // the staleness records, which pushes make while holding their shard). The shared
  // vector holds nothing: it runs while_held and then copies the vector (Hogwild's own,
  // racy view).
  virtual std::vector<ShardSnapshot> Snapshot(const std::function<void()>& while_held = {}) = 0;

  // Restores a checkpoint's snapshots (snapshot_count() of them, in shard order). Throws
  // DataError naming `source` (the checkpoint folder) when they do not fit the store.
  virtual void Restore(const std::vector<ShardSnapshot>& snapshots, const std::string& source) = 0;

  // Answers every held request, and every later one that would wait, with kShuttingDown:
  // a synchronous rule's workers waiting for peers that already stopped. A closed store
  // still answers pulls and Read.
  virtual void Close() = 0;

  virtual StoreStats stats() const = 0;
};

}  // namespace asgd::ps
