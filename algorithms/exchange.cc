#include "algorithms/exchange.h"

#include <vector>

#include "collective/collective.h"
#include "core/check.h"
#include "ps/client_chain.h"
#include "ps/compressing_client.h"
#include "ps/server_rule.h"

namespace asgd::algorithms {
namespace {

class StoreExchange final : public Exchange {
 public:
  explicit StoreExchange(ps::ParamClient* store) : store_(store) {
    ASGD_CHECK(store_ != nullptr, "a store exchange needs the store's client");
  }

  void Open(const ExchangeContext& context, WorkerEnv& env) override {
    ps::ClientChainOptions chain;
    chain.compression = context.compression;
    chain.seed = context.compression_seed;
    chain.worker = context.worker;
    chain.tensors = context.tensors;
    chain.clock = context.clock;
    chain.total = context.comm_total;
    chain.before_call = context.before_call;
    chain_ = ps::NewClientChain(store_, chain);
    env.ps = chain_.client.get();
  }

  // A store's rules push each gradient (or what they make of it) in the Step that
  // computed it: nothing of it is needed after the next store call.
  bool GradientUsedBeforeNextCall() const override { return true; }

  std::optional<ExchangeTraffic> Traffic() const override {
    const ps::ParamClient* client = chain_.client.get();
    if (client == nullptr) return std::nullopt;
    ExchangeTraffic t;
    t.bytes_pushed = client->wire_traffic().bytes_pushed;
    t.dense_bytes_pushed = client->wire_traffic().dense_bytes_pushed;
    t.bytes_pulled = client->traffic().bytes_pulled;
    t.dropped_pushes = client->dropped_pushes();
    return t;
  }

  const ps::CompressingClient* compressing() const override { return chain_.compressing; }

  int64_t PeersFirstNonFinite() override {
    if (chain_.client == nullptr) return -1;
    // It fails harmlessly if the store is shutting down.
    std::vector<float> centre(static_cast<std::size_t>(chain_.client->size()));
    return chain_.client->Pull(centre).ok() ? ps::FindNonFinite(centre) : -1;
  }

 private:
  ps::ParamClient* const store_;
  ps::ClientChain chain_;  // of the open pass
};

class GroupExchange final : public Exchange {
 public:
  GroupExchange(collective::Collective* group, std::span<const float> initial)
      : group_(group), initial_(initial) {
    ASGD_CHECK(group_ != nullptr, "a group exchange needs the worker's rank");
  }

  void Open(const ExchangeContext& /*context*/, WorkerEnv& env) override {
    env.collective = group_;
    env.initial = initial_;
  }

  bool GradientUsedBeforeNextCall() const override { return false; }

  std::optional<ExchangeTraffic> Traffic() const override {
    const collective::CollectiveCounters c = group_->Counters();
    ExchangeTraffic t;
    t.bytes_pushed = static_cast<int64_t>(c.bytes_sent);
    t.dense_bytes_pushed = t.bytes_pushed;
    t.bytes_pulled = static_cast<int64_t>(c.bytes_received);
    return t;
  }

 private:
  collective::Collective* const group_;
  const std::span<const float> initial_;
};

}  // namespace

std::unique_ptr<Exchange> NewStoreExchange(ps::ParamClient* store) {
  return std::make_unique<StoreExchange>(store);
}

std::unique_ptr<Exchange> NewGroupExchange(collective::Collective* group,
                                           std::span<const float> initial) {
  return std::make_unique<GroupExchange>(group, initial);
}

}  // namespace asgd::algorithms
