#include "experiments/cluster/roles.h"

#include <ostream>
#include <string>

#include "core/error.h"
#include "experiments/cluster/cluster_run.h"

namespace asgd::experiments {

namespace tp = ::asgd::transport;

tp::ClusterSpec ResolveCluster(const ClusterPlan& cluster, const RoleRequest& request,
                               const std::string& role) {
  tp::ClusterSpec spec;
  if (!cluster.ps.empty()) {
    spec = tp::ClusterSpec::FromStrings(cluster.ps, cluster.worker, cluster.coordinator,
                                        cluster.evaluator);
  } else if (!request.tf_config.empty()) {
    spec = tp::ClusterSpec::FromTfConfig(request.tf_config);
    if (!spec.task_type.empty() && spec.task_type != role && !request.task.has_value()) {
      throw ConfigError("TF_CONFIG.task.type", spec.task_type,
                        "\"" + role + "\" for `asgd " + role + "` (or pass --task)");
    }
  } else {
    throw ConfigError(ClusterPlan::kPsKey, "",
                      "the shard servers (host:port,...), or a TF_CONFIG environment variable");
  }
  if (request.task.has_value()) {
    spec.task_type = role;
    spec.task_index = *request.task;
  } else if (role == "coordinator" || role == "evaluator") {
    spec.task_type = role;  // one of each: the index is 0
    spec.task_index = 0;
  } else if (spec.task_type.empty()) {
    throw ConfigError(
        "--task", "",
        "this process's index among the " + role + " tasks (or a TF_CONFIG with a task)");
  }
  spec.Validate();
  if (role == "worker" && spec.num_workers() == 0) {
    throw ConfigError(ClusterPlan::kWorkerKey, "", "at least one worker address");
  }
  return spec;
}

int RunPsRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  return RunTrainingPsRole(config, request, out);
}

int RunWorkerRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  return RunTrainingWorkerRole(config, request, out);
}

}  // namespace asgd::experiments
