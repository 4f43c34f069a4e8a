// ParamClientWrapper: a ParamClient that forwards every call to another one (leveldb's
// EnvWrapper idea). What wraps a client -- injected delays for stragglers, compression
// with error feedback, tracing, fault injection in tests -- derives from it and overrides
// only the calls it changes, so it stacks on any client (in-memory, ZeroMQ, simulated)
// without a branch inside each (docs/architecture.md#client-layers-and-compression). A
// worker's layers are stacked in one place, NewClientChain (client_chain.h).
//
// Accounting: the public ParamClient calls count the traffic that passes through each
// layer, so a wrapper's traffic() is what its caller moved and target()->traffic() what
// reached the client below (a compressing wrapper shows the ratio between the two).
// Forwarding goes through the target's public calls, so the target keeps its own counts.
//
// Ownership: a wrapper either owns its target (unique_ptr constructor) or borrows it
// (raw pointer constructor; the target must outlive the wrapper).
//
// Thread safety: as the target's: one worker thread uses the stack.
#pragma once

#include <memory>
#include <span>

#include "ps/param_client.h"

namespace asgd::ps {

class ParamClientWrapper : public ParamClient {
 public:
  // Borrows target. REQUIRES: target != nullptr (checked).
  explicit ParamClientWrapper(ParamClient* target);
  // Owns target. REQUIRES: target != nullptr (checked).
  explicit ParamClientWrapper(std::unique_ptr<ParamClient> target);
  ~ParamClientWrapper() override;

  ParamClient* target() const { return target_; }

  int64_t size() const override { return target_->size(); }
  int64_t dropped_pushes() const override { return target_->dropped_pushes(); }
  std::vector<PushPart> PushParts() const override { return target_->PushParts(); }
  bool TakesEncodedPushes() const override { return target_->TakesEncodedPushes(); }
  const Traffic& wire_traffic() const override { return target_->wire_traffic(); }

 protected:
  Status DoPull(std::span<float> out) override { return target_->Pull(out); }
  Status DoPush(std::span<const float> update, int64_t step) override {
    return target_->Push(update, step);
  }
  Status DoPushPull(std::span<const float> update, std::span<float> out, int64_t step) override {
    return target_->PushPull(update, out, step);
  }
  Status DoSendClock(int64_t clock) override { return target_->SendClock(clock); }
  void DoMarkWindowStart() override { target_->MarkWindowStart(); }
  Status DoPushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                       int64_t step) override {
    return target_->PushEncoded(parts, out, step);
  }
  Status DoPullSparse(std::span<const int64_t> indices, std::span<float> out) override {
    return target_->PullSparse(indices, out);
  }
  Status DoPushSparse(std::span<const int64_t> indices, std::span<const float> values,
                      int64_t step) override {
    return target_->PushSparse(indices, values, step);
  }

 private:
  std::unique_ptr<ParamClient> owned_;
  ParamClient* target_;
};

}  // namespace asgd::ps
