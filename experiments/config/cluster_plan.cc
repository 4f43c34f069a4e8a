#include "experiments/config/cluster_plan.h"

namespace asgd::experiments {

ClusterPlan ClusterPlan::FromConfig(const Config& config) {
  ClusterPlan p;
  p.ps = config.String(kPsKey);
  p.worker = config.String(kWorkerKey);
  p.coordinator = config.String(kCoordinatorKey);
  p.evaluator = config.String(kEvaluatorKey);
  p.transport = config.String("cluster.transport");
  p.launch_transport = config.String("cluster.launch_transport");
  p.hosts = config.String(kHostsKey);
  p.base_port = static_cast<int>(config.Int(kBasePortKey));
  p.shards = static_cast<int>(config.Int(kShardsKey));
  p.placement = config.String("cluster.placement");
  p.timeout_s = config.Double("cluster.timeout_s");
  p.report_interval_s = config.Double("cluster.report_interval_s");
  p.heartbeat_timeout_s = config.Double("cluster.heartbeat_timeout_s");
  p.fail_on_worker_loss = config.String(kOnWorkerLossKey) == "fail";
  p.bind_host = config.String("cluster.bind_host");
  p.allow_plain_remote = config.Bool("cluster.allow_plain_remote");
  p.stop_servers = config.Bool("cluster.stop_servers");
  p.curve = config.Bool(kCurveKey);
  p.keys_dir = config.String(kKeysDirKey);
  p.client_key = config.String(kClientKeyKey);
  return p;
}

std::vector<std::string> ClusterPlan::AddressAssignments(const std::string& ps,
                                                         const std::string& worker,
                                                         const std::string& coordinator,
                                                         const std::string& evaluator) {
  return {std::string(kPsKey) + "=" + ps, std::string(kWorkerKey) + "=" + worker,
          std::string(kCoordinatorKey) + "=" + coordinator,
          std::string(kEvaluatorKey) + "=" + evaluator};
}

void ClusterPlan::SetAddresses(Config& config, const std::string& ps, const std::string& worker,
                               const std::string& coordinator, const std::string& evaluator) {
  config.Set(kPsKey, ps);
  config.Set(kWorkerKey, worker);
  config.Set(kCoordinatorKey, coordinator);
  config.Set(kEvaluatorKey, evaluator);
}

}  // namespace asgd::experiments
