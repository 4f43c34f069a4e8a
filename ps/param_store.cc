#include "ps/param_store.h"

#include <algorithm>

namespace asgd::ps {

void Accumulate(StoreStats& a, const StoreStats& b) {
  a.pushes_applied += b.pushes_applied;
  a.pushes_accepted += b.pushes_accepted;
  a.pushes_dropped += b.pushes_dropped;
  a.pulls += b.pulls;
  a.push_pulls += b.push_pulls;
  a.clocks += b.clocks;
  a.rejected += b.rejected;
  a.records += b.records;
  a.staleness_sum += b.staleness_sum;
  a.staleness_max = std::max(a.staleness_max, b.staleness_max);
}

}  // namespace asgd::ps
