#include "experiments/cluster/cluster_env.h"

#include <cstdlib>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "experiments/config/cluster_plan.h"

extern char** environ;

namespace asgd::experiments {
namespace {

using ::asgd::internal::StrCat;

int IntVar(const std::map<std::string, std::string>& env, const std::string& name, int min) {
  const auto it = env.find(name);
  if (it == env.end()) throw ConfigError(name, "", "set by the cluster manager");
  const auto v = ParseInt64(it->second);
  if (!v || *v < min || *v > 1000000) {
    throw ConfigError(name, it->second, StrCat("an integer >= ", min));
  }
  return static_cast<int>(*v);
}

std::string Get(const std::map<std::string, std::string>& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

}  // namespace

std::vector<std::string> ExpandSlurmNodeList(const std::string& list) {
  std::vector<std::string> hosts;
  std::size_t i = 0;
  auto bad = [&] {
    return ConfigError("SLURM_JOB_NODELIST", list, "a SLURM node list, e.g. node[01-03],gpu5");
  };
  while (i < list.size()) {
    std::size_t j = i;
    while (j < list.size() && list[j] != ',' && list[j] != '[') ++j;
    const std::string prefix = list.substr(i, j - i);
    if (j < list.size() && list[j] == '[') {
      const std::size_t close = list.find(']', j);
      if (close == std::string::npos) throw bad();
      for (const std::string& part : Split(list.substr(j + 1, close - j - 1), ',')) {
        const std::size_t dash = part.find('-');
        const std::string lo = part.substr(0, dash);
        const std::string hi = dash == std::string::npos ? lo : part.substr(dash + 1);
        const auto a = ParseInt64(lo), b = ParseInt64(hi);
        if (lo.empty() || !a || !b || *a > *b || *b - *a > 100000) throw bad();
        for (int64_t n = *a; n <= *b; ++n) {
          std::string num = std::to_string(n);
          if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');  // node01
          hosts.push_back(prefix + num);
        }
      }
      j = close + 1;
      if (j < list.size() && list[j] != ',') throw bad();
    } else {
      if (prefix.empty()) throw bad();
      hosts.push_back(prefix);
    }
    i = j + 1;
  }
  if (hosts.empty()) throw bad();
  return hosts;
}

std::vector<int> ExpandSlurmTasksPerNode(const std::string& spec) {
  std::vector<int> counts;
  for (const std::string& part : Split(spec, ',')) {
    const std::size_t paren = part.find("(x");
    const auto n = ParseInt64(part.substr(0, paren));
    int64_t times = 1;
    if (paren != std::string::npos) {
      if (part.back() != ')') throw ConfigError("SLURM_TASKS_PER_NODE", spec, "e.g. 2(x3),1");
      const auto t = ParseInt64(part.substr(paren + 2, part.size() - paren - 3));
      if (!t || *t < 1 || *t > 100000)
        throw ConfigError("SLURM_TASKS_PER_NODE", spec, "e.g. 2(x3),1");
      times = *t;
    }
    if (!n || *n < 1 || *n > 100000)
      throw ConfigError("SLURM_TASKS_PER_NODE", spec, "e.g. 2(x3),1");
    for (int64_t k = 0; k < times; ++k) counts.push_back(static_cast<int>(*n));
  }
  return counts;
}

std::optional<RankInfo> RankFromEnvironment(const std::map<std::string, std::string>& env) {
  if (env.count("SLURM_PROCID") != 0) {
    RankInfo info;
    info.manager = "slurm";
    info.rank = IntVar(env, "SLURM_PROCID", 0);
    info.size = IntVar(env, "SLURM_NTASKS", 1);
    std::string nodes = Get(env, "SLURM_JOB_NODELIST");
    if (nodes.empty()) nodes = Get(env, "SLURM_NODELIST");
    if (nodes.empty()) throw ConfigError("SLURM_JOB_NODELIST", "", "set by srun");
    const std::vector<std::string> hosts = ExpandSlurmNodeList(nodes);
    const std::string per_node = Get(env, "SLURM_TASKS_PER_NODE");
    const std::vector<int> counts =
        per_node.empty() ? std::vector<int>(hosts.size(), 1) : ExpandSlurmTasksPerNode(per_node);
    if (counts.size() != hosts.size()) {
      throw ConfigError("SLURM_TASKS_PER_NODE", per_node,
                        StrCat("a count for each of the ", hosts.size(), " nodes"));
    }
    // srun's default (block) distribution: the first node's tasks, then the next's.
    for (std::size_t h = 0; h < hosts.size(); ++h) {
      for (int k = 0; k < counts[h]; ++k) info.hosts.push_back(hosts[h]);
    }
    if (static_cast<int>(info.hosts.size()) != info.size) {
      throw ConfigError("SLURM_TASKS_PER_NODE", per_node,
                        StrCat(info.size, " tasks in all (SLURM_NTASKS)"));
    }
    if (info.rank >= info.size) {
      throw ConfigError("SLURM_PROCID", std::to_string(info.rank),
                        StrCat("a rank below ", info.size));
    }
    return info;
  }
  if (env.count("OMPI_COMM_WORLD_RANK") != 0) {
    RankInfo info;
    info.manager = "openmpi";
    info.rank = IntVar(env, "OMPI_COMM_WORLD_RANK", 0);
    info.size = IntVar(env, "OMPI_COMM_WORLD_SIZE", 1);
    if (info.rank >= info.size) {
      throw ConfigError("OMPI_COMM_WORLD_RANK", std::to_string(info.rank),
                        StrCat("a rank below ", info.size));
    }
    // Every rank on this host: all are on loopback. Otherwise cluster.hosts must say.
    if (Get(env, "OMPI_COMM_WORLD_LOCAL_SIZE") == std::to_string(info.size)) {
      info.hosts.assign(static_cast<std::size_t>(info.size), "127.0.0.1");
    }
    return info;
  }
  return std::nullopt;
}

transport::ClusterSpec ClusterForRanks(const std::vector<std::string>& hosts, int rank, int shards,
                                       int base_port) {
  const int size = static_cast<int>(hosts.size());
  if (size < shards + 2) {
    throw ConfigError(ClusterPlan::kShardsKey, std::to_string(shards),
                      StrCat("at most ", size - 2, " for ", size,
                             " ranks (one coordinator, the shards, at least one worker)"));
  }
  auto address = [&](int r) {
    return StrCat(hosts[static_cast<std::size_t>(r)], ":", base_port + r);
  };
  std::string ps, worker;
  // Appended piece by piece: GCC 12 reports a false -Wrestrict on `"," + string&&`.
  auto append = [](std::string& list, const std::string& entry) {
    if (!list.empty()) list += ',';
    list += entry;
  };
  for (int r = 1; r <= shards; ++r) append(ps, address(r));
  if (shards == 0) ps = StrCat(hosts[0], ":", base_port + size);  // unused
  for (int r = shards + 1; r < size; ++r) append(worker, address(r));
  transport::ClusterSpec spec = transport::ClusterSpec::FromStrings(ps, worker, address(0));
  if (rank == 0) {
    spec.task_type = "coordinator";
    spec.task_index = 0;
  } else if (rank <= shards) {
    spec.task_type = "ps";
    spec.task_index = rank - 1;
  } else {
    spec.task_type = "worker";
    spec.task_index = rank - shards - 1;
  }
  spec.Validate();
  return spec;
}

std::map<std::string, std::string> ProcessEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

}  // namespace asgd::experiments
