// The [cluster] keys of a ZeroMQ shard server, for every driver and role that serves a
// shard (the one-process runner's shards, the training ps, ps-check's ps). Here rather
// than in config/setup.h so that experiments/config (and what links it without the
// transport: experiments/record) does not link ZeroMQ.
#pragma once

#include "experiments/config/config.h"
#include "transport/shard_server.h"

namespace asgd::experiments {

// A shard server's per-peer bounds (issue 22): cluster.max_queued_reply_bytes,
// cluster.barrier_timeout_s and cluster.max_barriers_per_peer into `options` (the
// server checks the budget against its shard's size when it starts), and the size of
// its reply chunks, cluster.chunk_bytes (ChunkBytes, config/setup.h). Throws ConfigError
// naming the key.
void ApplyServerBounds(const Config& config, transport::ServerOptions* options);

}  // namespace asgd::experiments
