// `asgd launch CONFIG`: a training run as local processes, and `asgd task`: one rank of
// a run placed by SLURM or Open MPI (experiments/cluster/cluster_env.h).
//
// launch starts the coordinator, one process per shard (cluster.shards), one per worker
// (algorithm.workers) and an evaluator (a strategy on a collective: the coordinator and
// the workers only, whose deaths the coordinator judges), all this same binary, connected over tcp
// on 127.0.0.1 (free ports) or over ipc sockets in a private temporary folder
// (cluster.launch_transport), unless the config's [cluster] names the addresses. Their
// output is streamed with a role prefix ("[worker 1] ..."). The run ends when the
// coordinator exits; launch then gives the others a grace period and ends every one
// still running by PID (SIGTERM, then SIGKILL). A role that exits with an error first,
// or SIGINT/SIGTERM to launch, makes it stop the run the same way: the coordinator gets
// SIGTERM (it writes what it has and exits 2), then everyone else. No child outlives it.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace asgd::experiments {

// The exit status: the coordinator's (0 completed, 2 failed), 2 if a role failed first,
// 128 + signal when interrupted.
int LaunchCommand(const std::vector<std::string>& args, std::ostream& out);

// `asgd task --config C`: the role of this rank under SLURM or Open MPI.
int TaskCommand(const std::vector<std::string>& args, std::ostream& out);

// The run's secret token: what a stop request must carry for a shard server to obey it
// (transport::ServerOptions::stop_token). launch makes one per run (or keeps the one in
// its own environment) and hands it to every role in the environment variable below;
// roles started by hand (`asgd ps-check ps` and `asgd ps-check worker`, a soak) share one the
// same way. Never logged, never written to a file of the run.
inline constexpr const char* kRunTokenVariable = "ASGD_RUN_TOKEN";
// This process's token: the variable's value, or empty when it is unset.
std::string RunTokenFromEnvironment();
// 128 random bits as 32 hex digits.
std::string NewRunToken();

// n distinct tcp ports on 127.0.0.1 that were free when picked, for the roles of a launch on
// one machine. The kernel may hand out one port again for a bind to port 0 once the probe
// socket is closed; two roles of one run never get the same one. Throws IoError.
std::vector<int> DistinctFreePorts(int n);

}  // namespace asgd::experiments
