// The strategies compiled into asgd, one file each (registered in strategy.cc).
#pragma once

#include "algorithms/strategy.h"

namespace asgd::algorithms {

Strategy AsyncSgdStrategy();  // async_sgd.cc
Strategy HogwildStrategy();   // hogwild.cc
Strategy DownpourStrategy();  // downpour.cc
Strategy AgnStrategy();       // agn.cc
Strategy DynSgdStrategy();    // dynsgd.cc
Strategy AdagDistanceStrategy();    // adag_distance.cc
Strategy SyncSgdStrategy();         // sync_sgd.cc
Strategy SagnStrategy();            // sagn.cc
Strategy EasgdStrategy();           // easgd.cc
Strategy AeasgdStrategy();          // aeasgd.cc
Strategy AeamsgdStrategy();         // aeamsgd.cc
Strategy StalenessAwareStrategy();  // staleness_aware.cc
Strategy SspStrategy();             // ssp.cc
Strategy ModelAveragingStrategy();  // model_averaging.cc
Strategy DcAsgdStrategy();          // dc_asgd.cc
Strategy SignSgdVoteStrategy();     // signsgd_vote.cc
// On a collective (Strategy::collective), not a parameter server.
Strategy AllreduceSgdStrategy();  // allreduce_sgd.cc
Strategy LocalSgdStrategy();      // local_sgd.cc
Strategy DpsgdStrategy();         // dpsgd.cc

}  // namespace asgd::algorithms
