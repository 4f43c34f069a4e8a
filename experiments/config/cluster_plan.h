// The cluster plan: the [cluster] keys a run as processes reads (experiments/cluster),
// resolved once into typed values. The roles, the launcher and the key loader read this
// plan, never the config by key: the keys are named here and in cluster_plan.cc, once.
// The schema (config_keys.cc) checked each value's type and range when the config was
// read; what depends on more than the config (TF_CONFIG, the key files, the strategy)
// is checked where it is resolved, with the key names below.
#pragma once

#include <string>
#include <vector>

#include "experiments/config/config.h"

namespace asgd::experiments {

struct ClusterPlan {
  // The key names, for the messages of errors found later (an address TF_CONFIG did not
  // give, a key file that does not read): ConfigError names the key.
  static constexpr const char* kPsKey = "cluster.ps";
  static constexpr const char* kWorkerKey = "cluster.worker";
  static constexpr const char* kCoordinatorKey = "cluster.coordinator";
  static constexpr const char* kHostsKey = "cluster.hosts";
  static constexpr const char* kShardsKey = "cluster.shards";
  static constexpr const char* kBasePortKey = "cluster.base_port";
  static constexpr const char* kEvaluatorKey = "cluster.evaluator";
  static constexpr const char* kCurveKey = "cluster.curve";
  static constexpr const char* kKeysDirKey = "cluster.keys_dir";
  static constexpr const char* kClientKeyKey = "cluster.client_key";
  static constexpr const char* kOnWorkerLossKey = "cluster.on_worker_loss";

  // The tasks' addresses, comma-separated (host:port, ipc://PATH, tcp://host:port);
  // ps "" = the cluster comes from $TF_CONFIG.
  std::string ps;           // cluster.ps
  std::string worker;       // cluster.worker
  std::string coordinator;  // cluster.coordinator
  std::string evaluator;    // cluster.evaluator ("" = the coordinator evaluates)

  std::string transport;         // cluster.transport (`asgd run`: inproc, memory, sim)
  std::string launch_transport;  // cluster.launch_transport (`asgd launch`: tcp, ipc)
  std::string hosts;             // cluster.hosts (`asgd task`; "" = the scheduler's)
  int base_port = 0;             // cluster.base_port (`asgd task`)
  int shards = 1;                // cluster.shards
  std::string placement;         // cluster.placement (ps::ParsePlacementPolicy's name)

  double timeout_s = 0;            // cluster.timeout_s
  double report_interval_s = 0;    // cluster.report_interval_s
  double heartbeat_timeout_s = 0;  // cluster.heartbeat_timeout_s
  bool fail_on_worker_loss = false;  // cluster.on_worker_loss = fail (else continue)

  std::string bind_host;            // cluster.bind_host
  bool allow_plain_remote = false;  // cluster.allow_plain_remote
  bool stop_servers = true;         // cluster.stop_servers

  bool curve = false;      // cluster.curve
  std::string keys_dir;    // cluster.keys_dir (required when curve)
  std::string client_key;  // cluster.client_key

  // Reads the keys above (the schema validated them).
  static ClusterPlan FromConfig(const Config& config);

  // The --set assignments ("cluster.ps=...", ...) that give a role process the addresses
  // of a cluster generated for it (`asgd launch`).
  static std::vector<std::string> AddressAssignments(const std::string& ps,
                                                     const std::string& worker,
                                                     const std::string& coordinator,
                                                     const std::string& evaluator);
  // Sets those four keys in config (`asgd task`, whose cluster comes from the scheduler).
  static void SetAddresses(Config& config, const std::string& ps, const std::string& worker,
                           const std::string& coordinator, const std::string& evaluator);
};

}  // namespace asgd::experiments
