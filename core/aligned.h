// Cache-line aligned storage for parameter buffers and batches, so vector loads never
// straddle lines and GPU/host staging copies start on an aligned address.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace asgd {

inline constexpr std::size_t kBufferAlignment = 64;

template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() noexcept = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}  // NOLINT: allocator rebind

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kBufferAlignment}));
  }
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete(p, std::align_val_t{kBufferAlignment});
  }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace asgd
