#include "models/logreg.h"

#include <algorithm>
#include <string>

#include "core/aligned.h"
#include "models/cpu_model.h"
#include "models/layers.h"

namespace asgd::models {
namespace {

template <typename T>
class LogRegNet {
 public:
  LogRegNet(const LogRegArchitecture& arch, const ParamSpec& /*spec*/) : features_(arch.features) {}

  EvalResult Run(const T* params, const datasets::BatchView& batch, T* grad) {
    EvalResult result;
    const T* dz = Logits(params, batch, grad != nullptr, &result);
    if (grad == nullptr) return result;
    std::fill(grad, grad + features_ + 1, T(0));
    grad[features_] = Scatter(batch, dz, grad);
    return result;
  }

  // The batch's distinct features, then the bias (index features_), increasing.
  void SparseCoordinates(const datasets::BatchView& batch, std::vector<int64_t>* out) const {
    out->assign(batch.indices + batch.indptr[0], batch.indices + batch.indptr[batch.size]);
    std::sort(out->begin(), out->end());
    out->erase(std::unique(out->begin(), out->end()), out->end());
    out->push_back(features_);
  }

  void RunSparse(const float* params, const datasets::BatchView& batch, SparseGradient* grad,
                 EvalResult* result) {
    static_assert(std::is_same_v<T, float>);
    const T* dz = Logits(params, batch, true, result);
    if (static_cast<int64_t>(dense_.size()) < features_) {
      dense_.assign(static_cast<std::size_t>(features_), T(0));
      seen_.assign(static_cast<std::size_t>(features_), 0);
    }
    // Collect the distinct features of the batch, then accumulate into a dense scratch
    // that is all zero between calls (reset below at the touched entries only), so the
    // sums are formed in exactly the order of the dense path.
    touched_.clear();
    for (int64_t k = batch.indptr[0]; k < batch.indptr[batch.size]; ++k) {
      const int32_t j = batch.indices[k];  // range-checked by Logits
      if (!seen_[static_cast<std::size_t>(j)]) {
        seen_[static_cast<std::size_t>(j)] = 1;
        touched_.push_back(j);
      }
    }
    const T db = Scatter(batch, dz, dense_.data());
    std::sort(touched_.begin(), touched_.end());
    grad->indices.resize(touched_.size() + 1);
    grad->values.resize(touched_.size() + 1);
    for (std::size_t i = 0; i < touched_.size(); ++i) {
      const auto j = static_cast<std::size_t>(touched_[i]);
      grad->indices[i] = touched_[i];
      grad->values[i] = dense_[j];
      dense_[j] = T(0);
      seen_[j] = 0;
    }
    grad->indices.back() = features_;
    grad->values.back() = db;
  }

 private:
  // Writes z and the loss sums; returns dL/dz (scaled by 1 / rows) when want_dz.
  const T* Logits(const T* params, const datasets::BatchView& batch, bool want_dz,
                  EvalResult* result) {
    const auto rows = static_cast<std::size_t>(batch.size);
    if (z_.size() < rows) {
      z_.resize(rows);
      dz_.resize(rows);
    }
    layers::SparseLogits<T>(batch, params, params[features_], features_, z_.data());
    layers::BinaryCrossEntropy<T>(z_.data(), batch.labels, batch.size,
                                  T(1) / static_cast<T>(batch.size), want_dz ? dz_.data() : nullptr,
                                  result);
    return dz_.data();
  }

  // dw[j] += dz_r · x_rj over the batch's entries, in entry order; returns Σ_r dz_r.
  T Scatter(const datasets::BatchView& batch, const T* dz, T* dw) const {
    T db = T(0);
    for (int64_t r = 0; r < batch.size; ++r) {
      const T d = dz[r];
      for (int64_t k = batch.indptr[r]; k < batch.indptr[r + 1]; ++k) {
        dw[batch.indices[k]] += d * static_cast<T>(batch.values[k]);
      }
      db += d;
    }
    return db;
  }

  int64_t features_;
  AlignedVector<T> z_, dz_;
  AlignedVector<T> dense_;     // RunSparse: per-feature sums, zero between calls
  std::vector<uint8_t> seen_;  // RunSparse: feature already in touched_
  std::vector<int64_t> touched_;
};

}  // namespace

std::unique_ptr<Model> NewCpuLogRegModel(const LogRegArchitecture& arch) {
  auto spec = std::make_shared<const ParamSpec>(LogRegParams(arch));
  CpuModelInfo info;
  info.name = "logreg";
  info.features = arch.features;
  info.classes = 2;
  info.sparse = true;
  info.describe = "logreg " + std::to_string(arch.features) + " sparse features (" +
                  std::to_string(spec->layout.size()) + " params)";
  return std::make_unique<CpuModelImpl<LogRegArchitecture, LogRegNet>>(arch, std::move(spec),
                                                                       std::move(info));
}

}  // namespace asgd::models
