// With gradient_hooks.cc, the only files of asgd that include libtorch (torch/script.h
// costs ~20 s to compile).
#include "models/torch/torchscript_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <shared_mutex>
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
#include "core/rng.h"
#include "models/torch/gradient_hooks.h"

namespace asgd::models {
namespace {

constexpr const char* kFileKey = "model.file";
constexpr const char* kInitKey = "model.init";

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
  std::vector<float> initial;  // the file's parameter values, flat (θ₀ for init = file)
  bool init_by_seed = false;   // init = seed
  bool draws = false;          // forward in train() mode draws from torch's generator
  int64_t bn_batches = 20;
  int64_t bn_batch_size = 64;
};

// ---- torch's generator -----------------------------------------------------------------

// libtorch's default CPU generator is one per process, and dropout draws from it (a
// TorchScript graph passes no generator). Whoever needs a run of several draws to be its
// own (θ₀ by seed, the load-time check) holds `use` exclusively; a training step that
// seeds and draws holds it shared, so steps still run at once and only wait for those
// rare holders. glibc's read-write lock lets readers overtake a waiting writer, which
// steps of several threads would do without end: an exclusive holder takes `gate` first,
// and a step passes through it before taking `use`.
struct GeneratorUse {
  std::mutex gate;
  std::shared_mutex use;
};
GeneratorUse& TheGeneratorUse() {
  static GeneratorUse g;
  return g;
}

// For a training step: shares the generator with other steps.
std::shared_lock<std::shared_mutex> ShareGenerator() {
  GeneratorUse& g = TheGeneratorUse();
  std::lock_guard<std::mutex> pass(g.gate);
  return std::shared_lock<std::shared_mutex>(g.use);
}

// The generator alone for the lease's lifetime, put back in the state it was found in.
class GeneratorLease {
 public:
  GeneratorLease()
      : gate_(TheGeneratorUse().gate),
        lock_(TheGeneratorUse().use),
        gen_(at::detail::getDefaultCPUGenerator()),
        saved_(State()) {}
  ~GeneratorLease() {
    std::lock_guard<std::mutex> g(gen_.mutex());
    gen_.set_state(saved_);
  }
  GeneratorLease(const GeneratorLease&) = delete;
  GeneratorLease& operator=(const GeneratorLease&) = delete;

  // As torch.manual_seed(seed) does for the CPU.
  void Seed(uint64_t seed) {
    std::lock_guard<std::mutex> g(gen_.mutex());
    gen_.set_current_seed(seed);
  }
  // Whether anything drew since the lease began (and Seed was not called).
  bool Moved() { return !at::equal(State(), saved_); }

