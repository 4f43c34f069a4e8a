// Architectures of the models: their parameter layouts and initialisation, without any
// arithmetic. This is the single source of truth that every implementation of a model
// (the CPU models in this folder, the CUDA models in models/cuda/) builds its flat
// parameter vector from, so that a buffer written by one is read correctly by the other.
//
// Conventions (all models):
//   * Every tensor is row-major. A layer's tensors are "<layer>.weight" then
//     "<layer>.bias", layers in forward order, packed without padding (ParamLayout).
//   * Fully connected layer "fcN": weight [in, out], bias [out]; y = x·W + b for a row
//     vector x. Fully connected layers are numbered fc1, fc2, ... from the input; the last
//     one produces the logits.
//   * Convolution "convN": weight [out_c, in_c, kh, kw], bias [out_c]; cross-correlation
//     (no kernel flip), stride 1: y[o][i][j] = b[o] + Σ_{c,u,v} W[o][c][u][v] ·
//     x[c][i+u−pad][j+v−pad], with zero padding.
//   * Images are [channels, height, width] per example (NCHW for a batch), as the
//     datasets store them. A convolution stack is flattened to the first fully connected
//     layer in (channel, row, column) order, i.e. index c·H·W + i·W + j.
//
// Initialisation (InitializeParams): each tensor draws from its own generator
// Rng(DeriveSeed(seed, "init." + tensor name)) (core/rng.h), element by element in
// row-major order, and the float is static_cast<float>(the double drawn):
//   kHeNormal       weight = Normal() · sqrt(2 / fan_in)        (layer followed by ReLU)
//   kGlorotUniform  weight = Uniform(−a, a), a = sqrt(6 / (fan_in + fan_out))
//                   (layer followed by tanh or sigmoid, and every output layer)
//   kZeros          0, no draws (all biases)
// fan_in / fan_out: dense [in, out] → in, out; conv [o, c, kh, kw] → c·kh·kw, o·kh·kw.
//
// Thread safety: everything here is a pure function of its arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/param_layout.h"

namespace asgd::models {

// Hidden-layer nonlinearity.
enum class Activation { kRelu, kTanh, kSigmoid };

std::string_view ActivationName(Activation activation);  // "relu", "tanh", "sigmoid"
std::optional<Activation> ParseActivation(std::string_view name);

enum class InitRule { kZeros, kHeNormal, kGlorotUniform };

struct TensorInit {
  InitRule rule = InitRule::kZeros;
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};

// A model's flat parameter vector: the layout and, per tensor (same index), its
// initialisation.
struct ParamSpec {
  ParamLayout layout;
  std::vector<TensorInit> init;
};

// Fills params (spec.layout.size() floats) as described at the top of this file.
// REQUIRES: params.size() == spec.layout.size(); spec.init.size() == number of tensors.
void InitializeParams(const ParamSpec& spec, std::span<float> params, uint64_t seed);

// Softmax regression (hidden empty) and the multilayer perceptron:
//   fc1 … fcK hidden layers (each followed by the activation), fc(K+1) → classes logits.
// Tensors: fc1.weight [inputs, hidden[0]], fc1.bias [hidden[0]], …,
//          fc(K+1).weight [hidden[K−1], classes], fc(K+1).bias [classes].
// e.g. 784-256-256-10: 269322 parameters; softmax 784-10: 7850.
struct MlpArchitecture {
  int64_t inputs = 0;
  std::vector<int64_t> hidden;  // empty: softmax regression
  Activation activation = Activation::kRelu;
  int classes = 0;
};
ParamSpec MlpParams(const MlpArchitecture& arch);
// "mlp 784-256-256-10 relu (269322 params)", "softmax 784-10 (7850 params)": what
// Model::Describe() says for this architecture on any device.
std::string DescribeMlp(const MlpArchitecture& arch);

// LeNet-5-style convolutional network. Block n (n = 1 … channels.size()):
//   convN (kernel × kernel, stride 1) → activation → max-pool 2×2, stride 2, floor
// Block 1 uses 'same' zero padding (kernel / 2 on each side; kernel is odd), later blocks
// 'valid' (no padding): on 1×28×28 input with the defaults this is the classic LeNet-5
// (28 → 28 → 14 → 10 → 5, as the original's valid convolution on 32×32 input).
// Then the output of the last block is flattened in (c, i, j) order and followed by the
// fully connected layers fc1 … fcM (sizes fc, each followed by the activation) and
// fc(M+1) → classes logits.
// Tensors: conv1.weight [channels[0], in_channels, k, k], conv1.bias [channels[0]],
//          conv2.weight [channels[1], channels[0], k, k], …, then fc1.weight [flat, fc[0]],
//          fc1.bias, …, fc(M+1).weight [fc[M−1], classes], fc(M+1).bias [classes].
// The defaults on 1×28×28 with 10 classes: 61706 parameters.
struct CnnArchitecture {
  int64_t in_channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  std::vector<int64_t> channels = {6, 16};
  std::vector<int64_t> fc = {120, 84};
  int64_t kernel = 5;
  Activation activation = Activation::kRelu;
  int classes = 10;
};

// Geometry of one convolution block, derived from a CnnArchitecture.
struct ConvBlockShape {
  int64_t in_channels, in_height, in_width;
  int64_t out_channels;
  int64_t kernel, pad;
  int64_t conv_height, conv_width;  // convolution output = pooling input
  int64_t pool_height, pool_width;  // pooling output
};
// The blocks in order. Throws InvariantError if a block's output would be empty; the
// factory checks this first and reports a ConfigError.
std::vector<ConvBlockShape> CnnBlocks(const CnnArchitecture& arch);
// Features the last block hands to the fully connected layers (out_c · ph · pw).
inline int64_t CnnFlatFeatures(const std::vector<ConvBlockShape>& blocks) {
  const ConvBlockShape& s = blocks.back();
  return s.out_channels * s.pool_height * s.pool_width;
}
// Returns the problem as text ("the image shrinks to 0x0 at block 3") or "" if the
// architecture is well formed.
std::string CnnArchitectureProblem(const CnnArchitecture& arch);
ParamSpec CnnParams(const CnnArchitecture& arch);
// "cnn 1x28x28 conv5x5 6-16 fc 120-84-10 relu (61706 params)".
std::string DescribeCnn(const CnnArchitecture& arch);

// Binary logistic regression on sparse input: fc1.weight [features, 1], fc1.bias [1], so
// feature j's weight is element j of the flat vector and the bias is element `features`.
// p(label 1 | x) = sigmoid(x·w + b).
struct LogRegArchitecture {
  int64_t features = 0;
};
ParamSpec LogRegParams(const LogRegArchitecture& arch);

}  // namespace asgd::models
