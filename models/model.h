// The Model interface: a differentiable function of a flat parameter vector.
//
// A model owns no parameters. It describes them (layout()), initialises a buffer
// (Initialize), and computes the mean loss and its gradient for a batch at given
// parameters (LossAndGradient). Parameters and gradients are flat float32 buffers in the
// model's ParamLayout (docs/architecture.md#the-flat-parameter-vector), so strategies and
// the parameter server move them
// as plain byte ranges.
//
// A Model object holds scratch buffers (activations) and is therefore not thread-safe:
// give every worker thread its own instance (Clone()). Instances of one configuration
// have identical layouts.
//
// Loss: mean softmax cross-entropy over the batch (binary logistic loss for the sparse
// logistic model). Accuracy counts argmax(logits) == label.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/gradient_ready.h"
#include "core/param_layout.h"
#include "datasets/dataset.h"

namespace asgd::models {

struct EvalResult {
  double loss_sum = 0.0;  // sum (not mean) of per-example losses
  int64_t correct = 0;    // examples whose prediction equals the label
  int64_t count = 0;      // examples evaluated

  double mean_loss() const { return count ? loss_sum / static_cast<double>(count) : 0.0; }
  double accuracy() const {
    return count ? static_cast<double>(correct) / static_cast<double>(count) : 0.0;
  }
  EvalResult& operator+=(const EvalResult& o) {
    loss_sum += o.loss_sum;
    correct += o.correct;
    count += o.count;
    return *this;
  }
};

// A sparse gradient: only the listed coordinates are (possibly) non-zero. Indices are
// unique and increasing. Hogwild uses it to touch only the coordinates of its batch.
struct SparseGradient {
  std::vector<int64_t> indices;
  std::vector<float> values;
};

class Model {
 public:
  virtual ~Model() = default;

  // The model's registry key and CSV value: "softmax", "mlp", "cnn", "logreg".
  virtual std::string Name() const = 0;
  // e.g. "mlp 784-256-256-10 relu (269322 params)"
  virtual std::string Describe() const = 0;
  // The config setting this model comes from, for messages that send the user to it:
  // "model.name = mlp"; the TorchScript model's "model.file = <its file>".
  virtual std::string Source() const;
  virtual const ParamLayout& layout() const = 0;

  // Fills params (layout().size() floats) with seeded initial values (He or Glorot per
  // layer, biases zero). The same seed gives the same values on every platform.
  virtual void Initialize(std::span<float> params, uint64_t seed) const = 0;

  // Where the random draws of this instance's training steps come from (a TorchScript
  // module's dropout; asgd's own models draw nothing in a step and ignore it): the next
  // LossAndGradient draws from a generator seeded with DeriveSeed(seed, "step", step)
  // (core/rng.h), the one after with step + 1, and so on. Before the first call: seed 0,
  // step 0. A caller that calls it before every step with its own step count gives each
  // step the same draws whichever instance computes it.
  virtual void SeedTraining(uint64_t /*seed*/, int64_t /*step*/) {}

  // Computes the mean loss over the batch at params and writes its gradient (overwriting,
  // not accumulating) into grad. REQUIRES: params.size() == grad.size() == layout().size();
  // the batch matches the model's input (dense with num_features() columns, or sparse).
  virtual float LossAndGradient(std::span<const float> params, const datasets::BatchView& batch,
                                std::span<float> grad) = 0;

  // LossAndGradient that also tells `ready` which ranges of grad are final as the backward
  // pass produces them (core/gradient_ready.h): every element of grad is reported exactly
  // once, in disjoint ranges, before this returns, and a reported range is not written
  // again. The loss and gradient are LossAndGradient's, bit for bit. What each model
  // reports: the CPU MLP and CNN (and their CUDA versions) one range per layer (its weight
  // and bias) as soon as backward has computed it, the last layer first; the TorchScript
  // model one range per parameter, when autograd has accumulated its gradient; any other
  // model (this default) the whole vector once, after LossAndGradient. Models that report
  // per layer say so with ReportsGradientByLayer(). REQUIRES: as LossAndGradient.
  virtual float LossAndGradientReporting(std::span<const float> params,
                                         const datasets::BatchView& batch, std::span<float> grad,
                                         GradientReady& ready);
  // True if LossAndGradientReporting reports parts of the gradient before the whole of it
  // is computed (else it reports the whole vector at the end).
  virtual bool ReportsGradientByLayer() const { return false; }

  // Loss sum and correct count of the batch at params (no gradient).
  virtual EvalResult Evaluate(std::span<const float> params, const datasets::BatchView& batch) = 0;

  // True if LossAndSparseGradient is implemented (the gradient of one batch touches only
  // a few coordinates, as for sparse logistic regression).
  virtual bool HasSparseGradient() const { return false; }
  // Like LossAndGradient but returns only the touched coordinates. Throws InvariantError
  // unless HasSparseGradient().
  virtual float LossAndSparseGradient(std::span<const float> params,
                                      const datasets::BatchView& batch, SparseGradient* grad);
  // The coordinates LossAndSparseGradient reads (and may write) for this batch, unique and
  // increasing, into *out (replaced): what a worker must pull before the sparse step.
  // Throws InvariantError unless HasSparseGradient().
  virtual void SparseCoordinates(const datasets::BatchView& batch, std::vector<int64_t>* out) const;

  // Input features expected per example, and whether input must be sparse.
  virtual int64_t num_features() const = 0;
  virtual bool sparse_input() const { return false; }
  virtual int num_classes() const = 0;

  // A new instance with the same configuration (own scratch buffers).
  virtual std::unique_ptr<Model> Clone() const = 0;

  // Recomputes state the model keeps beside its parameters and that an evaluation reads
  // (the TorchScript model's BatchNorm running statistics) at params, from training
  // batches of train; call it before evaluating params. Does nothing for models without
  // such state (every asgd model). Throws InvariantError on a batch that does not match.
  virtual void Calibrate(std::span<const float> /*params*/, const datasets::Dataset& /*train*/) {}

  // True if SaveAs can write the model with given parameters as a file its own framework
  // loads (the TorchScript model: a copy of its .pt). False for asgd's own models.
  virtual bool CanSave() const { return false; }
  // Writes the model with params (layout().size() floats) to path, replacing it
  // atomically. Throws IoError when the file cannot be written, InvariantError unless
  // CanSave().
  virtual void SaveAs(std::span<const float> params, const std::string& path) const;
};

}  // namespace asgd::models
