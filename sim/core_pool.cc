#include "sim/core_pool.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "sim/option_keys.h"
#include "sim/validate.h"

namespace asgd::sim {

CorePool::CorePool(int cores) {
  ASGD_CHECK_GE(cores, 0, "CorePool: cores");
  free_at_.assign(static_cast<std::size_t>(cores), Duration::zero());
}

Duration TransportCpu::Cost(int64_t bytes) const {
  return per_message + Duration(static_cast<Duration::rep>(
                           std::llround(static_cast<double>(bytes) * ns_per_byte)));
}

void TransportCpu::Validate() const {
  RequireFinite(keys::kTransportUsPerMessage,
                std::chrono::duration<double, std::micro>(per_message).count(),
                ">= 0 (microseconds)", per_message >= Duration::zero());
  RequireFinite(keys::kTransportNsPerByte, ns_per_byte, "in [0, 1e6] (nanoseconds)",
                ns_per_byte >= 0 && ns_per_byte <= 1e6);
}

Duration CorePool::Run(Duration now, Duration work) {
  if (free_at_.empty()) return now + work;
  // min_element returns the first of equal minima: ties go to the lowest index.
  const auto core = std::min_element(free_at_.begin(), free_at_.end());
  const Duration start = std::max(now, *core);
  waited_ += start - now;
  *core = start + work;
  return *core;
}

}  // namespace asgd::sim
