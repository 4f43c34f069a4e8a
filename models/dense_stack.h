// Internal to models/: a stack of fully connected layers ending in logits, with its
// scratch activations. The MLP (and softmax regression) is one; the CNN ends in one.
//
// Layer l computes h_l = act(h_{l−1}·W_l + b_l) (identity for the last layer, whose h is
// the logits), h_0 = the input. Scratch grows with the largest batch seen and is never
// shrunk; a DenseStack is used by one thread.
#pragma once

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/aligned.h"
#include "core/check.h"
#include "core/gradient_ready.h"
#include "models/architecture.h"
#include "models/layers.h"

namespace asgd::models {

template <typename T>
class DenseStack {
 public:
  // The layers "fc<first_index>" … of spec's layout: inputs → hidden… → classes.
  DenseStack(int64_t inputs, const std::vector<int64_t>& hidden, Activation activation, int classes,
             const ParamSpec& spec, int first_index = 1)
      : activation_(activation) {
    int64_t in = inputs;
    for (std::size_t l = 0; l <= hidden.size(); ++l) {
      const int64_t out = l < hidden.size() ? hidden[l] : classes;
      const std::string name = "fc" + std::to_string(first_index + static_cast<int>(l));
      const TensorSpec& w = spec.layout.Get(name + ".weight");
      const TensorSpec& b = spec.layout.Get(name + ".bias");
      ASGD_CHECK(w.shape == (std::vector<int64_t>{in, out}), name, " shape");
      // Backward reports a layer's weight and bias as one range.
      ASGD_CHECK_EQ(b.offset, w.offset + in * out, name, " bias follows its weight");
      layers_.push_back({in, out, w.offset, b.offset, {}, {}});
      in = out;
    }
  }

  int64_t inputs() const { return layers_.front().in; }
  int64_t classes() const { return layers_.back().out; }

  // Runs the layers on x [rows, inputs]; returns the logits [rows, classes], valid until
  // the next Forward.
  T* Forward(const T* params, const T* x, int64_t rows) {
    Reserve(rows);
    const T* in = x;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      Layer& layer = layers_[l];
      const bool last = l + 1 == layers_.size();
      layers::DenseForward<T>(layers::ConstMatMap<T>(in, rows, layer.in),
                              layers::ConstMatMap<T>(params + layer.w, layer.in, layer.out),
                              params + layer.b,
                              last ? std::nullopt : std::optional<Activation>(activation_),
                              layers::MatMap<T>(layer.h.data(), rows, layer.out));
      in = layer.h.data();
    }
    return layers_.back().h.data();
  }

  // Where the caller puts dL/dlogits [rows, classes] before Backward.
  T* dlogits() { return layers_.back().d.data(); }

  // Backpropagates dlogits() through the layers of the last Forward (same params, x and
  // rows): writes every weight and bias gradient into grad (at the layout's offsets) and,
  // unless dx is null, dL/dx [rows, inputs] into dx. Unless ready is null, tells it each
  // layer's range (weight then bias) as soon as that layer's gradient is written, the last
  // layer first.
  void Backward(const T* params, const T* x, int64_t rows, T* grad, T* dx,
                GradientReady* ready = nullptr) {
    for (std::size_t l = layers_.size(); l-- > 0;) {
      Layer& layer = layers_[l];
      const bool last = l + 1 == layers_.size();
      layers::MatMap<T> d(layer.d.data(), rows, layer.out);
      layers::DenseActivationBackward<T>(
          last ? std::nullopt : std::optional<Activation>(activation_),
          layers::ConstMatMap<T>(layer.h.data(), rows, layer.out), d, grad + layer.b);
      const T* in = l == 0 ? x : layers_[l - 1].h.data();
      T* d_in = l == 0 ? dx : layers_[l - 1].d.data();
      layers::DenseBackward<T>(layers::ConstMatMap<T>(in, rows, layer.in),
                               layers::ConstMatMap<T>(params + layer.w, layer.in, layer.out),
                               layers::ConstMatMap<T>(layer.d.data(), rows, layer.out),
                               layers::MatMap<T>(grad + layer.w, layer.in, layer.out), d_in);
      if (ready != nullptr) ready->Ready({layer.w, layer.b + layer.out - layer.w});
    }
  }

 private:
  struct Layer {
    int64_t in, out;
    int64_t w, b;        // offsets of weight and bias in the flat vector
    AlignedVector<T> h;  // output [rows, out] (after the activation)
    AlignedVector<T> d;  // dL/d(output), then dL/d(pre-activation) [rows, out]
  };

  // Grows the scratch only when the batch is larger than any before.
  void Reserve(int64_t rows) {
    if (rows <= capacity_) return;
    for (Layer& layer : layers_) {
      layer.h.resize(static_cast<std::size_t>(rows * layer.out));
      layer.d.resize(static_cast<std::size_t>(rows * layer.out));
    }
    capacity_ = rows;
  }

  Activation activation_;
  std::vector<Layer> layers_;
  int64_t capacity_ = 0;
};

// The input as T: the batch's own floats when T is float, else a converted copy in *buf.
template <typename T>
const T* PromoteInput(const float* x, int64_t n, AlignedVector<T>* buf) {
  if constexpr (std::is_same_v<T, float>) {
    (void)n;
    (void)buf;
    return x;
  } else {
    if (static_cast<int64_t>(buf->size()) < n) buf->resize(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) (*buf)[static_cast<std::size_t>(i)] = static_cast<T>(x[i]);
    return buf->data();
  }
}

}  // namespace asgd::models
