// The entry points of `asgd ps` and `asgd worker` (docs/architecture.md#roles-and-processes),
// and the cluster every role of a multi-process run resolves (`asgd ps-check` too,
// ps_check.h). The ps and worker roles are those of a training run with a coordinator
// (cluster_run.h), to which RunPsRole and RunWorkerRole hand over. The cluster comes from
// the config's [cluster] section or, when cluster.ps is empty, from a TF_CONFIG JSON text
// in TensorFlow's format, so an existing cluster manager can place the processes.
//
// Every process derives the parameter layout from the config's [model] and [data]
// sections, and the placement from cluster.placement, so all of them agree on which
// shard owns which elements without talking; the client checks each shard's size when
// it registers (a mismatch is one clear line and exit status 2).
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "experiments/config/cluster_plan.h"
#include "experiments/config/config.h"
#include "transport/cluster_spec.h"

namespace asgd::experiments {

struct RoleRequest {
  // --task: the index of this process within its role; unset = from TF_CONFIG's task.
  std::optional<int> task;
  // The text of $TF_CONFIG ("" when unset).
  std::string tf_config;
  // Where datasets are looked for (to derive the model's layout).
  std::vector<std::string> data_dirs;
  // The run's label and the command line (the coordinator's run folder records them).
  std::string name = "run";
  std::vector<std::string> command_line;
  // The coordinator of `asgd launch --resume`: the run folder to continue from its newest
  // checkpoint ("" = a new run).
  std::string resume_dir;
};

// The cluster from the plan's addresses or TF_CONFIG, with this process's task filled in for
// `role` ("ps", "worker", "coordinator" or "evaluator"; the last two are always task 0
// unless --task says otherwise). Throws ConfigError naming the key or TF_CONFIG field.
transport::ClusterSpec ResolveCluster(const ClusterPlan& cluster, const RoleRequest& request,
                                      const std::string& role);

// `asgd ps`: a training run's shard server, RunTrainingPsRole (cluster_run.h). Returns
// the exit status. Throws InputError/ConfigError for bad configuration.
int RunPsRole(const Config& config, const RoleRequest& request, std::ostream& out);

// `asgd worker`: a training run's worker, RunTrainingWorkerRole (cluster_run.h).
int RunWorkerRole(const Config& config, const RoleRequest& request, std::ostream& out);

}  // namespace asgd::experiments
