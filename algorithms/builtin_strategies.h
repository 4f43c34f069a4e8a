// The strategies compiled into asgd: one list, ASGD_BUILTIN_STRATEGIES. Each line names a
// strategy once, X(Name, file): `Strategy NameStrategy()` is defined in algorithms/file.cc.
// The list declares those functions (below) and forms the registry (strategy.cc), and the
// build reads it too (cmake/AsgdStrategies.cmake): each file is a source of the library and
// tests/algorithms/file_test.cc, when it exists, a source of the algorithms tests. So adding
// a strategy is its file, one line here, its test and its config
// (docs/architecture.md#adding-a-strategy). Order does not matter: the registry is keyed by
// Strategy::name, and two entries of one name are refused when it is built.
#pragma once

#include "algorithms/strategy.h"

// clang-format off
#define ASGD_BUILTIN_STRATEGIES(X)                                      \
  X(Sgd, strategy)                   /* the sequential baseline */     \
  X(AsyncSgd, async_sgd)                                               \
  X(Hogwild, hogwild)                                                  \
  X(Downpour, downpour)                                                \
  X(Agn, agn)                        /* also registered as "adag" */   \
  X(DynSgd, dynsgd)                                                    \
  X(AdagDistance, adag_distance)                                       \
  X(SyncSgd, sync_sgd)                                                 \
  X(Sagn, sagn)                                                        \
  X(Easgd, easgd)                                                      \
  X(Aeasgd, aeasgd)                                                    \
  X(Aeamsgd, aeamsgd)                                                  \
  X(StalenessAware, staleness_aware)                                   \
  X(Ssp, ssp)                                                          \
  X(ModelAveraging, model_averaging)                                   \
  X(DcAsgd, dc_asgd)                                                   \
  X(SignSgdVote, signsgd_vote)                                         \
  /* The group family (Strategy::family = kGroup): on a collective. */ \
  X(AllreduceSgd, allreduce_sgd)                                       \
  X(LocalSgd, local_sgd)                                               \
  X(Dpsgd, dpsgd)
// clang-format on

namespace asgd::algorithms {

#define ASGD_DECLARE_STRATEGY(Name, file) Strategy Name##Strategy();
ASGD_BUILTIN_STRATEGIES(ASGD_DECLARE_STRATEGY)
#undef ASGD_DECLARE_STRATEGY

}  // namespace asgd::algorithms