 private:
  at::Tensor State() {
    std::lock_guard<std::mutex> g(gen_.mutex());
    return gen_.get_state();
  }
  std::lock_guard<std::mutex> gate_;
  std::unique_lock<std::shared_mutex> lock_;
  at::Generator gen_;
  at::Tensor saved_;
};

// ---- reset_parameters -------------------------------------------------------------------

// A submodule's constant (scripted from __constants__) or attribute; nullopt: neither.
std::optional<c10::IValue> ConstantOrAttribute(const torch::jit::Module& m,
                                               const std::string& name) {
  if (m.type()->hasConstant(name)) return m.type()->getConstant(name);
  if (m.hasattr(name)) return m.attr(name);
  return std::nullopt;
}

// How a submodule's parameters are re-initialised for init = seed.
enum class Reset {
  kNone,       // not at all (an init = seed module refuses a parameter of it)
  kScripted,   // its own TorchScript method reset_parameters
  kKaiming,    // Linear, Conv*d, ConvTranspose*d
  kBilinear,   // Bilinear
  kAffine,     // BatchNorm*d, SyncBatchNorm, InstanceNorm*d, LayerNorm, GroupNorm
  kEmbedding,  // Embedding, EmbeddingBag
  kRecurrent,  // RNN, LSTM, GRU, RNNCell, LSTMCell, GRUCell
};

// "Conv2d" for a scripted torch.nn.Conv2d (type __torch__.torch.nn.modules.conv.Conv2d,
// or ...conv.___torch_mangle_3.Conv2d when two instances differ in their constants); ""
// for a class that is not torch.nn's.
std::string TorchNnClass(const torch::jit::Module& m) {
  static const std::string kPrefix = "__torch__.torch.nn.modules.";
  const std::string name = m.type()->name() ? m.type()->name()->qualifiedName() : "";
  if (name.rfind(kPrefix, 0) != 0) return "";
  return name.substr(name.rfind('.') + 1);
}

Reset ResetOf(const torch::jit::Module& m) {
  if (m.find_method("reset_parameters")) return Reset::kScripted;
  const std::string c = TorchNnClass(m);
  if (c.empty()) return Reset::kNone;
  if (c == "Linear" || c.rfind("Conv", 0) == 0) return Reset::kKaiming;
  if (c == "Bilinear") return Reset::kBilinear;
  if (c.rfind("BatchNorm", 0) == 0 || c == "SyncBatchNorm" || c.rfind("InstanceNorm", 0) == 0 ||
      c == "LayerNorm" || c == "GroupNorm") {
    return Reset::kAffine;
  }
  if (c == "Embedding" || c == "EmbeddingBag") return Reset::kEmbedding;
  for (const char* r : {"RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"}) {
    if (c == r) return Reset::kRecurrent;
  }
  return Reset::kNone;
}

// m's own parameter `name`, or an undefined tensor (absent, or None as a bias may be).
at::Tensor OwnParameter(const torch::jit::Module& m, const std::string& name) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) {
    if (p.name == name) return p.value;
  }
  return {};
}

// torch.nn.init._calculate_fan_in_and_fan_out's fan_in: size(1) times the receptive field.
int64_t FanIn(const at::Tensor& w) {
  int64_t fan_in = w.dim() >= 2 ? w.size(1) : 0;
  for (int64_t d = 2; d < w.dim(); ++d) fan_in *= w.size(d);
  return fan_in;
}

// PyTorch 1.13's reset_parameters of its standard layers (torch/nn/modules/linear.py,
// conv.py, batchnorm.py, normalization.py, sparse.py, rnn.py), step by step and draw by
// draw from the default generator, in double precision as Python computes the bounds.
// REQUIRES: a NoGradGuard (the parameters are leaves that require grad).
void ResetStandardLayer(Reset kind, const torch::jit::Module& m) {
  const at::Tensor weight = OwnParameter(m, "weight");
  const at::Tensor bias = OwnParameter(m, "bias");
  switch (kind) {
    case Reset::kKaiming: {
      // init.kaiming_uniform_(weight, a=math.sqrt(5)): gain = sqrt(2 / (1 + a^2)),
      // std = gain / sqrt(fan_in), bound = sqrt(3) * std.
      const double fan_in = static_cast<double>(FanIn(weight));
      const double gain = std::sqrt(2.0 / (1 + std::pow(std::sqrt(5.0), 2)));
      const double bound = std::sqrt(3.0) * (gain / std::sqrt(fan_in));
      weight.uniform_(-bound, bound);
      if (bias.defined() && fan_in > 0) {
        const double b = 1 / std::sqrt(fan_in);
        bias.uniform_(-b, b);
      }
      return;
    }
    case Reset::kBilinear: {
      const double bound = 1 / std::sqrt(static_cast<double>(weight.size(1)));
      weight.uniform_(-bound, bound);
      if (bias.defined()) bias.uniform_(-bound, bound);
      return;
    }
    case Reset::kAffine:
      // The running statistics are buffers, not θ₀; those of the instances stay theirs.
      if (weight.defined()) weight.fill_(1);
      if (bias.defined()) bias.zero_();
      return;
    case Reset::kEmbedding: {
      weight.normal_(0, 1);
      const std::optional<c10::IValue> padding = ConstantOrAttribute(m, "padding_idx");
      if (padding && padding->isInt()) weight[padding->toInt()].fill_(0);
      return;
    }
    case Reset::kRecurrent: {
      const std::optional<c10::IValue> hidden = ConstantOrAttribute(m, "hidden_size");
      const int64_t h = hidden && hidden->isInt() ? hidden->toInt() : 0;
      const double stdv = h > 0 ? 1.0 / std::sqrt(static_cast<double>(h)) : 0.0;
      for (const at::Tensor& p : m.parameters(/*recurse=*/false)) p.uniform_(-stdv, stdv);
      return;
    }
    case Reset::kNone:
    case Reset::kScripted:
      return;
  }
}

