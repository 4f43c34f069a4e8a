// A Model whose function is a TorchScript module (a PyTorch model saved with
// torch.jit.save): a researcher's own network trained by every asgd strategy.
//
//   TorchScriptOptions options;
//   options.file = "models/resnet20.pt";   // model.file, resolved by experiments/
//   std::unique_ptr<Model> model = NewTorchScriptModel(options, input);
//
// This header includes no libtorch header: only torchscript_model.cc does, and the library
// (asgd_models_torch) links libtorch PRIVATE. It exists only in builds with
// ASGD_HAVE_TORCH = 1; NewModelOn (models/device.h) refuses model.name = torchscript in
// one line in the others.
//
// What the model is:
//   - Parameters: the module's parameters in named_parameters() order, flattened into
//     asgd's flat vector; the ParamLayout's tensor names are the module's names
//     ("fc1.weight", "layer1.0.conv1.weight", ...). Every parameter must be float32, and
//     every one is trained (one saved with requires_grad = False gets its gradient too).
//   - θ₀ (TorchScriptOptions::init): "file", the values stored in the file (Initialize
//     ignores the seed); or "seed", the parameters after every submodule's
//     reset_parameters(), called in named_modules() order (the module itself first) under
//     torch's default CPU generator seeded with Initialize's seed. A scripted module keeps
//     only the methods forward reaches and those exported with @torch.jit.export, so
//     PyTorch's own reset_parameters (not scriptable: torch.nn.init is plain Python) is
//     never in the file: for PyTorch's standard layers (Linear, Bilinear, Conv*d,
//     ConvTranspose*d, BatchNorm*d, SyncBatchNorm, InstanceNorm*d, LayerNorm, GroupNorm,
//     Embedding, EmbeddingBag, RNN, LSTM, GRU and their cells) it is re-implemented here,
//     the same draws in the same order, so the values equal PyTorch's; any other module
//     must carry its own exported TorchScript reset_parameters, which is called (it wins
//     over the table). Either way every worker, shard and process gets the same θ₀ from
//     the same seed. Buffers are not part of θ₀ (each instance keeps the file's).
//   - Forward: the module takes float32 [B, *input_shape] (input_shape from the dataset,
//     e.g. {1, 28, 28}, or TorchScriptOptions::input_shape) and returns logits [B, classes].
//   - Loss: mean softmax cross-entropy over the batch (labels converted to int64), as every
//     asgd model; LossAndGradient runs the module in train() mode (dropout on), Evaluate in
//     eval() mode without autograd.
//   - Random draws (dropout): a module whose train-mode forward draws from torch's
//     generator (found at load) gets it seeded before every LossAndGradient as
//     Model::SeedTraining says, so a step's dropout masks are a function of the seed and
//     the step when one thread computes at a time (the sequential runner, the simulator).
//     The generator is one per process: steps of several threads at once draw from it in
//     turn, each draw new (a seed is used once), but which thread gets which numbers
//     depends on timing.
//   - Errors at a step: a libtorch error in LossAndGradient (after the load-time checks,
//     rare) is an InputError naming model.file and libtorch's first line, without its
//     C++ backtrace.
//   - No copy per step: the module's parameters are views of the params buffer passed in
//     and their .grad views of the grad buffer (re-pointed only when a buffer's address
//     changes); LossAndGradient zeroes grad and backward() accumulates into it.
//   - CPU only, float32 parameters only. Buffers (BatchNorm's running statistics, any
//     dtype) are not in the flat vector: each instance keeps its own, which its training
//     steps update in train() mode. Calibrate recomputes them at the parameters to be
//     evaluated (the cumulative average over the first bn_batches training batches), so
//     an evaluation does not depend on which instance's statistics; SaveAs writes this
//     instance's buffers.
//
// Threads: the first model built (in the thread that then starts the workers) sets
// libtorch's intra-op and inter-op threads to 1 and OpenBLAS's to 1 (LimitTorchThreads),
// so that N workers compute on N cores; each thread that computes sets its own OpenMP
// team size from it on first use.
//
// Thread safety: as every Model, one instance per thread (Clone()); instances share the
// file's bytes and the layout, read-only. Initialize (init = seed) and the load-time check
// have torch's generator to themselves while they use it (steps of modules that draw wait
// for them) and put its state back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/factory.h"
#include "models/model.h"

namespace asgd::models {

struct TorchScriptOptions {
  // The TorchScript file (torch.jit.save); opened as given (experiments/ resolves
  // model.file against the config file's folder). Required.
  std::string file;
  // The shape of one example as the module takes it (without the batch dimension), e.g.
  // {3, 32, 32}; its product must equal the dataset's features. Empty: the dataset's
  // example shape. Default: empty.
  std::vector<int64_t> input_shape;
  // Calibrate recomputes BatchNorm's running statistics from the first bn_batches batches
  // of bn_batch_size examples of the training data (in the data's order; fewer when the
  // data is shorter). Both >= 1. Defaults: 20 and 64.
  int64_t bn_batches = 20;
  int64_t bn_batch_size = 64;
  // Where θ₀ comes from (model.init): "file" (the file's values) or "seed" (every
  // submodule's reset_parameters() under torch's generator seeded with Initialize's
  // seed; see above). Default: "file".
  std::string init = "file";
};

// Loads and checks the module against the input: ConfigError naming model.file (or
// model.input_shape, model.init) and what was expected, on one line, for a missing or
// unreadable file, a file that is not a TorchScript module, a module without parameters,
// with a parameter that is not float32, with a BatchNorm whose momentum cannot be read
// (traced) or is 0, whose forward fails on a batch of input_shape or does not return
// [B, num_classes] floats, in eval() mode or in train() mode (where backward must run
// too); for sparse input, an input_shape whose product is not the dataset's features,
// an init other than file or seed, and init = seed with a parameter no reset_parameters()
// re-initialises or one that fails.
std::unique_ptr<Model> NewTorchScriptModel(const TorchScriptOptions& options,
                                           const InputSpec& input);

// One intra-op and one inter-op thread for libtorch, one thread for OpenBLAS (found at
// run time; nothing when the BLAS is another one). Idempotent; NewTorchScriptModel calls
// it. Call it before starting the threads that compute.
void LimitTorchThreads();

// libtorch's intra-op thread count as the calling thread sees it now (tests): 1 in a
// thread that has computed with a TorchScript model or called LimitTorchThreads; OpenMP's
// default (the cores) in a thread that has done neither.
int TorchThreadsOfThisThread();

}  // namespace asgd::models
