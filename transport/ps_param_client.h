// The ZeroMQ parameter-server client (PsClient) as the strategies'
// ParamClient (algorithms/strategy.h): the adapter experiments/ wires between the two
// peer layers, which never include each other's implementation headers.
//
// Thread safety: one per worker thread, as PsClient.
#pragma once

#include <memory>
#include <vector>

#include "ps/param_client.h"
#include "transport/ps_client.h"

namespace asgd::transport {

class PsParamClient final : public ps::ParamClient {
 public:
  explicit PsParamClient(std::unique_ptr<PsClient> client) : client_(std::move(client)) {}

  int64_t size() const override { return client_->placement().total_elements(); }
  // Counted per shard: a push that two shards dropped counts twice.
  int64_t dropped_pushes() const override { return dropped_; }

  PsClient& client() { return *client_; }

 protected:
  ps::Status DoPull(std::span<float> out) override { return client_->PullAndWait(out); }
  ps::Status DoPush(std::span<const float> update, int64_t step) override;
  ps::Status DoPushPull(std::span<const float> update, std::span<float> out, int64_t step) override;
  ps::Status DoSendClock(int64_t clock) override { return client_->SendClock(clock).Wait(); }
  void DoMarkWindowStart() override;
  // One part per shard, its placement ranges.
  std::vector<ps::PushPart> PushParts() const override;
  bool TakesEncodedPushes() const override { return true; }
  ps::Status DoPushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                           int64_t step) override;

 private:
  ps::Status Finish(RequestHandle& handle);
  // The push options of a push at `step`, using up the window mark.
  PushOptions TakePushOptions(int64_t step);

  std::unique_ptr<PsClient> client_;
  // The versions pulled at the last MarkWindowStart; empty when no mark is pending.
  std::vector<uint64_t> window_versions_;
  int64_t dropped_ = 0;
};

}  // namespace asgd::transport
