// Memory hints for the large buffers a dataset occupies.
#pragma once

#include <cstddef>

namespace asgd::datasets {

// Asks the kernel to back the 2 MiB-aligned part of [data, data + bytes) with transparent
// huge pages. Call it on freshly reserved, untouched memory (e.g. after
// vector::reserve): first-touch page faults then cost one per 2 MiB instead of one per
// 4 KiB, and random row gathers miss the TLB far less. A no-op where unsupported.
void AdviseHugePages(void* data, std::size_t bytes);

}  // namespace asgd::datasets
