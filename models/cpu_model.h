// Internal to models/ (and its tests): what the CPU models share.
//
// CpuModel adds one method to Model: the same loss and gradient computed entirely in
// double precision (the tests compare it with finite differences and with the float
// path). CpuModelImpl<Arch, Net> turns a network template Net<T> — a class with
//   Net(const Arch&, const ParamSpec&)
//   EvalResult Run(const T* params, const datasets::BatchView& batch, T* grad)
//       (loss sum, correct and count of the batch; if grad is not null, also writes the
//        gradient of the mean loss over all of layout().size() entries)
// and optionally
//   EvalResult Run(const T* params, const datasets::BatchView& batch, T* grad,
//                  GradientReady* ready)
//       (the same, telling ready, if not null, each layer's range of grad as soon as it
//        is final: Model::LossAndGradientReporting)
//   void RunSparse(const float* params, const datasets::BatchView&, SparseGradient*,
//                  EvalResult*)
// — into a Model with argument checks, chunked evaluation and Clone().
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "core/check.h"
#include "datasets/dataset.h"
#include "models/architecture.h"
#include "models/model.h"

namespace asgd::models {

class CpuModel : public Model {
 public:
  // As LossAndGradient, with parameters, activations and gradient in double; grad may be
  // empty (loss only). Returns the mean loss. Not for production use: allocates a double
  // copy of the network's scratch on first use.
  // REQUIRES: as LossAndGradient; grad empty or of layout().size().
  virtual double LossAndGradientInDouble(std::span<const double> params,
                                         const datasets::BatchView& batch,
                                         std::span<double> grad) = 0;
};

// What a CPU model says about itself besides its layout.
struct CpuModelInfo {
  std::string name;      // "mlp"
  std::string describe;  // "mlp 784-256-256-10 relu (269322 params)"
  int64_t features = 0;
  int classes = 0;
  bool sparse = false;
};

// Throws InvariantError unless batch fits a model with these properties (dense with x, or
// sparse with CSR arrays; num_features; labels present; size > 0 unless allow_empty).
void CheckBatch(const datasets::BatchView& batch, const CpuModelInfo& info, bool allow_empty);
// Examples [begin, begin + count) of batch (absolute CSR offsets make this a pointer shift).
datasets::BatchView SliceBatch(const datasets::BatchView& batch, int64_t begin, int64_t count);

// Evaluate processes at most this many examples at a time, bounding scratch memory.
inline constexpr int64_t kEvalChunk = 256;

template <typename Arch, template <typename> class Net>
class CpuModelImpl final : public CpuModel {
 public:
  CpuModelImpl(Arch arch, std::shared_ptr<const ParamSpec> spec, CpuModelInfo info)
      : arch_(std::move(arch)),
        spec_(std::move(spec)),
        info_(std::move(info)),
        net_(arch_, *spec_) {}

  std::string Name() const override { return info_.name; }
  std::string Describe() const override { return info_.describe; }
  const ParamLayout& layout() const override { return spec_->layout; }
  void Initialize(std::span<float> params, uint64_t seed) const override {
    InitializeParams(*spec_, params, seed);
  }

  float LossAndGradient(std::span<const float> params, const datasets::BatchView& batch,
                        std::span<float> grad) override {
    CheckSizes(params.size(), grad.size());
    CheckBatch(batch, info_, /*allow_empty=*/false);
    const EvalResult r = net_.Run(params.data(), batch, grad.data());
    return static_cast<float>(r.loss_sum / static_cast<double>(batch.size));
  }

  float LossAndGradientReporting(std::span<const float> params, const datasets::BatchView& batch,
                                 std::span<float> grad, GradientReady& ready) override {
    if constexpr (kReportsByLayer) {
      CheckSizes(params.size(), grad.size());
      CheckBatch(batch, info_, /*allow_empty=*/false);
      const EvalResult r = net_.Run(params.data(), batch, grad.data(), &ready);
      return static_cast<float>(r.loss_sum / static_cast<double>(batch.size));
    } else {
      return Model::LossAndGradientReporting(params, batch, grad, ready);
    }
  }

  bool ReportsGradientByLayer() const override { return kReportsByLayer; }

  EvalResult Evaluate(std::span<const float> params, const datasets::BatchView& batch) override {
    CheckSizes(params.size(), params.size());
    CheckBatch(batch, info_, /*allow_empty=*/true);
    EvalResult total;
    for (int64_t begin = 0; begin < batch.size; begin += kEvalChunk) {
      const int64_t count = std::min(kEvalChunk, batch.size - begin);
      total += net_.Run(params.data(), SliceBatch(batch, begin, count), nullptr);
    }
    return total;
  }

  bool HasSparseGradient() const override { return kSparseGradient; }

  float LossAndSparseGradient(std::span<const float> params, const datasets::BatchView& batch,
                              SparseGradient* grad) override {
    if constexpr (kSparseGradient) {
      CheckSizes(params.size(), params.size());
      CheckBatch(batch, info_, /*allow_empty=*/false);
      ASGD_CHECK(grad != nullptr);
      EvalResult r;
      net_.RunSparse(params.data(), batch, grad, &r);
      return static_cast<float>(r.loss_sum / static_cast<double>(batch.size));
    } else {
      return Model::LossAndSparseGradient(params, batch, grad);
    }
  }

  void SparseCoordinates(const datasets::BatchView& batch,
                         std::vector<int64_t>* out) const override {
    if constexpr (kSparseGradient) {
      CheckBatch(batch, info_, /*allow_empty=*/false);
      ASGD_CHECK(out != nullptr);
      net_.SparseCoordinates(batch, out);
    } else {
      Model::SparseCoordinates(batch, out);
    }
  }

  double LossAndGradientInDouble(std::span<const double> params, const datasets::BatchView& batch,
                                 std::span<double> grad) override {
    CheckSizes(params.size(), grad.empty() ? params.size() : grad.size());
    CheckBatch(batch, info_, /*allow_empty=*/false);
    if (!double_net_) double_net_ = std::make_unique<Net<double>>(arch_, *spec_);
    const EvalResult r =
        double_net_->Run(params.data(), batch, grad.empty() ? nullptr : grad.data());
    return r.loss_sum / static_cast<double>(batch.size);
  }

  int64_t num_features() const override { return info_.features; }
  bool sparse_input() const override { return info_.sparse; }
  int num_classes() const override { return info_.classes; }

  std::unique_ptr<Model> Clone() const override {
    return std::make_unique<CpuModelImpl>(arch_, spec_, info_);
  }

 private:
  static constexpr bool kReportsByLayer = requires(
      Net<float> & n, const float* p, const datasets::BatchView& b, float* g, GradientReady* r) {
    n.Run(p, b, g, r);
  };
  static constexpr bool kSparseGradient =
      requires(Net<float> & n, const float* p, const datasets::BatchView& b, SparseGradient* g,
               EvalResult* r) {
    n.RunSparse(p, b, g, r);
  };

  void CheckSizes(std::size_t params, std::size_t grad) const {
    ASGD_CHECK_EQ(static_cast<int64_t>(params), spec_->layout.size(), "params vs layout of ",
                  info_.name);
    ASGD_CHECK_EQ(static_cast<int64_t>(grad), spec_->layout.size(), "grad vs layout of ",
                  info_.name);
  }

  const Arch arch_;
  const std::shared_ptr<const ParamSpec> spec_;  // shared with clones; immutable
  const CpuModelInfo info_;
  Net<float> net_;
  std::unique_ptr<Net<double>> double_net_;
};

}  // namespace asgd::models
