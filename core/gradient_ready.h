// GradientReady: told, while a gradient is being computed, which parts of it are final.
//
// A model's backward pass produces the gradient layer by layer, from the last layer to the
// first. A caller that wants to act on a layer's gradient as soon as it exists (allreduce
// it while the earlier layers are still being differentiated, as PyTorch's
// DistributedDataParallel does with its buckets) passes a GradientReady to
// Model::LossAndGradientReporting (models/model.h), which calls Ready for each range of the
// flat gradient (core/param_layout.h) once its values will not change again.
//
// The interface sits in core/ because both sides of it live in folders that must not
// depend on each other: the models that report and the collective that consumes.
//
// Thread safety: Ready is called on the thread that computes the gradient.
#pragma once

#include "core/param_layout.h"

namespace asgd {

class GradientReady {
 public:
  // Elements [range.begin, range.end()) of the gradient buffer hold their final values:
  // nothing writes them again before the computation returns. Within one computation the
  // ranges reported are disjoint and cover the whole buffer; they may come in any order
  // (a layer's tensors typically from the end of the buffer to its start).
  virtual void Ready(Range range) = 0;

 protected:
  ~GradientReady() = default;
};

}  // namespace asgd
