// The entry points of `asgd ps` and `asgd worker` (docs/architecture.md#roles-and-processes),
// and the cluster every
// role of a multi-process run resolves. With algorithm.name = ps_check, the ps and worker
// roles here are a self-contained check of the parameter server (below); with a training
// strategy they are the roles of a training run with a coordinator (cluster_run.h), to
// which RunPsRole and RunWorkerRole hand over. The cluster comes from the config's
// [cluster] section or, when cluster.ps is empty, from a TF_CONFIG JSON text in
// TensorFlow's format, so an existing cluster manager can place the processes.
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

// The cluster from the config or TF_CONFIG, with this process's task filled in for
// `role` ("ps", "worker", "coordinator" or "evaluator"; the last two are always task 0
// unless --task says otherwise). Throws ConfigError naming the key or TF_CONFIG field.
transport::ClusterSpec ResolveCluster(const Config& config, const RoleRequest& request,
                                      const std::string& role);

// `asgd ps`. With a training strategy: RunTrainingPsRole (cluster_run.h). With
// algorithm.name = ps_check: serves one shard with an additive rule until a worker stops
// the servers, or SIGINT/SIGTERM; with check_seconds > 0, also prints the pushes applied
// so far every algorithm.check_report_every_s. Returns the exit status (ps_check: 0 once
// the server stopped, whichever way). Throws InputError/ConfigError for bad
// configuration.
int RunPsRole(const Config& config, const RoleRequest& request, std::ostream& out);

// `asgd worker`. With a training strategy: RunTrainingWorkerRole (cluster_run.h). With
// algorithm.name = ps_check, each worker pushes algorithm.check_pushes deltas of small integers
// (several in flight), all workers meet at a barrier, and each pulls the parameters and compares
// them, element for element, with the initial values plus every worker's pushes;
// float32 addition of small integers is exact, so any difference is a lost, repeated
// or misplaced push. With algorithm.check_seconds > 0 (a soak), the workers instead push
// as fast as they can for that long from a common start, print their pushes so far every
// algorithm.check_report_every_s, and then check the sum and every shard's count of every
// worker's pushes exactly (roles.cc explains the values pushed). Returns 0 when exact, 1
// on a mismatch (one line naming the first differing element or count), 2 when a server
// does not answer or answers with an error (ps_check).
int RunWorkerRole(const Config& config, const RoleRequest& request, std::ostream& out);

// The ps_check values: initial parameters and worker w's push number step, as small
// integers derived from seed. Exposed for tests.
std::vector<float> PsCheckInitial(int64_t n, uint64_t seed);
std::vector<float> PsCheckDelta(int64_t n, uint64_t seed, int worker, int64_t step);

}  // namespace asgd::experiments
