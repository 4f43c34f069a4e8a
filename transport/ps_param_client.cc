#include "transport/ps_param_client.h"

namespace asgd::transport {

using ps::PushOutcome;
using ps::PushPart;
using ps::PushPartsOf;
using ps::Status;

void PsParamClient::DoMarkWindowStart() {
  const std::span<const uint64_t> pulled = client_->pulled_versions();
  window_versions_.assign(pulled.begin(), pulled.end());
}

PushOptions PsParamClient::TakePushOptions(int64_t step) {
  PushOptions o;
  o.clock = step;
  o.oldest_versions = window_versions_;  // empty without a mark; the span outlives the call
  return o;
}

Status PsParamClient::DoPush(std::span<const float> update, int64_t step) {
  const PushOptions o = TakePushOptions(step);
  RequestHandle h = client_->Push(update, o);
  window_versions_.clear();
  return Finish(h);
}

std::vector<PushPart> PsParamClient::PushParts() const { return PushPartsOf(client_->placement()); }

Status PsParamClient::DoPushEncoded(std::span<const compression::Encoded> parts,
                                    std::span<float> out, int64_t step) {
  const PushOptions o = TakePushOptions(step);
  RequestHandle h = client_->PushEncoded(parts, out, o);
  window_versions_.clear();
  return Finish(h);
}

Status PsParamClient::DoPushPull(std::span<const float> update, std::span<float> out,
                                 int64_t step) {
  const PushOptions o = TakePushOptions(step);
  RequestHandle h = client_->PushPull(update, out, o);
  window_versions_.clear();
  return Finish(h);
}

Status PsParamClient::Finish(RequestHandle& handle) {
  Status st = handle.Wait();
  // Per shard, also when another shard failed the request (e.g. closed at the end of a
  // run): a shard that answered "dropped" dropped it, whatever the others did.
  for (const ShardResult& r : handle.results()) {
    if (r.replied && r.status.ok() && r.outcome == PushOutcome::kDropped) ++dropped_;
  }
  return st;
}

}  // namespace asgd::transport
