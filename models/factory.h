// Creating a model by name from options and the shape of the data.
//
//   ModelOptions options;            // defaults: mlp 256-256 relu
//   options.name = "cnn";
//   std::unique_ptr<Model> model = NewModel(options, input);
//
// NewModel validates the options against the input once and throws ConfigError naming the
// offending key ("model.name", "model.hidden", "model.activation", "model.cnn_channels",
// "model.cnn_fc", "model.cnn_kernel"), its value and what would have been accepted.
// Only the options of the chosen model are looked at.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "models/architecture.h"
#include "models/model.h"

namespace asgd::models {

struct ModelOptions {
  // Which model (config key model.name):
  //   "softmax"  softmax (multinomial logistic) regression: one dense layer to the classes
  //   "mlp"      multilayer perceptron: `hidden` layers with `activation`, then the classes
  //   "cnn"      LeNet-5-style network (image input; see CnnArchitecture in
  //              models/architecture.h)
  //   "logreg"   binary logistic regression on sparse (LIBSVM) input
  //   "torchscript"  a PyTorch module from `file` (models/torch/torchscript_model.h); only
  //              NewModelOn builds it, on the CPU, in builds with ASGD_HAVE_TORCH = 1
  // Default: "mlp".
  std::string name = "mlp";

  // mlp: sizes of the hidden layers, input side first; at least one, each > 0 (units).
  // Default: {256, 256}, i.e. 784-256-256-10 on MNIST.
  std::vector<int64_t> hidden = {256, 256};

  // mlp and cnn: nonlinearity after every hidden layer: "relu" | "tanh" | "sigmoid".
  // Also picks the initialisation (He for relu, Glorot otherwise). Default: "relu".
  std::string activation = "relu";

  // cnn: output channels of the convolution blocks (conv → activation → 2×2 max-pool),
  // one entry per block, each > 0. Default: {6, 16} (LeNet-5).
  std::vector<int64_t> cnn_channels = {6, 16};

  // cnn: sizes of the fully connected hidden layers after the convolutions, each > 0;
  // may be empty (the flattened features go straight to the classes). Default: {120, 84}.
  std::vector<int64_t> cnn_fc = {120, 84};

  // cnn: side of the square convolution kernels, odd and > 0 (pixels). Default: 5.
  int64_t cnn_kernel = 5;

  // torchscript (built by NewModelOn in models/device.h, not by NewModel): the TorchScript
  // file (torch.jit.save), opened as given; experiments/ resolves model.file against the
  // config file's folder. Default: empty.
  std::string file;

  // torchscript: the shape of one example as the module takes it, without the batch
  // dimension (e.g. {3, 32, 32}); its product must be the data's features. Empty: the
  // dataset's example shape. Default: empty.
  std::vector<int64_t> input_shape;

  // torchscript: the initial parameters θ₀ (TorchScriptOptions::init): "file" (the values
  // stored in the file, whatever the seed) or "seed" (every submodule's reset_parameters()
  // under torch's generator seeded from the run's seed). asgd's own models always draw θ₀
  // from the seed. Default: "file".
  std::string init = "file";

  // torchscript: BatchNorm statistics are recomputed before each evaluation from the first
  // bn_batches batches of bn_batch_size training examples (TorchScriptOptions). Defaults:
  // 20 and 64 (experiments/ sets bn_batch_size to algorithm.batch_size).
  int64_t bn_batches = 20;
  int64_t bn_batch_size = 64;
};

// What the model will be fed: the training data's shape (see datasets::Dataset).
struct InputSpec {
  // Shape of one example: {channels, height, width} or {height, width} for images
  // (cnn needs one of these), {num_features} otherwise.
  std::vector<int64_t> example_shape;
  // Features per example (dense columns or the sparse feature dimension); > 0.
  int64_t num_features = 0;
  // Number of classes, labels in [0, num_classes); >= 2.
  int num_classes = 0;
  // True for sparse (CSR, LIBSVM) data. Only logreg takes it, and logreg takes only it.
  bool sparse = false;
};

// A new CPU model. Throws ConfigError for options that do not fit (unknown name, bad
// sizes, unknown activation, a cnn on non-image input, logreg on dense data or on more
// than 2 classes, a dense model on sparse data); throws InvariantError for an InputSpec
// that no dataset could have (num_features <= 0, num_classes < 2).
std::unique_ptr<Model> NewModel(const ModelOptions& options, const InputSpec& input);

// The architecture that options describe for this input: the model NewModel builds,
// without building it. Implementations on other devices (NewModelOn in models/device.h)
// start from it, so every device accepts and refuses exactly the same options.
// Throws as NewModel.
using Architecture = std::variant<MlpArchitecture, CnnArchitecture, LogRegArchitecture>;
Architecture ResolveArchitecture(const ModelOptions& options, const InputSpec& input);

// A new CPU model of a resolved architecture (InvariantError for one that
// ResolveArchitecture would not return).
std::unique_ptr<Model> NewCpuModel(const Architecture& architecture);

// The accepted values of ModelOptions::name: softmax, mlp, cnn, logreg.
std::vector<std::string> ModelNames();

}  // namespace asgd::models
