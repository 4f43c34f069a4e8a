// A store's worker process (worker_process.h): a client of the shard servers, its loop
// WorkAsStoreWorker on the process's pace.
#include <memory>
#include <ostream>
#include <string>
#include <utility>

#include "algorithms/exchange.h"
#include "core/check.h"
#include "core/error.h"
#include "experiments/cluster/worker_process.h"
#include "experiments/run/family_session.h"
#include "transport/ps_param_client.h"

namespace asgd::experiments::cluster {
namespace {

namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

class StoreWorker final : public WorkerFamily {
 public:
  StoreWorker(const Setup& s, int w) : s_(s), w_(w) {}

  // This worker's client of the shard servers, once they all answer. Throws InputError
  // ("worker W: the shard servers: ...") when they do not within cluster.timeout_s.
  void Open(std::shared_ptr<tp::Context> context, const RegisterReply& /*registered*/,
            std::ostream& /*out*/) override {
    tp::ClientOptions co;
    co.id = static_cast<uint32_t>(w_);
    co.timeout = s_.timeout;
    co.curve = s_.curve;
    co.chunk_bytes = s_.problem.plan.chunk_bytes;
    client_ = std::make_unique<tp::PsParamClient>(
        tp::PsClient::FromCluster(std::move(context), s_.spec, s_.placement, co));
    const ps::Status servers = client_->client().WaitForServers(s_.timeout);
    if (!servers.ok())
      throw InputError(StrCat("worker ", w_, ": the shard servers: ", servers.ToString()));
  }

  void SetUp(WorkerSetup& /*ws*/) const override {}

  WorkerOutcome Work(WorkerLoop& loop, ProcessPace& pace) override {
    const std::unique_ptr<algorithms::Exchange> exchange =
        algorithms::NewStoreExchange(client_.get());
    return WorkAsStoreWorker(loop, *exchange, pace, pace.Record());
  }

  std::string Account(const WorkerMetrics& m) const override { return StrCat(m.pushes, " pushes"); }

 private:
  const Setup& s_;
  const int w_;
  std::unique_ptr<tp::PsParamClient> client_;
};

}  // namespace

std::unique_ptr<WorkerFamily> NewStoreWorker(const Setup& s, int w) {
  return std::make_unique<StoreWorker>(s, w);
}

}  // namespace asgd::experiments::cluster
