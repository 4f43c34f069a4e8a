// Internal to models/cuda/ (and its tests and benchmark): owning handles for device
// memory, pinned host memory, streams and the current device.
//
//   DeviceGuard guard(device);             // the device for the calls in this scope
//   DeviceBuffer<float> d(n);              // cudaMalloc'd n floats, freed by the destructor
//   PinnedBuffer<float> h(n);              // cudaMallocHost'd (page-locked) n floats
//   OwnedStream stream;                    // a non-blocking stream of the current device
//
// Allocation failures throw DeviceError (ASGD_CUDA_CHECK). Destructors never throw: a
// failure to free (e.g. while the driver shuts down) is ignored. Contents are
// uninitialised. Handles are move-only; a moved-from handle is empty.
//
// Allocating or freeing device or pinned memory synchronises the whole device, so the
// models allocate at construction and when a batch is larger than any before, never per
// step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include <cuda_runtime_api.h>

#include "core/check.h"
#include "models/cuda/cuda_check.h"

namespace asgd::models::cuda {

// Makes `device` current for the guard's lifetime and restores the previous one. The
// CUDA models take one at every entry point, so threads that share devices need not
// care which device is current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    ASGD_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) ASGD_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ != device_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

namespace internal {

// Memory from Alloc(bytes), returned with Free(ptr).
template <typename T, cudaError_t (*Alloc)(void**, std::size_t), cudaError_t (*Free)(void*)>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(int64_t count) { Resize(count); }
  ~Buffer() { Release(); }
  Buffer(Buffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      Release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Makes room for exactly count elements, discarding the contents.
  void Resize(int64_t count) {
    ASGD_CHECK_GE(count, 0);
    Release();
    if (count == 0) return;
    void* p = nullptr;
    ASGD_CUDA_CHECK(Alloc(&p, static_cast<std::size_t>(count) * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    size_ = count;
  }
  // Grows to at least count elements (discarding the contents when it grows).
  void Reserve(int64_t count) {
    if (count > size_) Resize(count);
  }

  T* get() const { return ptr_; }
  int64_t size() const { return size_; }
  std::size_t bytes() const { return static_cast<std::size_t>(size_) * sizeof(T); }

 private:
  void Release() {
    if (ptr_ != nullptr) (void)Free(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }

  T* ptr_ = nullptr;
  int64_t size_ = 0;
};

inline cudaError_t DeviceAlloc(void** p, std::size_t bytes) { return cudaMalloc(p, bytes); }
inline cudaError_t DeviceFree(void* p) { return cudaFree(p); }
inline cudaError_t PinnedAlloc(void** p, std::size_t bytes) { return cudaMallocHost(p, bytes); }
inline cudaError_t PinnedFree(void* p) { return cudaFreeHost(p); }

}  // namespace internal

// Device memory of the current device.
template <typename T>
using DeviceBuffer = internal::Buffer<T, internal::DeviceAlloc, internal::DeviceFree>;
// Page-locked host memory: copies from and to it run asynchronously at full bus speed.
template <typename T>
using PinnedBuffer = internal::Buffer<T, internal::PinnedAlloc, internal::PinnedFree>;

// A stream of the current device that does not synchronise with the legacy default
// stream, so several models on one device run concurrently.
// An event without timing (cudaEventDisableTiming), for waiting on part of a stream.
class OwnedEvent {
 public:
  OwnedEvent() { ASGD_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~OwnedEvent() {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;

  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class OwnedStream {
 public:
  OwnedStream() { ASGD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~OwnedStream() {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;

  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace asgd::models::cuda
