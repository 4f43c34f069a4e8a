#include "algorithms/sync_rule.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {

using transport::PushOutcome;

SyncRule::SyncRule(int replicas_to_aggregate, Combine combine, std::string name)
    : configured_n_(replicas_to_aggregate),
      n_(replicas_to_aggregate),
      combine_(combine),
      name_(std::move(name)) {
  ASGD_CHECK(n_ >= 1, "replicas_to_aggregate must be >= 1");
}

SyncRule::Combine SyncRule::FromAggregation(const std::string& aggregation) {
  if (aggregation == "mean") return Combine::kMeanAdd;
  if (aggregation == "sum") return Combine::kSumAdd;
  throw ConfigError("algorithm.aggregation", aggregation, "mean or sum");
}

void SyncRule::Start(transport::ShardContext& ctx) { count_ = ctx.size(); }

PushOutcome SyncRule::OnPush(transport::ShardContext& ctx, transport::ServerCall& call) {
  const transport::RequestInfo& info = call.info();
  // Stale (computed on an older version), or a second push by the same worker in this
  // round: dropped, answered now with the current values.
  if (info.version < ctx.version() || round_.count(info.worker) != 0) {
    return PushOutcome::kDropped;
  }
  std::vector<float>& slot = round_[info.worker];
  slot.assign(static_cast<std::size_t>(count_), 0.0f);
  // A push covers [offset, offset + count) of the shard; the rest of the slot stays 0.
  for (const auto& piece : call.payload().pieces()) {
    std::copy(piece.values.begin(), piece.values.end(),
              slot.begin() + static_cast<std::ptrdiff_t>(piece.offset));
  }
  if (static_cast<int>(round_.size()) < n_) {
    held_.push_back(call.Defer());
    return PushOutcome::kAccepted;
  }
  // The N-th fresh push: combine in worker order, apply, release the others; this one is
  // answered when the call returns (a rule cannot release its own call's token).
  Complete(ctx);
  return PushOutcome::kAccepted;
}

void SyncRule::OnMembership(transport::ShardContext& ctx, int live_workers) {
  n_ = std::max(1, std::min(configured_n_, live_workers));
  if (!round_.empty() && static_cast<int>(round_.size()) >= n_) Complete(ctx);
}

void SyncRule::Complete(transport::ShardContext& ctx) {
  const auto pushes = static_cast<float>(round_.size());
  std::vector<float> sum(static_cast<std::size_t>(count_), 0.0f);
  for (const auto& [worker, u] : round_) transport::AddTo(sum, u);
  auto values = ctx.mutable_values();
  switch (combine_) {
    case Combine::kMeanAdd:
      transport::AddScaledTo(values, 1.0f / pushes, sum);
      break;
    case Combine::kSumAdd:
      transport::AddTo(values, sum);
      break;
    case Combine::kMeanReplace: {
      const float inv = 1.0f / pushes;
      for (std::size_t i = 0; i < sum.size(); ++i) values[i] = sum[i] * inv;
      break;
    }
  }
  ctx.AdvanceVersion();
  round_.clear();
  std::vector<uint64_t> release;
  release.swap(held_);
  for (uint64_t token : release) ctx.Release(token);
}

}  // namespace asgd::algorithms
