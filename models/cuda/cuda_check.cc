#include "models/cuda/cuda_check.h"

#include <string>
#include <string_view>

#include "core/error.h"

namespace asgd::models::cuda::internal {
namespace {

// The device the failed call went to: every asgd call runs under a DeviceGuard, so it is
// the current device. -1 if even that cannot be asked.
int CurrentDevice() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  return device;
}

[[noreturn]] void Throw(const char* call, const std::string& error, const char* file,
                        int line) {
  const int device = CurrentDevice();
  // Built with append: GCC 12 reports a false -Wrestrict on long operator+ chains.
  std::string msg = "cuda: ";
  msg.append(call);
  msg.append(" failed: ");
  msg.append(error);
  msg.append(" at ");
  msg.append(SourcePath(file));
  msg.append(":");
  msg.append(std::to_string(line));
  msg.append(" on device ");
  msg.append(device >= 0 ? std::to_string(device) : std::string("?"));
  // Calls are macro arguments and may span lines; an error stays one line.
  for (char& c : msg) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  throw DeviceError(msg, device);
}

}  // namespace

const char* SourcePath(const char* file) {
  // ASGD_CUDA_SOURCE_ROOT is the repository's path, defined by models/cuda/CMakeLists.txt.
  constexpr std::string_view root = ASGD_CUDA_SOURCE_ROOT "/";
  const std::string_view path(file);
  if (path.starts_with(root)) return file + root.size();
  // Ninja hands the compiler paths relative to the build folder ("../models/...").
  const char* rest = file;
  while (std::string_view(rest).starts_with("../")) rest += 3;
  return rest;
}

void ThrowCudaError(cudaError_t error, const char* call, const char* file, int line) {
  // Clears the non-sticky last-error state (a sticky error, e.g. a kernel fault, stays).
  (void)cudaGetLastError();
  Throw(call,
        std::string(cudaGetErrorName(error)) + " (" + cudaGetErrorString(error) + ")", file,
        line);
}

void ThrowCublasError(cublasStatus_t status, const char* call, const char* file, int line) {
  Throw(call,
        std::string(cublasGetStatusName(status)) + " (" + cublasGetStatusString(status) + ")",
        file, line);
}

}  // namespace asgd::models::cuda::internal
