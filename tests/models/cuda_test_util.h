// Helpers for the CUDA model tests: skipping without a device, and moving test data
// between host vectors and device buffers (synchronously: tests favour clarity).
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "models/cuda/cuda_check.h"
#include "models/cuda/device_memory.h"
#include "models/device.h"

// Skips the current test, naming the reason, unless a CUDA device is usable.
#define ASGD_REQUIRE_CUDA()                                                           \
  do {                                                                                \
    if (::asgd::models::CudaDeviceCount() == 0) {                                     \
      GTEST_SKIP() << "no CUDA device: " << ::asgd::models::CudaUnavailableReason(); \
    }                                                                                 \
  } while (0)

namespace asgd::models::cuda::testing {

// A test that needs a device: skipped without one, else runs on device 0 with a stream.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASGD_REQUIRE_CUDA();
    guard_ = std::make_unique<DeviceGuard>(0);
    stream_ = std::make_unique<OwnedStream>();
  }
  void TearDown() override {
    if (stream_ != nullptr) ASGD_CUDA_CHECK(cudaStreamSynchronize(stream_->get()));
    stream_.reset();
    guard_.reset();
  }
  cudaStream_t stream() const { return stream_->get(); }
  void Sync() const { ASGD_CUDA_CHECK(cudaStreamSynchronize(stream())); }

 private:
  std::unique_ptr<DeviceGuard> guard_;
  std::unique_ptr<OwnedStream> stream_;
};

template <typename T>
DeviceBuffer<T> ToDevice(const std::vector<T>& host) {
  DeviceBuffer<T> d(static_cast<int64_t>(host.size()));
  if (!host.empty()) {
    ASGD_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T),
                               cudaMemcpyHostToDevice));
  }
  return d;
}

// A device buffer of n elements filled with a byte pattern that is a NaN for floats, so
// that an output a kernel forgets to write shows up.
template <typename T>
DeviceBuffer<T> Poisoned(int64_t n) {
  DeviceBuffer<T> d(n);
  if (n > 0) ASGD_CUDA_CHECK(cudaMemset(d.get(), 0xff, static_cast<std::size_t>(n) * sizeof(T)));
  return d;
}

// Copies n elements back after the stream's work is done (the caller synchronises).
template <typename T>
std::vector<T> ToHost(const T* device, int64_t n) {
  std::vector<T> host(static_cast<std::size_t>(n));
  if (n > 0) {
    ASGD_CUDA_CHECK(cudaMemcpy(host.data(), device, host.size() * sizeof(T),
                               cudaMemcpyDeviceToHost));
  }
  return host;
}
template <typename T>
std::vector<T> ToHost(const DeviceBuffer<T>& d) {
  return ToHost(d.get(), d.size());
}

}  // namespace asgd::models::cuda::testing
