// The roles of a multi-process run (DESIGN.md §6): `asgd ps` serves one shard of the
// parameter vector, `asgd worker` runs one worker. The cluster comes from the config's
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

#include "experiments/config.h"
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
// `role` ("ps" or "worker"). Throws ConfigError naming the key or TF_CONFIG field.
transport::ClusterSpec ResolveCluster(const Config& config, const RoleRequest& request,
                                      const std::string& role);

// Serves one shard until a worker stops the servers, or SIGINT/SIGTERM; with
// algorithm.name = ps_check and check_seconds > 0, also prints the pushes applied so far
// every algorithm.check_report_every_s. Returns the exit status (0 after a clean stop).
// Throws InputError/ConfigError for bad configuration.
int RunPsRole(const Config& config, const RoleRequest& request, std::ostream& out);

// Runs one worker. Today the only distributed workload is algorithm.name = ps_check:
// each worker pushes algorithm.check_pushes deltas of small integers (several in
// flight), all workers meet at a barrier, and each pulls the parameters and compares
// them, element for element, with the initial values plus every worker's pushes;
// float32 addition of small integers is exact, so any difference is a lost, repeated
// or misplaced push. With algorithm.check_seconds > 0 (a soak), the workers instead push
// as fast as they can for that long from a common start, print their pushes so far every
// algorithm.check_report_every_s, and then check the sum and every shard's count of every
// worker's pushes exactly (roles.cc explains the values pushed). Returns 0 when exact, 1
// on a mismatch (one line naming the first differing element or count), 2 when a server
// does not answer or answers with an error.
int RunWorkerRole(const Config& config, const RoleRequest& request, std::ostream& out);

// The ps_check values: initial parameters and worker w's push number step, as small
// integers derived from seed. Exposed for tests.
std::vector<float> PsCheckInitial(int64_t n, uint64_t seed);
std::vector<float> PsCheckDelta(int64_t n, uint64_t seed, int worker, int64_t step);

}  // namespace asgd::experiments
