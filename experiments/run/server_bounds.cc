#include "experiments/run/server_bounds.h"

#include <chrono>
#include <cmath>
#include <cstdint>

#include "experiments/config/setup.h"

namespace asgd::experiments {

void ApplyServerBounds(const Config& config, transport::ServerOptions* options) {
  options->max_queued_reply_bytes =
      static_cast<uint64_t>(config.Int("cluster.max_queued_reply_bytes"));
  options->barrier_timeout =
      std::chrono::milliseconds(std::llround(config.Double("cluster.barrier_timeout_s") * 1000.0));
  options->max_barriers_per_peer = static_cast<int>(config.Int("cluster.max_barriers_per_peer"));
  options->reply_chunk_bytes = ChunkBytes(config);
}

}  // namespace asgd::experiments
