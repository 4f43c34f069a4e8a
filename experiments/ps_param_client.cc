#include "experiments/ps_param_client.h"

namespace asgd::experiments {

algorithms::Status PsParamClient::DoPush(std::span<const float> update, int64_t step) {
  transport::PushOptions o;
  o.clock = step;
  transport::RequestHandle h = client_->Push(update, o);
  return Finish(h);
}

algorithms::Status PsParamClient::DoPushPull(std::span<const float> update, std::span<float> out,
                                           int64_t step) {
  transport::PushOptions o;
  o.clock = step;
  transport::RequestHandle h = client_->PushPull(update, out, o);
  return Finish(h);
}

algorithms::Status PsParamClient::Finish(transport::RequestHandle& handle) {
  algorithms::Status st = handle.Wait();
  // Per shard, also when another shard failed the request (e.g. closed at the end of a
  // run): a shard that answered "dropped" dropped it, whatever the others did.
  for (const transport::ShardResult& r : handle.results()) {
    if (r.replied && r.status.ok() && r.outcome == transport::PushOutcome::kDropped) ++dropped_;
  }
  return st;
}

}  // namespace asgd::experiments
