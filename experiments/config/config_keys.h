// The schema of every configuration key asgd understands (see config_keys.cc for the
// list with defaults and documentation; `asgd run --help-config` prints it).
#pragma once

#include "experiments/config/config.h"

namespace asgd::experiments {

const Schema& ExperimentSchema();

}  // namespace asgd::experiments
