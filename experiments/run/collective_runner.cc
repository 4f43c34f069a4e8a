#include "experiments/run/collective_runner.h"

#include "algorithms/strategy.h"
#include "core/check.h"
#include "core/error.h"
#include "experiments/config/cluster_plan.h"

namespace asgd::experiments {

namespace alg = ::asgd::algorithms;
using ::asgd::internal::StrCat;

void CheckCollectiveCheckpoint(const LoadedCheckpoint& c, int64_t n_params) {
  if (c.shards.size() != 1) {
    throw DataError(c.dir, StrCat("holds ", c.shards.size(),
                                  " shards, a run on a collective saves one (the average)"));
  }
  if (static_cast<int64_t>(c.shards[0].values.size()) != n_params) {
    throw DataError(c.dir, StrCat("holds ", c.shards[0].values.size(),
                                  " parameters, the model has ", n_params));
  }
}

void RefuseCurveOnCollective(const Config& config) {
  const std::string name = config.String("algorithm.name");
  if (!ClusterPlan::FromConfig(config).curve ||
      alg::FindStrategy(name).family != alg::Family::kGroup) {
    return;
  }
  throw ConfigError(ClusterPlan::kCurveKey, "true",
                    StrCat("false with algorithm.name = ", name,
                           ": its workers talk over gloo's TCP connections, which CURVE does "
                           "not cover (they are not encrypted)"));
}

void RefuseCollectiveRole(const Config& config, const std::string& role) {
  const std::string name = config.String("algorithm.name");
  if (alg::FindStrategy(name).family != alg::Family::kGroup) return;
  RefuseCurveOnCollective(config);
  if (role == "ps" || role == "evaluator") {
    throw ConfigError("algorithm.name", name,
                      StrCat("a strategy over the parameter server for the ", role, " role: ", name,
                             " runs on a collective of its workers, without shards or an "
                             "evaluator (start the coordinator and the workers only)"));
  }
}

}  // namespace asgd::experiments
