// The CPU multilayer perceptron and softmax regression (an MLP without hidden layers).
// Layout and initialisation: MlpArchitecture in models/architecture.h.
#pragma once

#include <memory>

#include "models/architecture.h"
#include "models/model.h"

namespace asgd::models {

// Name() is "softmax" when arch.hidden is empty, else "mlp". Dense input only.
// REQUIRES: arch.inputs > 0, every hidden size > 0, arch.classes > 0 (InvariantError;
// NewModel in models/factory.h validates user options first).
std::unique_ptr<Model> NewCpuMlpModel(const MlpArchitecture& arch);

}  // namespace asgd::models
