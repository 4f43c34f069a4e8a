#include "experiments/run/server_bounds.h"

#include <chrono>
#include <cmath>

namespace asgd::experiments {

void ApplyServerBounds(const ServerBounds& bounds, int64_t chunk_bytes,
                       transport::ServerOptions* options) {
  options->max_queued_reply_bytes = bounds.max_queued_reply_bytes;
  options->barrier_timeout =
      std::chrono::milliseconds(std::llround(bounds.barrier_timeout_s * 1000.0));
  options->max_barriers_per_peer = bounds.max_barriers_per_peer;
  options->reply_chunk_bytes = chunk_bytes;
}

}  // namespace asgd::experiments
