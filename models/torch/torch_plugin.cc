// The entry point of the TorchScript backend's loadable module (libasgd_torch.so).
//
// Loading libtorch costs every process that links it about 0.7 s at start (the libraries'
// relocations and their operator registries) and, from a cold page cache, far more. So
// the `asgd` binary and everything else that only might run a TorchScript model do not
// link it: models/device.cc opens this module with dlopen the first time a config asks
// for model.name = torchscript, and calls the one function below. The module carries its
// own copy of asgd's models, datasets and core code; the Model it returns is used through
// its virtual interface only, and exceptions cross the boundary as the same named types.
#include <memory>

#include "models/torch/torchscript_model.h"

// Returns a new TorchScript model (owned by the caller, deleted through Model's virtual
// destructor) or throws as NewTorchScriptModel. The name and signature are the contract
// with models/device.cc; the module is never unloaded.
extern "C" __attribute__((visibility("default"))) asgd::models::Model* AsgdNewTorchScriptModel(
    const asgd::models::TorchScriptOptions* options, const asgd::models::InputSpec* input) {
  return asgd::models::NewTorchScriptModel(*options, *input).release();
}
