// Ranks and hosts from SLURM's and Open MPI's environment, and the cluster `asgd task`
// builds from them (experiments/cluster/cluster_env.h).
#include "experiments/cluster/cluster_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"

namespace asgd::experiments {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ClusterEnv, ExpandsSlurmNodeLists) {
  EXPECT_THAT(ExpandSlurmNodeList("node[01-03,07],gpu5"),
              ElementsAre("node01", "node02", "node03", "node07", "gpu5"));
  EXPECT_THAT(ExpandSlurmNodeList("a"), ElementsAre("a"));
  EXPECT_THAT(ExpandSlurmNodeList("c[9-11]"), ElementsAre("c9", "c10", "c11"));
  for (const char* bad : {"", "node[01-", "node[3-1]", "node[x]", "a,,b", "n[1]x"}) {
    EXPECT_THROW(ExpandSlurmNodeList(bad), ConfigError) << bad;
  }
  EXPECT_THAT(ExpandSlurmTasksPerNode("2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THROW(ExpandSlurmTasksPerNode("2(x"), ConfigError);
  EXPECT_THROW(ExpandSlurmTasksPerNode("0"), ConfigError);
}

TEST(ClusterEnv, SlurmRanksFollowTheBlockDistribution) {
  const auto info = RankFromEnvironment({{"SLURM_PROCID", "3"},
                                         {"SLURM_NTASKS", "4"},
                                         {"SLURM_JOB_NODELIST", "n[1-2]"},
                                         {"SLURM_TASKS_PER_NODE", "3,1"}});
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->manager, "slurm");
  EXPECT_EQ(info->rank, 3);
  EXPECT_THAT(info->hosts, ElementsAre("n1", "n1", "n1", "n2"));
  try {
    RankFromEnvironment({{"SLURM_PROCID", "0"},
                         {"SLURM_NTASKS", "5"},
                         {"SLURM_JOB_NODELIST", "n[1-2]"},
                         {"SLURM_TASKS_PER_NODE", "2(x2)"}});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("SLURM_TASKS_PER_NODE"));
  }
  EXPECT_THROW(RankFromEnvironment({{"SLURM_PROCID", "x"}}), ConfigError);
}

TEST(ClusterEnv, OpenMpiOnOneHostIsLoopback) {
  auto info = RankFromEnvironment({{"OMPI_COMM_WORLD_RANK", "1"},
                                   {"OMPI_COMM_WORLD_SIZE", "3"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}});
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->manager, "openmpi");
  EXPECT_THAT(info->hosts, ElementsAre("127.0.0.1", "127.0.0.1", "127.0.0.1"));
  // On several hosts Open MPI does not say where each rank is: cluster.hosts must.
  info = RankFromEnvironment({{"OMPI_COMM_WORLD_RANK", "1"},
                              {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(info->hosts.empty());
  EXPECT_THROW(RankFromEnvironment({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}),
               ConfigError);
  EXPECT_FALSE(RankFromEnvironment({{"PATH", "/bin"}}).has_value());
}

TEST(ClusterEnv, RanksBecomeCoordinatorShardsAndWorkers) {
  const std::vector<std::string> hosts = {"h0", "h0", "h1", "h1", "h2"};
  auto spec = ClusterForRanks(hosts, 0, 2, 23400);
  EXPECT_EQ(spec.coordinator, "h0:23400");
  EXPECT_THAT(spec.ps, ElementsAre("h0:23401", "h1:23402"));
  EXPECT_THAT(spec.worker, ElementsAre("h1:23403", "h2:23404"));
  EXPECT_EQ(spec.task_type, "coordinator");
  spec = ClusterForRanks(hosts, 2, 2, 23400);
  EXPECT_EQ(spec.task_type, "ps");
  EXPECT_EQ(spec.task_index, 1);
  spec = ClusterForRanks(hosts, 4, 2, 23400);
  EXPECT_EQ(spec.task_type, "worker");
  EXPECT_EQ(spec.task_index, 1);
  EXPECT_THROW(ClusterForRanks({"a", "b", "c"}, 0, 2, 23400), ConfigError);  // no worker left
  // No shards (a strategy on a collective): every rank but 0 is a worker; the one ps entry
  // is a placeholder past the ranks' ports.
  spec = ClusterForRanks(hosts, 1, 0, 23400);
  EXPECT_THAT(spec.ps, ElementsAre("h0:23405"));
  EXPECT_THAT(spec.worker, ElementsAre("h0:23401", "h1:23402", "h1:23403", "h2:23404"));
  EXPECT_EQ(spec.task_type, "worker");
  EXPECT_EQ(spec.task_index, 0);
}

}  // namespace
}  // namespace asgd::experiments