// Every submodule's reset_parameters, in named_modules() order (the module itself
// first), as `for m in module.modules(): m.reset_parameters()` in PyTorch. Throws what a
// scripted reset_parameters throws, with the submodule's name.
void ResetParameters(torch::jit::Module& module) {
  torch::NoGradGuard no_grad;
  for (const auto& sub : module.named_modules()) {
    const Reset kind = ResetOf(sub.value);
    if (kind != Reset::kScripted) {
      ResetStandardLayer(kind, sub.value);
      continue;
    }
    try {
      sub.value.get_method("reset_parameters")({});
    } catch (const std::exception& e) {
      throw std::runtime_error("reset_parameters() of '" +
                               (sub.name.empty() ? std::string("(the module)") : sub.name) +
                               "' fails: " + FirstLine(e));
    }
  }
}

// θ₀ for init = seed: a fresh copy of the file's module, reset under the generator
// seeded with `seed`, flattened in named_parameters() order into out.
void ParametersFromSeed(const std::string& bytes, uint64_t seed, std::span<float> out) {
  torch::jit::Module copy = LoadModule(bytes);
  {
    GeneratorLease lease;
    lease.Seed(seed);
    ResetParameters(copy);
  }
  std::size_t offset = 0;
  for (const at::Tensor& p : copy.parameters()) {
    const at::Tensor flat = p.detach().contiguous().view({-1});
    ASGD_CHECK_LE(offset + static_cast<std::size_t>(flat.numel()), out.size(), "params size");
    std::copy_n(flat.data_ptr<float>(), flat.numel(),
                out.begin() + static_cast<std::ptrdiff_t>(offset));
    offset += static_cast<std::size_t>(flat.numel());
  }
  ASGD_CHECK_EQ(offset, out.size(), "params size");
}

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
    const std::optional<c10::IValue> momentum = ConstantOrAttribute(m, "momentum");
    if (!momentum) {
      throw std::runtime_error("'" + name +
                               "' has BatchNorm statistics but no momentum (traced? script it "
                               "with torch.jit.script)");
    }
    BatchNormRef ref{sub.name, m, std::nullopt};
    if (!momentum->isNone()) {
      if (!momentum->isDouble() || !(momentum->toDouble() > 0.0)) {
        throw std::runtime_error("'" + name + "' has a BatchNorm momentum that is not > 0");
      }
      ref.momentum = momentum->toDouble();
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

  // init = file: the file's values, whatever the seed; init = seed: a function of the
  // seed only. Either way the same in every worker and process.
  void Initialize(std::span<float> params, uint64_t seed) const override {
    ASGD_CHECK_EQ(static_cast<int64_t>(params.size()), shared_->layout.size(), "params size");
    if (shared_->init_by_seed) {
      ParametersFromSeed(shared_->bytes, seed, params);
    } else {
      std::copy(shared_->initial.begin(), shared_->initial.end(), params.begin());
    }
  }

  void SeedTraining(uint64_t seed, int64_t step) override {
    train_seed_ = seed;
    train_step_ = step;
  }

  float LossAndGradient(std::span<const float> params, const datasets::BatchView& batch,
                        std::span<float> grad) override {
    ASGD_CHECK_EQ(static_cast<int64_t>(grad.size()), shared_->layout.size(), "grad size");
    InitThisThread();
    std::shared_lock<std::shared_mutex> generator_use;
    if (shared_->draws) {
      // A seed is used once (one per step), so steps of threads computing at once, which
      // draw from the one generator in turn, never get the same numbers.
      generator_use = ShareGenerator();
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> g(gen.mutex());
      gen.set_current_seed(DeriveSeed(train_seed_, "step", static_cast<uint64_t>(train_step_)));
    }
    ++train_step_;
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

  // Each parameter's range is reported when autograd has accumulated its gradient into
  // the bound buffer (gradient_hooks.h).
  float LossAndGradientReporting(std::span<const float> params, const datasets::BatchView& batch,
                                 std::span<float> grad, GradientReady& ready) override {
    std::vector<Range> ranges;
    ranges.reserve(params_.size());
    for (const TensorSpec& spec : shared_->layout.tensors()) {
      ranges.push_back({spec.offset, spec.size});
    }
    hooks_.Hook(params_, ranges);
    return hooks_.Run(ready, [&] { return LossAndGradient(params, batch, grad); });
  }

  bool ReportsGradientByLayer() const override { return true; }

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
  GradientHooks hooks_;  // LossAndGradientReporting's reports
  std::vector<int64_t> labels_;
  std::vector<BatchNormRef> batch_norms_;  // submodules of module_, this instance's own
  uint64_t train_seed_ = 0;                // SeedTraining: the draws of the next step
  int64_t train_step_ = 0;
};

[[noreturn]] void Refuse(const std::string& file, const std::string& expected) {
  throw ConfigError(kFileKey, file, expected);
}

// Runs the module on zeros of the input's shape, in eval() mode without autograd and in
// train() mode with autograd and a backward pass, as Evaluate and LossAndGradient do, and
// checks that it returns [2, classes] floats in both. The train() pass holds torch's
// generator (GeneratorLease), leaves it as it was, and sets s->draws if it drew (dropout).
void CheckForward(torch::jit::Module& module, Shared* s) {
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
  GeneratorLease lease;
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
  s->draws = lease.Moved();
}

// init = seed: every parameter must belong to a module that reset_parameters()
// re-initialises, and the resets must run (once, here, with seed 0).
void CheckResets(const Shared& s) {
  torch::jit::Module module = LoadModule(s.bytes);
  for (const auto& sub : module.named_modules()) {
    if (ResetOf(sub.value) != Reset::kNone) continue;
    for (const auto& p : sub.value.named_parameters(/*recurse=*/false)) {
      const std::string owner = sub.name.empty() ? "the module itself" : "'" + sub.name + "'";
      const std::string type =
          sub.value.type()->name() ? sub.value.type()->name()->qualifiedName() : "?";
      throw ConfigError(kInitKey, "seed",
                        "a module whose every parameter a reset_parameters() re-initialises "
                        "(PyTorch's standard layers, or a module's own method exported with "
                        "@torch.jit.export), or model.init = file; parameter '" +
                            (sub.name.empty() ? p.name : sub.name + "." + p.name) + "' of " +
                            s.file + " belongs to " + owner + " (" + type + "), which has none");
    }
  }
  std::vector<float> scratch(static_cast<std::size_t>(s.layout.size()));
  try {
    ParametersFromSeed(s.bytes, 0, scratch);
  } catch (const std::runtime_error& e) {
    throw ConfigError(kInitKey, "seed",
                      "a module whose reset_parameters() run, or model.init = file; in " + s.file +
                          ", " + e.what());
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
  if (options.init != "file" && options.init != "seed") {
    throw ConfigError(kInitKey, options.init,
                      "file (the initial parameters are the values in model.file) or seed (every "
                      "submodule's reset_parameters() under torch's generator seeded from "
                      "experiment.seed)");
  }
  s->init_by_seed = options.init == "seed";
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
  if (s->init_by_seed) CheckResets(*s);
  return std::make_unique<TorchScriptModel>(std::move(s));
}

}  // namespace asgd::models
