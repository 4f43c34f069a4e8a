// The CPU LeNet-5-style convolutional network. Layout, padding and initialisation:
// CnnArchitecture in models/architecture.h; pooling conventions: models/layers.h.
#pragma once

#include <memory>

#include "models/architecture.h"
#include "models/model.h"

namespace asgd::models {

// Name() is "cnn". Dense input of in_channels × height × width floats per example (NCHW).
// Memory: the scratch holds each block's im2col matrix for the largest batch seen
// (about 25 × 784 floats per example for the first LeNet block, ~80 KB).
// REQUIRES: CnnArchitectureProblem(arch) is "" (InvariantError otherwise; NewModel in
// models/factory.h validates user options first).
std::unique_ptr<Model> NewCpuCnnModel(const CnnArchitecture& arch);

}  // namespace asgd::models
