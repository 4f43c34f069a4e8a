// The [cluster] keys of a ZeroMQ shard server, for every driver and role that serves a
// shard (the one-process runner's shards, the training ps, ps-check's ps). Here rather
// than in config/setup.h so that experiments/config (and what links it without the
// transport: experiments/record) does not link ZeroMQ.
#pragma once

#include <cstdint>

#include "experiments/run/run_plan.h"
#include "transport/shard_server.h"

namespace asgd::experiments {

// A shard server's per-peer bounds (issue 22): cluster.max_queued_reply_bytes,
// cluster.barrier_timeout_s and cluster.max_barriers_per_peer (`bounds`, read by the run
// plan) into `options` (the server checks the budget against its shard's size when it
// starts), and the size of its reply chunks, `chunk_bytes` (cluster.chunk_bytes, checked
// by ChunkBytes, config/setup.h).
void ApplyServerBounds(const ServerBounds& bounds, int64_t chunk_bytes,
                       transport::ServerOptions* options);
// The same with a run plan's bounds and chunk size.
inline void ApplyServerBounds(const RunPlan& plan, transport::ServerOptions* options) {
  ApplyServerBounds(plan.server_bounds, plan.chunk_bytes, options);
}

}  // namespace asgd::experiments
