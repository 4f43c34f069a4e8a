#include "algorithms/schedule.h"

#include <cmath>

#include "core/check.h"

namespace asgd::algorithms {

double LearningRateScale(const ScheduleOptions& o, double epochs) {
  ASGD_CHECK(o.decay > 0 && o.decay <= 1 && o.scale >= 1 && o.warmup_epochs >= 0,
             "schedule options decay ", o.decay, " scale ", o.scale, " warmup ", o.warmup_epochs);
  ASGD_CHECK(epochs >= 0, "epochs ", epochs);
  double warmup = o.scale;
  if (o.warmup_epochs > 0 && epochs < o.warmup_epochs) {
    warmup = 1.0 + (o.scale - 1.0) * epochs / o.warmup_epochs;
  }
  return warmup * std::pow(o.decay, std::floor(epochs));
}

}  // namespace asgd::algorithms
