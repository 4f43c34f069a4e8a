// Where a model computes: device specs ("cpu", "cuda", "cuda:N"), CUDA device discovery,
// and NewModelOn, which builds the CPU or the CUDA model of a configuration. Plain C++:
// no CUDA header, and the same API in builds with and without CUDA (without it,
// CudaDeviceCount() is 0 and every "cuda" spec is refused with the reason).
//
//   // experiments/: [model] device = cuda:1
//   const Device device = ResolveDevice(config_value);          // ConfigError if unusable
//   std::unique_ptr<Model> model = NewModelOn(options, input, device);
//
// Errors are ConfigErrors naming the key "model.device" (kDeviceKey) and the value, on
// one line, so the CLI reports them like any other bad config value.
//
// GPU sharing: several workers (threads or processes) may place models on one device;
// each CUDA model owns its stream, cuBLAS handle and buffers (models/cuda/factory.h).
// Memory is the limit: each instance holds 2 × the parameters on the device plus scratch
// for its largest batch.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "models/factory.h"
#include "models/model.h"

namespace asgd::models {

// The config key device specs are errors about.
inline constexpr std::string_view kDeviceKey = "model.device";
// ModelOptions::name of the TorchScript model, which only NewModelOn builds.
inline constexpr std::string_view kTorchScriptName = "torchscript";

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // CUDA device ordinal for kCuda; 0 for the CPU

  bool is_cuda() const { return kind == Kind::kCuda; }
  // "cpu", "cuda:0": the canonical spec (ParseDevice(d.ToString()) == d).
  std::string ToString() const;
  bool operator==(const Device&) const = default;
};

// The syntax only: "cpu"; "cuda" (= cuda:0); "cuda:N" with N decimal digits (no sign,
// no spaces). Throws ConfigError(model.device) for anything else ("gpu", "cuda:x",
// "cuda:-1", "CUDA", ""). Does not look at the hardware, so a process without a GPU can
// validate the configs of workers that will run where there is one.
Device ParseDevice(const std::string& spec);

// ParseDevice, then checks that the device is usable in this process: ConfigError
// (model.device) with a one-line reason for a CUDA spec in a build without CUDA or on a
// machine without a usable device, and for cuda:N with N >= CudaDeviceCount().
Device ResolveDevice(const std::string& spec);

// The number of usable CUDA devices: 0 in a build without CUDA, without a driver (or with
// one too old for this runtime), without a device, or on any CUDA error. Cached.
int CudaDeviceCount();
// Why CudaDeviceCount() is 0, in one line; "" when it is not.
std::string CudaUnavailableReason();

// A new model for options and input on a device. "cpu" gives exactly NewModel's model;
// "cuda[:N]" the CUDA model of the same architecture (same layout, initial values and,
// up to float rounding, the same loss and gradient). Throws ConfigError as NewModel and
// ResolveDevice, ConfigError(model.device) for a model without a CUDA implementation
// (logreg, torchscript), DeviceError when the device fails while the model is being set up.
// model.name = torchscript: the module of options.file (models/torch/torchscript_model.h),
// whose ConfigErrors name model.file; in a build without libtorch (ASGD_HAVE_TORCH = 0),
// ConfigError(model.name) saying so on one line.
std::unique_ptr<Model> NewModelOn(const ModelOptions& options, const InputSpec& input,
                                  const std::string& device);
// As above with a device from ResolveDevice (checked again: ConfigError if unusable).
std::unique_ptr<Model> NewModelOn(const ModelOptions& options, const InputSpec& input,
                                  const Device& device);

}  // namespace asgd::models
