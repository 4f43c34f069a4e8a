#include "models/architecture.h"

#include <cmath>
#include <sstream>
#include <string>

#include "core/check.h"
#include "core/rng.h"

namespace asgd::models {

std::string_view ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kRelu:
      return "relu";
    case Activation::kTanh:
      return "tanh";
    case Activation::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

std::optional<Activation> ParseActivation(std::string_view name) {
  for (Activation a : {Activation::kRelu, Activation::kTanh, Activation::kSigmoid}) {
    if (ActivationName(a) == name) return a;
  }
  return std::nullopt;
}

void InitializeParams(const ParamSpec& spec, std::span<float> params, uint64_t seed) {
  const auto& tensors = spec.layout.tensors();
  ASGD_CHECK_EQ(static_cast<int64_t>(params.size()), spec.layout.size(), "params vs layout");
  ASGD_CHECK_EQ(spec.init.size(), tensors.size(), "one init rule per tensor");
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    std::span<float> v = spec.layout.View(params, static_cast<int>(t));
    const TensorInit& init = spec.init[t];
    // One generator per tensor, keyed by its name: changing one layer's size does not
    // change the initial values of the others.
    Rng rng(DeriveSeed(seed, "init." + tensors[t].name));
    switch (init.rule) {
      case InitRule::kZeros:
        for (float& x : v) x = 0.0f;
        break;
      case InitRule::kHeNormal: {
        ASGD_CHECK_GT(init.fan_in, 0, tensors[t].name);
        const double stddev = std::sqrt(2.0 / static_cast<double>(init.fan_in));
        for (float& x : v) x = static_cast<float>(rng.Normal() * stddev);
        break;
      }
      case InitRule::kGlorotUniform: {
        ASGD_CHECK_GT(init.fan_in + init.fan_out, 0, tensors[t].name);
        const double a = std::sqrt(6.0 / static_cast<double>(init.fan_in + init.fan_out));
        for (float& x : v) x = static_cast<float>(rng.Uniform(-a, a));
        break;
      }
    }
  }
}

namespace {

// Adds "fc<index>" with He init when a ReLU follows it, Glorot otherwise.
void AddDense(ParamSpec* spec, int index, int64_t in, int64_t out, bool relu_follows) {
  const std::string name = "fc" + std::to_string(index);
  spec->layout.Add(name + ".weight", {in, out});
  spec->init.push_back(
      {relu_follows ? InitRule::kHeNormal : InitRule::kGlorotUniform, in, out});
  spec->layout.Add(name + ".bias", {out});
  spec->init.push_back({InitRule::kZeros, in, out});
}

// Hidden layers sizes[0..n-1] after `inputs`, then the output layer to classes.
void AddDenseStack(ParamSpec* spec, int64_t inputs, const std::vector<int64_t>& hidden,
                   Activation activation, int classes) {
  int64_t in = inputs;
  int index = 1;
  for (int64_t h : hidden) {
    AddDense(spec, index++, in, h, activation == Activation::kRelu);
    in = h;
  }
  AddDense(spec, index, in, classes, /*relu_follows=*/false);
}

}  // namespace

ParamSpec MlpParams(const MlpArchitecture& arch) {
  ASGD_CHECK_GT(arch.inputs, 0);
  ASGD_CHECK_GT(arch.classes, 0);
  ParamSpec spec;
  AddDenseStack(&spec, arch.inputs, arch.hidden, arch.activation, arch.classes);
  return spec;
}

std::string DescribeMlp(const MlpArchitecture& arch) {
  std::ostringstream os;
  os << (arch.hidden.empty() ? "softmax" : "mlp") << ' ' << arch.inputs;
  for (int64_t h : arch.hidden) os << '-' << h;
  os << '-' << arch.classes;
  if (!arch.hidden.empty()) os << ' ' << ActivationName(arch.activation);
  os << " (" << MlpParams(arch).layout.size() << " params)";
  return os.str();
}

