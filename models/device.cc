#include "models/device.h"

#include <charconv>
#include <string>
#include <variant>
#include <vector>

#include "core/build_config.h"
#include "core/error.h"

#if ASGD_HAVE_CUDA
#include "models/cuda/factory.h"
#endif
#if ASGD_HAVE_TORCH
#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "models/torch/torchscript_model.h"
#endif

namespace asgd::models {
namespace {

constexpr std::string_view kCudaPrefix = "cuda:";

[[noreturn]] void ThrowBadSpec(const std::string& spec) {
  throw ConfigError(std::string(kDeviceKey), spec,
                    "cpu, cuda or cuda:N with N a CUDA device index (0, 1, ...)");
}

// Throws unless device is usable here; `spec` is what the user wrote.
void CheckAvailable(const Device& device, const std::string& spec) {
  if (!device.is_cuda()) return;
  const int count = CudaDeviceCount();
  if (count == 0) {
    throw ConfigError(std::string(kDeviceKey), spec,
                      "cpu: CUDA is not available (" + CudaUnavailableReason() + ")");
  }
  if (device.index < 0 || device.index >= count) {
    throw ConfigError(std::string(kDeviceKey), spec,
                      count == 1 ? std::string("cpu or cuda:0 (1 CUDA device here)")
                                 : "cpu or cuda:0 ... cuda:" + std::to_string(count - 1) + " (" +
                                       std::to_string(count) + " CUDA devices here)");
  }
}

}  // namespace

std::string Device::ToString() const {
  return is_cuda() ? std::string(kCudaPrefix) + std::to_string(index) : std::string("cpu");
}

Device ParseDevice(const std::string& spec) {
  if (spec == "cpu") return {Device::Kind::kCpu, 0};
  if (spec == "cuda") return {Device::Kind::kCuda, 0};
  const std::string_view s(spec);
  if (!s.starts_with(kCudaPrefix)) ThrowBadSpec(spec);
  const std::string_view digits = s.substr(kCudaPrefix.size());
  // Digits only: from_chars alone would accept a sign.
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    ThrowBadSpec(spec);
  }
  int index = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (error != std::errc() || end != digits.data() + digits.size()) ThrowBadSpec(spec);
  return {Device::Kind::kCuda, index};
}

Device ResolveDevice(const std::string& spec) {
  const Device device = ParseDevice(spec);
  CheckAvailable(device, spec);
  return device;
}

int CudaDeviceCount() {
#if ASGD_HAVE_CUDA
  return cuda::DeviceCount();
#else
  return 0;
#endif
}

std::string CudaUnavailableReason() {
#if ASGD_HAVE_CUDA
  return cuda::UnavailableReason();
#else
  return "this build of asgd has no CUDA support (configured with -DASGD_CUDA=OFF or "
         "without nvcc)";
#endif
}

namespace {

#if ASGD_HAVE_TORCH
// The TorchScript backend lives in a module of its own (models/torch/torch_plugin.cc says
// why), opened once per process: first beside the running binary, then where the build
// put it.
using TorchEntry = Model* (*)(const TorchScriptOptions*, const InputSpec*);

TorchEntry TorchModuleEntry() {
  static std::once_flag once;
  static TorchEntry entry = nullptr;
  static std::string error;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) candidates.push_back((self.parent_path() / "libasgd_torch.so").string());
    candidates.push_back(ASGD_TORCH_MODULE);
    for (const std::string& path : candidates) {
      if (::access(path.c_str(), R_OK) != 0) continue;
      void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        error = path + ": " + ::dlerror();
        return;
      }
      entry = reinterpret_cast<TorchEntry>(::dlsym(handle, "AsgdNewTorchScriptModel"));
      if (entry == nullptr) error = path + ": no AsgdNewTorchScriptModel in it";
      return;
    }
    error = "libasgd_torch.so is neither beside this binary nor at " +
            std::string(ASGD_TORCH_MODULE);
  });
  if (entry == nullptr) {
    throw ConfigError("model.name", "torchscript",
                      "a loadable TorchScript backend (" + error +
                          "; rebuild asgd, or keep libasgd_torch.so beside it)");
  }
  return entry;
}
#endif

// `spec` is the user's text for the device, for the messages.
// model.name = torchscript: the module of options.file, on the CPU only.
std::unique_ptr<Model> NewTorchScriptModelOn(const ModelOptions& options, const InputSpec& input,
                                             const Device& device, const std::string& spec) {
  if (device.is_cuda()) {
    throw ConfigError(std::string(kDeviceKey), spec,
                      "cpu for model.name = torchscript (the TorchScript backend runs on the "
                      "CPU only)");
  }
#if ASGD_HAVE_TORCH
  TorchScriptOptions torch_options;
  torch_options.file = options.file;
  torch_options.input_shape = options.input_shape;
  torch_options.init = options.init;
  torch_options.bn_batches = options.bn_batches;
  torch_options.bn_batch_size = options.bn_batch_size;
  return std::unique_ptr<Model>(TorchModuleEntry()(&torch_options, &input));
#else
  (void)input;
  throw ConfigError("model.name", options.name,
                    "softmax, mlp, cnn or logreg: this build of asgd has no TorchScript backend "
                    "(built without libtorch; Debian: libtorch-dev)");
#endif
}

std::unique_ptr<Model> NewModelOnDevice(const ModelOptions& options, const InputSpec& input,
                                        const Device& device, const std::string& spec) {
  if (options.name == kTorchScriptName) return NewTorchScriptModelOn(options, input, device, spec);
  const Architecture architecture = ResolveArchitecture(options, input);
  if (!device.is_cuda()) return NewCpuModel(architecture);
  CheckAvailable(device, spec);
  // std::visit over an overload set: an architecture added without a CUDA answer is a
  // compile error here.
  struct Make {
    const ModelOptions& options;
    const Device& device;
    const std::string& spec;
    std::unique_ptr<Model> operator()(const LogRegArchitecture&) const {
      throw ConfigError(std::string(kDeviceKey), spec,
                        "cpu for model.name = " + options.name +
                            " (sparse logistic regression has no CUDA implementation)");
    }
#if ASGD_HAVE_CUDA
    std::unique_ptr<Model> operator()(const MlpArchitecture& a) const {
      return cuda::NewCudaMlpModel(a, device.index);
    }
    std::unique_ptr<Model> operator()(const CnnArchitecture& a) const {
      return cuda::NewCudaCnnModel(a, device.index);
    }
#else
    // CheckAvailable refuses every CUDA device in a build without CUDA.
    std::unique_ptr<Model> operator()(const MlpArchitecture&) const { return Refuse(); }
    std::unique_ptr<Model> operator()(const CnnArchitecture&) const { return Refuse(); }
    std::unique_ptr<Model> Refuse() const {
      (void)device;
      throw ConfigError(std::string(kDeviceKey), spec, "cpu");
    }
#endif
  };
  return std::visit(Make{options, device, spec}, architecture);
}

}  // namespace

std::unique_ptr<Model> NewModelOn(const ModelOptions& options, const InputSpec& input,
                                  const std::string& device) {
  return NewModelOnDevice(options, input, ParseDevice(device), device);
}

std::unique_ptr<Model> NewModelOn(const ModelOptions& options, const InputSpec& input,
                                  const Device& device) {
  return NewModelOnDevice(options, input, device, device.ToString());
}

}  // namespace asgd::models
