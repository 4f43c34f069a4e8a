// The strategies compiled into asgd: one list, ASGD_BUILTIN_STRATEGIES. Each line names a
// strategy by the function its file defines, X(Name) for `Strategy NameStrategy()`; the
// list declares those functions (below) and forms the registry (strategy.cc), so adding a
// strategy is its file and one line here (docs/architecture.md#adding-a-strategy). Order
// does not matter: the registry is keyed by Strategy::name, and two entries of one name
// are refused when it is built.
#pragma once

#include "algorithms/strategy.h"

// clang-format off
#define ASGD_BUILTIN_STRATEGIES(X)                                       \
  X(Sgd)             /* strategy.cc: the sequential baseline */         \
  X(AsyncSgd)        /* async_sgd.cc */                                 \
  X(Hogwild)         /* hogwild.cc */                                   \
  X(Downpour)        /* downpour.cc */                                  \
  X(Agn)             /* agn.cc (also registered as "adag") */           \
  X(DynSgd)          /* dynsgd.cc */                                    \
  X(AdagDistance)    /* adag_distance.cc */                             \
  X(SyncSgd)         /* sync_sgd.cc */                                  \
  X(Sagn)            /* sagn.cc */                                      \
  X(Easgd)           /* easgd.cc */                                     \
  X(Aeasgd)          /* aeasgd.cc */                                    \
  X(Aeamsgd)         /* aeamsgd.cc */                                   \
  X(StalenessAware)  /* staleness_aware.cc */                           \
  X(Ssp)             /* ssp.cc */                                       \
  X(ModelAveraging)  /* model_averaging.cc */                           \
  X(DcAsgd)          /* dc_asgd.cc */                                   \
  X(SignSgdVote)     /* signsgd_vote.cc */                              \
  /* On a collective (Strategy::collective), not a parameter server. */ \
  X(AllreduceSgd)    /* allreduce_sgd.cc */                             \
  X(LocalSgd)        /* local_sgd.cc */                                 \
  X(Dpsgd)           /* dpsgd.cc */
// clang-format on

namespace asgd::algorithms {

#define ASGD_DECLARE_STRATEGY(Name) Strategy Name##Strategy();
ASGD_BUILTIN_STRATEGIES(ASGD_DECLARE_STRATEGY)
#undef ASGD_DECLARE_STRATEGY

}  // namespace asgd::algorithms
