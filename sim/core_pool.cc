#include "sim/core_pool.h"

#include <algorithm>

#include "core/check.h"

namespace asgd::sim {

CorePool::CorePool(int cores) {
  ASGD_CHECK_GE(cores, 0, "CorePool: cores");
  free_at_.assign(static_cast<std::size_t>(cores), Duration::zero());
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
