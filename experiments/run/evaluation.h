// Evaluating a model's parameters on a dataset, in chunks, without copying the data.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "datasets/dataset.h"
#include "models/model.h"

namespace asgd::experiments {

// Loss sum and correct count of params on every example of ds (the whole test set or a
// problem's eval_subset: Problem::EvalSet), evaluated in chunks of `chunk` examples. First
// model.Calibrate(params, train): a model with BatchNorm statistics recomputes them at
// params from the training data, so the result depends on params only, not on which
// instance evaluates (and SaveFinalModel afterwards writes those statistics).
models::EvalResult EvaluateOn(models::Model& model, std::span<const float> params,
                              const datasets::Dataset& ds, const datasets::Dataset& train,
                              int64_t chunk = 1000);

// The file in the run folder that holds the trained model in its own framework's format,
// for models that can save themselves (Model::CanSave: the TorchScript model writes a copy
// of its .pt with the run's parameters, which torch.jit.load reads back).
inline constexpr const char* kFinalModelFile = "final_model.pt";
// Likewise the parameters of the run's best evaluation (the highest test accuracy in
// convergence.csv, summary.csv's best_test_accuracy; the earliest of equals).
inline constexpr const char* kBestModelFile = "best_model.pt";

// Writes model at params (the final parameters, those the run's last evaluation read, with
// the statistics that evaluation computed) as
// run_dir/final_model.pt when model.CanSave(); does nothing otherwise. Every driver calls it
// once, after its final evaluation. Throws IoError.
void SaveFinalModel(const models::Model& model, std::span<const float> params,
                    const std::string& run_dir);

// Writes model at params (those an evaluation just read, with the statistics it computed)
// as run_dir/best_model.pt when model.CanSave() and that evaluation's accuracy is above
// best_before, the run's best test accuracy before it (RunRecorder::best_test_accuracy
// read before recording the row: 0 at a fresh start, the restored best on a resume).
// Throws IoError.
void SaveBestModel(const models::Model& model, std::span<const float> params, double accuracy,
                   double best_before, const std::string& run_dir);

}  // namespace asgd::experiments
