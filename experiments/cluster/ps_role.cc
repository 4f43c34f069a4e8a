// The parameter-server shard of a multi-process training run (cluster_run.h).
#include <mutex>
#include <ostream>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "experiments/cluster/cluster_common.h"
#include "experiments/cluster/cluster_run.h"
#include "experiments/cluster/launch.h"
#include "experiments/config/exit_status.h"
#include "experiments/config/setup.h"
#include "experiments/config/signals.h"
#include "experiments/record/checkpoint.h"
#include "experiments/run/server_bounds.h"
#include "ps/checkpoint.h"
#include "transport/shard_server.h"

namespace asgd::experiments {
namespace {

namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

// Keeps staleness records until the next report takes them. Thread-safe.
class BufferedRecords final : public ps::StalenessSink {
 public:
  void Record(const ps::StalenessRecord& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(r);
  }
  std::vector<ps::StalenessRecord> Take() {
    std::vector<ps::StalenessRecord> taken;
    std::lock_guard<std::mutex> lock(mu_);
    taken.swap(records_);
    return taken;
  }

 private:
  std::mutex mu_;
  std::vector<ps::StalenessRecord> records_;
};

}  // namespace

int RunTrainingPsRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  cluster::Setup s = cluster::MakeSetup(config, request, "ps");
  const int shard = s.spec.task_index;
  BlockedStopSignals signals;  // before any thread starts
  auto context = tp::NewContext();
  cluster::WallClock wall;
  BufferedRecords records;
  tp::ServerOptions options;
  options.shard = static_cast<uint32_t>(shard);
  options.endpoint = s.spec.PsBindAddress(shard, s.cluster().bind_host);
  options.clock = &wall;
  options.staleness_sink = &records;
  options.curve = s.curve;
  options.allow_plain_remote = s.cluster().allow_plain_remote;
  ApplyServerBounds(s.problem.plan, &options);
  // The coordinator stops this shard through its reports, never with a stop request;
  // one is obeyed only with the run's token all the same.
  options.stop_token = RunTokenFromEnvironment();
  tp::ShardServer server(context, options, s.placement.Gather(shard, s.Initial()),
                         s.problem.plan.strategy->server_rule(s.problem.strategy_options,
                                                              static_cast<uint32_t>(shard)));
  // Registered before serving: a restarted shard first restores its range from the
  // checkpoint the coordinator names (requests queue until then).
  cluster::CoordinatorLink link(context, s, "ps", shard);
  const RegisterReply registered = link.Register();
  if (registered.restore) {
    const std::string& file = registered.restore->file;
    ps::ShardCheckpoint c = cluster::ReadRestoreOrder(*registered.restore);
    if (c.snapshot.shard != static_cast<uint32_t>(shard)) {
      throw DataError(file, StrCat("is shard ", c.snapshot.shard, "'s, not ", shard, "'s"));
    }
    server.Restore(c.snapshot);
    out << "ps " << shard << ": restored version " << c.snapshot.version << " from " << file
        << std::endl;
  }
  server.Start();
  out << "ps " << shard << ": serving " << s.placement.shard_size(shard) << " of "
      << s.problem.model->layout().size() << " parameters (" << server.rule_name() << ") at "
      << server.endpoint() << std::endl;
  int status = kExitOk;
  std::optional<SavedShard>
      saved;             // the last checkpoint file written, until the coordinator has it
  int live_workers = 0;  // as the coordinator last said
  for (;;) {
    if (const int sig = signals.Wait(link.interval())) {
      out << "ps " << shard << ": " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping"
          << std::endl;
      status = kExitBadInput;
      break;
    }
    PsReport body;
    body.task = shard;
    body.records = records.Take();
    body.version = server.stats().version;
    body.saved = saved;
    auto reply = link.Report(body, s.timeout);
    if (!reply) {
      if (link.Lost()) {
        out << "ps " << shard << ": the coordinator stopped answering; stopping" << std::endl;
        status = kExitBadInput;
        break;
      }
      continue;
    }
    if (reply->checkpoint) {
      const int64_t step = reply->checkpoint->step;
      if (!saved || saved->step != step) {
        try {
          const CheckpointManifest::Shard e =
              WriteShardFile(reply->checkpoint->dir, static_cast<std::size_t>(shard),
                             server.Snapshot(), server.rule_name());
          saved = SavedShard{step, e.file, e.sha256, e.version, e.elements};
        } catch (const IoError& e) {
          ASGD_LOG(kError, "ps ", shard, ": checkpoint failed: ", e.what());
        }
      }
    }
    // The run's live workers (a worker lost or back): synchronous rules re-form rounds.
    const int live = reply->live_workers;
    if (live > 0 && live != live_workers) {
      if (live_workers > 0) out << "ps " << shard << ": " << live << " live workers" << std::endl;
      live_workers = live;
      server.SetLiveWorkers(live);
    }
    if (reply->close && !server.closed()) server.Close();
    if (reply->stop) break;
  }
  server.Shutdown();
  PsReport last;
  last.task = shard;
  last.records = records.Take();
  last.done = true;
  (void)link.Report(last, s.report_interval * 10);
  const tp::ShardStats st = server.stats();
  out << "ps " << shard << ": stopped at version " << st.version << " after " << st.requests
      << " requests (" << st.pushes_applied + st.pushes_accepted << " pushes, " << st.chunked_pushes
      << " in chunks, " << st.pushes_dropped << " dropped, " << st.pulls << " pulls, "
      << st.chunked_replies << " replies in chunks, " << st.errors << " error replies)"
      << std::endl;
  out << cluster::PeerBoundsLine(shard, st) << std::endl;
  return status;
}

}  // namespace asgd::experiments
