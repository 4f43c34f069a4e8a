// The CPU sparse binary logistic regression (LIBSVM data such as a9a). Layout and
// initialisation: LogRegArchitecture in models/architecture.h.
#pragma once

#include <memory>

#include "models/architecture.h"
#include "models/model.h"

namespace asgd::models {

// Name() is "logreg"; num_classes() is 2 and labels must be 0 or 1. Input must be sparse
// (CSR) with feature indices in [0, arch.features); dense batches are refused
// (InvariantError), as the factory refuses a dense dataset.
//
// Loss: mean binary cross-entropy with logits z = x·w + b; an example counts as correct
// when (z > 0) == (label == 1).
//
// HasSparseGradient() is true. LossAndSparseGradient returns the coordinates the batch
// touches — the distinct feature indices of its entries, then the bias (index
// arch.features) — in increasing order, with the same values (bit for bit) as the dense
// gradient at those coordinates; the dense gradient is zero everywhere else.
// SparseCoordinates gives the same coordinates before the step (what it reads).
// REQUIRES: arch.features > 0.
std::unique_ptr<Model> NewCpuLogRegModel(const LogRegArchitecture& arch);

}  // namespace asgd::models