std::string CnnArchitectureProblem(const CnnArchitecture& arch) {
  if (arch.in_channels <= 0 || arch.height <= 0 || arch.width <= 0) return "empty input image";
  if (arch.channels.empty()) return "no convolution block";
  if (arch.kernel <= 0 || arch.kernel % 2 == 0) return "the kernel size must be odd and positive";
  int64_t h = arch.height, w = arch.width;
  for (std::size_t b = 0; b < arch.channels.size(); ++b) {
    if (arch.channels[b] <= 0) return "a convolution has no output channels";
    if (b > 0) {
      h -= arch.kernel - 1;
      w -= arch.kernel - 1;
    }
    h /= 2;
    w /= 2;
    if (h <= 0 || w <= 0) {
      return "the image shrinks to nothing in convolution block " + std::to_string(b + 1);
    }
  }
  for (int64_t f : arch.fc) {
    if (f <= 0) return "a fully connected layer has no units";
  }
  if (arch.classes <= 0) return "no classes";
  return "";
}

std::vector<ConvBlockShape> CnnBlocks(const CnnArchitecture& arch) {
  const std::string problem = CnnArchitectureProblem(arch);
  ASGD_CHECK(problem.empty(), problem);
  std::vector<ConvBlockShape> blocks;
  int64_t c = arch.in_channels, h = arch.height, w = arch.width;
  for (std::size_t b = 0; b < arch.channels.size(); ++b) {
    ConvBlockShape s;
    s.in_channels = c;
    s.in_height = h;
    s.in_width = w;
    s.out_channels = arch.channels[b];
    s.kernel = arch.kernel;
    s.pad = b == 0 ? arch.kernel / 2 : 0;
    s.conv_height = h + 2 * s.pad - arch.kernel + 1;
    s.conv_width = w + 2 * s.pad - arch.kernel + 1;
    s.pool_height = s.conv_height / 2;
    s.pool_width = s.conv_width / 2;
    blocks.push_back(s);
    c = s.out_channels;
    h = s.pool_height;
    w = s.pool_width;
  }
  return blocks;
}

ParamSpec CnnParams(const CnnArchitecture& arch) {
  const std::vector<ConvBlockShape> blocks = CnnBlocks(arch);
  const bool relu = arch.activation == Activation::kRelu;
  ParamSpec spec;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const ConvBlockShape& s = blocks[b];
    const std::string name = "conv" + std::to_string(b + 1);
    const int64_t k2 = s.kernel * s.kernel;
    const int64_t fan_in = s.in_channels * k2, fan_out = s.out_channels * k2;
    spec.layout.Add(name + ".weight", {s.out_channels, s.in_channels, s.kernel, s.kernel});
    spec.init.push_back(
        {relu ? InitRule::kHeNormal : InitRule::kGlorotUniform, fan_in, fan_out});
    spec.layout.Add(name + ".bias", {s.out_channels});
    spec.init.push_back({InitRule::kZeros, fan_in, fan_out});
  }
  const ConvBlockShape& last = blocks.back();
  const int64_t flat = last.out_channels * last.pool_height * last.pool_width;
  AddDenseStack(&spec, flat, arch.fc, arch.activation, arch.classes);
  return spec;
}

std::string DescribeCnn(const CnnArchitecture& arch) {
  std::ostringstream os;
  os << "cnn " << arch.in_channels << 'x' << arch.height << 'x' << arch.width << " conv"
     << arch.kernel << 'x' << arch.kernel << ' ';
  for (std::size_t i = 0; i < arch.channels.size(); ++i) os << (i ? "-" : "") << arch.channels[i];
  os << " fc ";
  for (int64_t f : arch.fc) os << f << '-';
  os << arch.classes << ' ' << ActivationName(arch.activation) << " ("
     << CnnParams(arch).layout.size() << " params)";
  return os.str();
}

ParamSpec LogRegParams(const LogRegArchitecture& arch) {
  ASGD_CHECK_GT(arch.features, 0);
  ParamSpec spec;
  AddDense(&spec, 1, arch.features, 1, /*relu_follows=*/false);
  return spec;
}

}  // namespace asgd::models
