// The evaluator of a multi-process training run (cluster_run.h).
#include <optional>
#include <ostream>

#include "core/error.h"
#include "experiments/cluster/cluster_common.h"
#include "experiments/cluster/cluster_run.h"
#include "experiments/config/exit_status.h"
#include "experiments/config/signals.h"

namespace asgd::experiments {

namespace tp = ::asgd::transport;

int RunEvaluatorRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  cluster::Setup s = cluster::MakeSetup(config, request, "evaluator");
  if (s.spec.evaluator.empty()) {
    throw ConfigError(ClusterPlan::kEvaluatorKey, "",
                      "the evaluator's address in the cluster (or leave evaluation to the "
                      "coordinator and start no evaluator)");
  }
  BlockedStopSignals signals;
  auto context = tp::NewContext();
  cluster::CoordinatorLink link(context, s, "evaluator", 0);
  const RegisterReply registered = link.Register();
  cluster::CentreEvaluator evaluator(context, s);
  const ps::Status servers = evaluator.WaitForServers();
  if (!servers.ok()) throw InputError("evaluator: the shard servers: " + servers.ToString());
  EvaluatorReport report;  // task 0: the one evaluator
  int64_t done_id = 0;
  int evaluations = 0;
  for (;;) {
    auto reply = link.Report(report, s.timeout);
    report.result.reset();
    if (!reply) {
      if (link.Lost()) {
        out << "evaluator: the coordinator stopped answering; stopping" << std::endl;
        return kExitBadInput;
      }
      continue;
    }
    if (reply->stop) break;
    if (reply->evaluate) {
      const int64_t id = reply->evaluate->id;
      if (id != done_id) {
        const EvalOrder& order = *reply->evaluate;
        const std::optional<models::EvalResult> r = evaluator.Evaluate(order.full);
        if (!r) continue;  // a shard is down: the coordinator asks again
        // The models, into the coordinator's run folder (a file system the roles share,
        // as for checkpoints): the best so far, and the final one (the full evaluation
        // after the workers stopped).
        if (!registered.save_dir.empty()) {
          if (order.best_above) {
            evaluator.SaveBest(r->accuracy(), *order.best_above, registered.save_dir);
          }
          if (order.full) evaluator.SaveFinal(registered.save_dir);
        }
        report.result = EvalResultMessage{id, r->loss_sum, r->correct, r->count};
        done_id = id;
        ++evaluations;
        continue;  // report it at once
      }
    }
    if (signals.Wait(link.interval())) {
      out << "evaluator: interrupted" << std::endl;
      return kExitBadInput;
    }
  }
  report.result.reset();
  report.done = true;
  (void)link.Report(report, s.report_interval * 10);
  out << "evaluator: " << evaluations << " evaluations" << std::endl;
  return kExitOk;
}

}  // namespace asgd::experiments
