// The strategies compiled into asgd, one file each (registered in strategy.cc).
#pragma once

#include "algorithms/strategy.h"

namespace asgd::algorithms {

Strategy AsyncSgdStrategy();  // async_sgd.cc
Strategy HogwildStrategy();   // hogwild.cc
Strategy DownpourStrategy();  // downpour.cc
Strategy AgnStrategy();       // agn.cc
Strategy DynSgdStrategy();    // dynsgd.cc

}  // namespace asgd::algorithms
