// The only file of asgd that includes libtorch (torch/script.h costs ~20 s to compile).
#include "models/torch/torchscript_model.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/script.h>

#include "core/check.h"
#include "core/error.h"
#include "core/file_util.h"

namespace asgd::models {
namespace {

constexpr const char* kFileKey = "model.file";

// The first line of a libtorch error (its messages carry a C++ backtrace).
std::string FirstLine(const std::exception& e) {
  const c10::Error* ce = dynamic_cast<const c10::Error*>(&e);
  std::string what = ce ? ce->what_without_backtrace() : e.what();
  const std::size_t nl = what.find('\n');
  if (nl != std::string::npos) what.resize(nl);
  return what;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

torch::jit::Module LoadModule(const std::string& bytes) {
  std::istringstream in(bytes);
  return torch::jit::load(in, torch::kCPU);
}

// What every instance shares, read-only.
struct Shared {
  std::string file;
  std::string bytes;                 // the .pt as read
  std::vector<int64_t> input_shape;  // one example, without the batch dimension
  int classes = 0;
  ParamLayout layout;
  std::vector<float> initial;  // θ₀: the file's parameter values, flat
  int64_t bn_batches = 20;
  int64_t bn_batch_size = 64;
};

// A BatchNorm (a submodule with running_mean and running_var buffers) and its momentum:
// the factor of its running average, or nullopt for momentum = None (a cumulative
// average over num_batches_tracked batches).
struct BatchNormRef {
  std::string name;
  torch::jit::Module module;
  std::optional<double> momentum;
};

bool HasOwnBuffer(const torch::jit::Module& m, const std::string& name) {
  for (const auto& b : m.named_buffers(/*recurse=*/false)) {
    if (b.name == name) return true;
  }
  return false;
}

// The BatchNorms of module. Throws std::runtime_error naming one whose momentum cannot be
// read (not a scripted module: a traced BatchNorm keeps it inside its graph) or is 0.
std::vector<BatchNormRef> FindBatchNorms(const torch::jit::Module& module) {
  std::vector<BatchNormRef> out;
  for (const auto& sub : module.named_modules()) {
    const torch::jit::Module& m = sub.value;
    if (!HasOwnBuffer(m, "running_mean") || !HasOwnBuffer(m, "running_var")) continue;
    const std::string name = sub.name.empty() ? "(the module)" : sub.name;
    c10::IValue momentum;
    if (m.type()->hasConstant("momentum")) {
      momentum = m.type()->getConstant("momentum");
    } else if (m.hasattr("momentum")) {
      momentum = m.attr("momentum");
    } else {
      throw std::runtime_error("'" + name +
                               "' has BatchNorm statistics but no momentum (traced? script it "
                               "with torch.jit.script)");
    }
    BatchNormRef ref{sub.name, m, std::nullopt};
    if (!momentum.isNone()) {
      if (!momentum.isDouble() || !(momentum.toDouble() > 0.0)) {
        throw std::runtime_error("'" + name + "' has a BatchNorm momentum that is not > 0");
      }
      ref.momentum = momentum.toDouble();
    }
    out.push_back(std::move(ref));
  }
  return out;
}

// Runs once per thread that computes: OpenMP's team size is a per-thread setting, which
// at::init_num_threads copies from the process-wide at::set_num_threads.
void InitThisThread() {
  thread_local bool done = false;
  if (!done) {
    at::init_num_threads();
    done = true;
  }
}

class TorchScriptModel final : public Model {
 public:
  explicit TorchScriptModel(std::shared_ptr<const Shared> shared)
      : shared_(std::move(shared)), module_(LoadModule(shared_->bytes)) {
    // Every parameter is in the flat vector and trained: one that a module saved with
    // requires_grad = False (frozen in PyTorch) gets its gradient too.
    for (const at::Tensor& p : module_.parameters()) {
      params_.push_back(p);
      params_.back().set_requires_grad(true);
    }
    batch_norms_ = FindBatchNorms(module_);  // checked by NewTorchScriptModel
    ASGD_CHECK_EQ(static_cast<int64_t>(params_.size()),
                  static_cast<int64_t>(shared_->layout.tensors().size()), "parameter tensors");
  }

  std::string Name() const override { return "torchscript"; }
  std::string Source() const override { return std::string(kFileKey) + " = " + shared_->file; }
  std::string Describe() const override {
    return "torchscript " + shared_->file + " input " + ShapeText(shared_->input_shape) + " (" +
           std::to_string(shared_->layout.size()) + " params in " +
           std::to_string(shared_->layout.tensors().size()) + " tensors)";
  }
  const ParamLayout& layout() const override { return shared_->layout; }

  // θ₀ is the file's values, whatever the seed (the same in every worker and process).
  void Initialize(std::span<float> params, uint64_t /*seed*/) const override {
    ASGD_CHECK_EQ(static_cast<int64_t>(params.size()), shared_->layout.size(), "params size");
    std::copy(shared_->initial.begin(), shared_->initial.end(), params.begin());
  }

  float LossAndGradient(std::span<const float> params, const datasets::BatchView& batch,
                        std::span<float> grad) override {
    ASGD_CHECK_EQ(static_cast<int64_t>(grad.size()), shared_->layout.size(), "grad size");
    InitThisThread();
    torch::AutoGradMode grad_mode(true);
    BindParams(params);
    BindGrads(grad);
    std::fill(grad.begin(), grad.end(), 0.0f);
    module_.train();
    try {
      const at::Tensor logits = Forward(batch);
      const at::Tensor loss = at::cross_entropy_loss(logits, Labels(batch));
      loss.backward();
      return loss.item<float>();
    } catch (const c10::Error& e) {
      // libtorch's message spans a C++ backtrace; the load-time checks make this rare.
      throw InputError(std::string(kFileKey) + " " + shared_->file +
                       ": a training step failed: " + FirstLine(e));
    }
  }

  EvalResult Evaluate(std::span<const float> params, const datasets::BatchView& batch) override {
    InitThisThread();
    torch::NoGradGuard no_grad;
    BindParams(params);
    module_.eval();
    const at::Tensor logits = Forward(batch);
    const at::Tensor labels = Labels(batch);
    const at::Tensor losses =
        at::nll_loss(at::log_softmax(logits, 1), labels, {}, at::Reduction::None);
    EvalResult r;
    r.loss_sum = losses.to(at::kDouble).sum().item<double>();
    r.correct = logits.argmax(1).eq(labels).sum().item<int64_t>();
    r.count = batch.size;
    return r;
  }

  // Every BatchNorm's running statistics become the cumulative average (momentum = None
  // semantics: mean of the batch means, mean of the unbiased batch variances) over the
  // first bn_batches batches of bn_batch_size examples of train, computed at params with
  // the BatchNorms in train() mode and everything else in eval() mode (dropout off, so
  // the result is deterministic), without autograd. The module keeps them for Evaluate
  // and SaveAs. A BatchNorm with a momentum m updates r <- r + m (x - r); setting r to
  // the average c of the batches before and rescaling the step by 1 / (m k) gives
  // c_k = c + (x_k - c) / k.
  void Calibrate(std::span<const float> params, const datasets::Dataset& train) override {
    if (batch_norms_.empty()) return;
    InitThisThread();
    torch::NoGradGuard no_grad;
    BindParams(params);
    for (BatchNormRef& bn : batch_norms_) {
      bn.module.attr("running_mean").toTensor().zero_();
      bn.module.attr("running_var").toTensor().fill_(1);
      if (bn.module.hasattr("num_batches_tracked")) {
        bn.module.attr("num_batches_tracked").toTensor().zero_();
      }
    }
    module_.eval();
    for (BatchNormRef& bn : batch_norms_) bn.module.train(true);
    const int64_t b = std::max<int64_t>(1, shared_->bn_batch_size);
    std::vector<at::Tensor> before(2 * batch_norms_.size());
    for (int64_t k = 1; k <= shared_->bn_batches && (k - 1) * b < train.num_examples; ++k) {
      for (std::size_t i = 0; i < batch_norms_.size(); ++i) {
        before[2 * i] = batch_norms_[i].module.attr("running_mean").toTensor().clone();
        before[2 * i + 1] = batch_norms_[i].module.attr("running_var").toTensor().clone();
      }
      const int64_t begin = (k - 1) * b;
      Forward(datasets::ContiguousBatch(train, begin, std::min(b, train.num_examples - begin)));
      for (std::size_t i = 0; i < batch_norms_.size(); ++i) {
        if (!batch_norms_[i].momentum) continue;  // None: the module averages cumulatively
        const double scale = 1.0 / (*batch_norms_[i].momentum * static_cast<double>(k));
        for (int j = 0; j < 2; ++j) {
          at::Tensor r =
              batch_norms_[i].module.attr(j == 0 ? "running_mean" : "running_var").toTensor();
          const at::Tensor& c = before[2 * i + j];
          r.copy_(c + (r - c) * scale);
        }
      }
    }
    module_.eval();
  }

  int64_t num_features() const override {
    int64_t n = 1;
    for (int64_t d : shared_->input_shape) n *= d;
    return n;
  }
  int num_classes() const override { return shared_->classes; }

  std::unique_ptr<Model> Clone() const override {
    return std::make_unique<TorchScriptModel>(shared_);
  }

  bool CanSave() const override { return true; }

  void SaveAs(std::span<const float> params, const std::string& path) const override {
    ASGD_CHECK_EQ(static_cast<int64_t>(params.size()), shared_->layout.size(), "params size");
    torch::NoGradGuard no_grad;
    // A fresh copy of the file's module: this instance's parameters are views of buffers
    // it does not own, which save() must not be handed.
    torch::jit::Module copy = LoadModule(shared_->bytes);
    int64_t offset = 0;
    for (const at::Tensor& p : copy.parameters()) {
      p.view({-1}).copy_(
          at::from_blob(const_cast<float*>(params.data()) + offset, {p.numel()}, at::kFloat));
      offset += p.numel();
    }
    // This instance's buffers (the statistics its last Calibrate computed), in the same
    // order in both copies of the file's module.
    const auto mine = module_.named_buffers();
    const auto theirs = copy.named_buffers();
    auto m = mine.begin();
    for (auto t = theirs.begin(); t != theirs.end() && m != mine.end(); ++t, ++m) {
      (*t).value.copy_((*m).value);
    }
    std::ostringstream out;
    copy.save(out);
    WriteFileAtomic(path, out.str());
  }

 private:
  // Points every parameter at its range of params (only when the address changed).
  void BindParams(std::span<const float> params) {
    ASGD_CHECK_EQ(static_cast<int64_t>(params.size()), shared_->layout.size(), "params size");
    if (params.data() == bound_params_) return;
    // The module only reads its parameters: the const_cast gives libtorch the non-const
    // pointer its tensors hold, nothing writes through it.
    float* base = const_cast<float*>(params.data());
    const std::vector<TensorSpec>& specs = shared_->layout.tensors();
    for (std::size_t i = 0; i < params_.size(); ++i) {
      params_[i].set_data(at::from_blob(base + specs[i].offset, params_[i].sizes(), at::kFloat));
    }
    bound_params_ = params.data();
  }

  // Points every parameter's .grad at its range of grad (only when the address changed):
  // backward() then accumulates in place (autograd adds into a defined .grad).
  void BindGrads(std::span<float> grad) {
    if (grad.data() == bound_grad_) return;
    const std::vector<TensorSpec>& specs = shared_->layout.tensors();
    for (std::size_t i = 0; i < params_.size(); ++i) {
      params_[i].mutable_grad() =
          at::from_blob(grad.data() + specs[i].offset, params_[i].sizes(), at::kFloat);
    }
    bound_grad_ = grad.data();
  }

  at::Tensor Forward(const datasets::BatchView& batch) {
    ASGD_CHECK(!batch.sparse(), "the TorchScript model takes dense batches");
    ASGD_CHECK_EQ(batch.num_features, num_features(), "batch features");
    std::vector<int64_t> shape = {batch.size};
    shape.insert(shape.end(), shared_->input_shape.begin(), shared_->input_shape.end());
    const at::Tensor x = at::from_blob(const_cast<float*>(batch.x), shape, at::kFloat);
    return module_.forward({x}).toTensor();
  }

  at::Tensor Labels(const datasets::BatchView& batch) {
    labels_.assign(batch.labels, batch.labels + batch.size);
    return at::from_blob(labels_.data(), {batch.size}, at::kLong);
  }

  std::shared_ptr<const Shared> shared_;
  torch::jit::Module module_;
  std::vector<at::Tensor> params_;  // the module's parameters, in named_parameters() order
  const float* bound_params_ = nullptr;
  float* bound_grad_ = nullptr;
  std::vector<int64_t> labels_;
  std::vector<BatchNormRef> batch_norms_;  // submodules of module_, this instance's own
};

[[noreturn]] void Refuse(const std::string& file, const std::string& expected) {
  throw ConfigError(kFileKey, file, expected);
}

// Runs the module on zeros of the input's shape, in eval() mode without autograd and in
// train() mode with autograd and a backward pass, as Evaluate and LossAndGradient do, and
// checks that it returns [2, classes] floats in both.
void CheckForward(torch::jit::Module& module, const Shared* s) {
  std::vector<int64_t> shape = {2};
  shape.insert(shape.end(), s->input_shape.begin(), s->input_shape.end());
  const std::string wanted = "a module whose forward maps float32 " + ShapeText(shape) +
                             " (a batch of the data) to logits [2," + std::to_string(s->classes) +
                             "]";
  // One mode's output: a float32 tensor [2, classes], or a refusal saying what it was.
  auto check_output = [&](const c10::IValue& out, const std::string& mode) {
    const std::string where = wanted + " in " + mode + "() mode";
    if (!out.isTensor()) Refuse(s->file, where + "; it returned a " + out.tagKind());
    const at::Tensor t = out.toTensor();
    const std::vector<int64_t> got(t.sizes().begin(), t.sizes().end());
    if (got != std::vector<int64_t>{2, s->classes}) {
      Refuse(s->file, where + "; it returned " + ShapeText(got));
    }
    if (t.scalar_type() != at::kFloat) {
      Refuse(s->file, where + "; it returned " + std::string(c10::toString(t.scalar_type())));
    }
    return t;
  };
  const at::Tensor zeros = at::zeros(shape, at::kFloat);
  {
    torch::NoGradGuard no_grad;
    module.eval();
    c10::IValue out;
    try {
      out = module.forward({zeros});
    } catch (const std::exception& e) {
      Refuse(s->file, wanted + "; forward failed: " + FirstLine(e));
    }
    check_output(out, "eval");
  }
  // A module may return something else when training (auxiliary logits, a tuple): found
  // here, not at the first step. The statistics this updates are the check copy's.
  torch::AutoGradMode grad_mode(true);
  module.train();
  c10::IValue out;
  try {
    out = module.forward({zeros});
  } catch (const std::exception& e) {
    Refuse(s->file,
           wanted + " in train() mode too; forward in train() mode failed: " + FirstLine(e));
  }
  const at::Tensor logits = check_output(out, "train");
  try {
    at::cross_entropy_loss(logits, at::zeros({2}, at::kLong)).backward();
  } catch (const std::exception& e) {
    Refuse(s->file,
           wanted + " whose loss has a gradient; backward in train() mode failed: " + FirstLine(e));
  }
}

}  // namespace

void LimitTorchThreads() {
  static std::once_flag once;
  std::call_once(once, [] {
    at::set_num_threads(1);
    try {
      at::set_num_interop_threads(1);
    } catch (const std::exception&) {
      // Already started (something ran an inter-op task first): it keeps its size.
    }
    // OpenBLAS (when it is the BLAS libtorch loaded) otherwise splits every product over
    // all cores, on top of asgd's worker threads.
    using SetThreads = void (*)(int);
    if (void* f = dlsym(RTLD_DEFAULT, "openblas_set_num_threads")) {
      reinterpret_cast<SetThreads>(f)(1);
    }
  });
  InitThisThread();
}

int TorchThreadsOfThisThread() { return at::get_num_threads(); }

std::unique_ptr<Model> NewTorchScriptModel(const TorchScriptOptions& options,
                                           const InputSpec& input) {
  LimitTorchThreads();
  auto s = std::make_shared<Shared>();
  s->file = options.file;
  s->classes = input.num_classes;
  s->bn_batches = options.bn_batches;
  s->bn_batch_size = options.bn_batch_size;
  if (options.file.empty()) {
    throw ConfigError(kFileKey, "",
                      "the path of a TorchScript file (torch.jit.save) for "
                      "model.name = torchscript");
  }
  if (input.sparse) {
    throw ConfigError("model.name", "torchscript",
                      "dense data for a TorchScript model (sparse LIBSVM data: use logreg)");
  }
  s->input_shape = options.input_shape.empty() ? input.example_shape : options.input_shape;
  int64_t features = 1;
  for (int64_t d : s->input_shape) features *= d > 0 ? d : 0;
  if (features != input.num_features) {
    std::string text;
    for (std::size_t i = 0; i < options.input_shape.size(); ++i) {
      if (i) text += ',';
      text += std::to_string(options.input_shape[i]);
    }
    throw ConfigError("model.input_shape", text,
                      "positive sizes whose product is the data's " +
                          std::to_string(input.num_features) + " features per example");
  }
  if (!IsDirectory(options.file) && FileExists(options.file)) {
    try {
      s->bytes = ReadFile(options.file);
    } catch (const std::exception& e) {
      Refuse(options.file, std::string("a readable TorchScript file (") + e.what() + ")");
    }
  } else {
    Refuse(options.file, "an existing TorchScript file (torch.jit.save); there is none");
  }
  torch::jit::Module module;
  try {
    module = LoadModule(s->bytes);
  } catch (const std::exception& e) {
    Refuse(options.file, "a TorchScript module saved by torch.jit.save (" + FirstLine(e) + ")");
  }
  // Buffers (BatchNorm's running statistics, of any dtype) are each instance's own, not
  // in the flat vector; the BatchNorms must let Calibrate recompute them.
  try {
    FindBatchNorms(module);
  } catch (const std::runtime_error& e) {
    Refuse(options.file, std::string("BatchNorms whose statistics can be recomputed; ") + e.what());
  }
  for (const auto& p : module.named_parameters()) {
    if (p.value.scalar_type() != at::kFloat) {
      Refuse(options.file, "float32 parameters; '" + p.name + "' is " +
                               std::string(c10::toString(p.value.scalar_type())));
    }
    if (p.value.numel() == 0) Refuse(options.file, "non-empty parameters; '" + p.name + "' is");
    std::vector<int64_t> shape(p.value.sizes().begin(), p.value.sizes().end());
    s->layout.Add(p.name, shape);
    const at::Tensor flat = p.value.detach().contiguous().view({-1});
    s->initial.insert(s->initial.end(), flat.data_ptr<float>(),
                      flat.data_ptr<float>() + flat.numel());
  }
  if (s->layout.size() == 0) Refuse(options.file, "a module with parameters; it has none");
  CheckForward(module, s.get());
  return std::make_unique<TorchScriptModel>(std::move(s));
}

}  // namespace asgd::models
