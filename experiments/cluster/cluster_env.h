// Clusters placed by a cluster manager: which rank this process is and where every rank
// runs, read from the environment SLURM (srun) or Open MPI (mpirun) gives each process.
// `asgd task` turns that into a ClusterSpec:
//
//   rank 0                       the coordinator (it also evaluates)
//   ranks 1 .. S                 the parameter-server shards (S = cluster.shards)
//   ranks S + 1 .. size − 1      the workers
//
// each listening on cluster.base_port + rank on its host. The functions take the
// environment as a map, so tests need no real scheduler.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "transport/cluster_spec.h"

namespace asgd::experiments {

struct RankInfo {
  std::string manager;  // "slurm" or "openmpi"
  int rank = 0;
  int size = 1;
  // The host of every rank, in rank order; empty when the manager does not say (Open MPI
  // on several hosts: cluster.hosts must).
  std::vector<std::string> hosts;
};

// The rank, size and hosts from SLURM_PROCID/SLURM_NTASKS/SLURM_JOB_NODELIST/
// SLURM_TASKS_PER_NODE, or OMPI_COMM_WORLD_RANK/SIZE/LOCAL_SIZE; nullopt when neither is
// set. Throws ConfigError naming the variable when one is malformed.
std::optional<RankInfo> RankFromEnvironment(const std::map<std::string, std::string>& env);

// Expands a SLURM node list: "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5.
std::vector<std::string> ExpandSlurmNodeList(const std::string& list);
// Expands SLURM_TASKS_PER_NODE: "2(x3),1" -> 2 2 2 1.
std::vector<int> ExpandSlurmTasksPerNode(const std::string& spec);

// The cluster of a run of `size` ranks on `hosts` (one per rank): rank 0 the coordinator,
// the next `shards` ranks the shards, the rest the workers; ports base_port + rank.
// task_type/task_index are set for `rank`. Throws ConfigError when size leaves no worker.
// shards = 0 (the strategies on a collective): no shard ranks; the spec's one ps entry, which
// a ClusterSpec needs, is a placeholder nothing binds (host 0, base_port + size).
transport::ClusterSpec ClusterForRanks(const std::vector<std::string>& hosts, int rank, int shards,
                                       int base_port);

// This process's environment as a map.
std::map<std::string, std::string> ProcessEnvironment();

}  // namespace asgd::experiments
