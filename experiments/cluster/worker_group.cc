// A group's worker process (worker_process.h), for a strategy on a collective
// (allreduce_sgd, local_sgd, dpsgd): one rank, its loop WorkAsRank on the process's pace.
//
// Where the ranks meet. gloo's file store in a folder of the run that the coordinator
// creates afresh for each attempt and names in its RegisterReply (collective_dir,
// subfolders payload/ and control/ for the two groups), rather than a store carried over
// the coordinator's control channel: gloo reads and writes the file store itself, with
// its own waits and timeouts, so the coordinator needs no key/value service and the
// ranks' addresses never pass through it; the cost is that the ranks must share a file
// system with the coordinator (one host under `asgd launch`; a shared folder under SLURM
// or mpirun on several hosts). Each rank listens on the host of its cluster.worker entry.
//
// What the coordinator does for it: the run folder and its record (convergence.csv,
// workers.csv from the reports, staleness.csv, summary.csv), the initial evaluation,
// the time limit, the target, the evaluations by seconds (WorkerReply::evaluate, which
// the ranks vote on), and naming the rank a failed collective lost. What the ranks do
// themselves: stop at the epoch and step limits and hold at the evaluations by epochs
// (collective_rank.h); rank 0 evaluates the average and reports it
// (WorkerReport::evaluation). The coordinator's sample budgets do not apply: a rank
// cannot stop alone.
#include <chrono>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "collective/collective.h"
#include "core/check.h"
#include "core/error.h"
#include "experiments/cluster/cluster_common.h"
#include "experiments/cluster/worker_process.h"
#include "experiments/run/collective_rank.h"
#include "experiments/run/family_session.h"
#include "ps/checkpoint.h"

namespace asgd::experiments::cluster {
namespace {

namespace col = ::asgd::collective;
namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

// This rank's options of the gloo group: the plan's (its size, collective.algorithm and
// collective.timeout_ms), its rank, and the host of its worker address (gloo listens there).
col::CollectiveOptions RankOptions(const Setup& s, int w) {
  col::CollectiveOptions co = s.problem.plan.collective;
  co.rank = w;
  const std::string& address = s.spec.worker[static_cast<std::size_t>(w)];
  co.host = address.substr(0, address.rfind(':'));
  co.Validate();
  return co;
}

// A worker process's peers (family_session.h's Fabric): its rank's gloo groups, meeting
// through gloo's file store in the attempt's collective folder (payload/ and control/).
class ProcessFabric final : public Fabric {
 public:
  // options: this rank's (RankOptions).
  ProcessFabric(col::CollectiveOptions options, std::string collective_dir)
      : options_(std::move(options)), dir_(std::move(collective_dir)) {}

  std::unique_ptr<ps::ParamStore> NewStore(std::span<const float> /*initial*/) override {
    ASGD_CHECK(false, "a worker process of a group builds no store");
    return nullptr;
  }
  std::unique_ptr<col::Collective> Payload(int /*w*/) override { return Connect("/payload"); }
  std::unique_ptr<col::Collective> Control(int /*w*/) override { return Connect("/control"); }
  // Seconds since this process's fabric was made (steady clock).
  double StepTime() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  std::string GroupTransport() const override {
    return StrCat("gloo-", col::AlgorithmName(options_.algorithm));
  }
  std::string DescribeGroup() const override {
    return StrCat("gloo (", col::AlgorithmName(options_.algorithm), ", tcp, rendezvous in ", dir_,
                  ")");
  }

 private:
  std::unique_ptr<col::Collective> Connect(const std::string& sub) const {
    return col::Connect(options_, col::NewFileRendezvous(dir_ + sub));
  }

  const col::CollectiveOptions options_;
  const std::string dir_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The parameters every rank starts from: the seed's, or in a resumed run the
// checkpoint's average, with plan->first_step its boundary.
std::vector<float> StartingPoint(const Setup& s, const RegisterReply& registered, int w,
                                 CollectivePlan* plan, std::ostream& out) {
  std::vector<float> initial = s.Initial();
  if (!registered.restore) return initial;
  const std::string& file = registered.restore->file;
  ps::ShardCheckpoint c = ReadRestoreOrder(*registered.restore);
  if (c.snapshot.values.size() != initial.size()) {
    throw DataError(file, StrCat("holds ", c.snapshot.values.size(), " parameters, the model has ",
                                 initial.size()));
  }
  plan->first_step = static_cast<int64_t>(c.snapshot.version);
  out << "worker " << w << ": resuming at step " << plan->first_step << " from " << file
      << std::endl;
  return std::move(c.snapshot.values);
}

class GroupWorker final : public WorkerFamily {
 public:
  // The rank's options are checked here, before it registers.
  GroupWorker(const Setup& s, int w) : s_(s), w_(w), options_(RankOptions(s, w)) {}

  void Open(std::shared_ptr<tp::Context> /*context*/, const RegisterReply& registered,
            std::ostream& out) override {
    if (registered.collective_dir.empty()) {
      throw InputError(StrCat("worker ", w_, ": the coordinator named no collective folder (is ",
                              "it running the same config?)"));
    }
    plan_ = CollectivePlan::Make(s_.problem.plan, s_.problem.strategy_options,
                                 s_.problem.partitions, s_.problem.data.train.num_examples);
    initial_ = StartingPoint(s_, registered, w_, &plan_, out);
    fabric_ = std::make_unique<ProcessFabric>(options_, registered.collective_dir);
  }

  // One rate for the replicas; a resumed run continues this worker's sequence of batches.
  void SetUp(WorkerSetup& ws) const override {
    ws.learning_rate = s_.problem.plan.learning_rate;
    ws.skip_batches = plan_.first_step;
  }

  WorkerOutcome Work(WorkerLoop& loop, ProcessPace& pace) override {
    return WorkAsRank(plan_, w_, loop, *fabric_, pace, initial_, pace.Record());
  }

  std::string Account(const WorkerMetrics& m) const override {
    return StrCat(m.pushes, " communication rounds; sent ", m.bytes_pushed, " B, received ",
                  m.bytes_pulled, " B through the collective");
  }

 private:
  const Setup& s_;
  const int w_;
  const col::CollectiveOptions options_;
  CollectivePlan plan_;
  std::vector<float> initial_;
  std::unique_ptr<ProcessFabric> fabric_;
};

}  // namespace

std::unique_ptr<WorkerFamily> NewGroupWorker(const Setup& s, int w) {
  return std::make_unique<GroupWorker>(s, w);
}

}  // namespace asgd::experiments::cluster
