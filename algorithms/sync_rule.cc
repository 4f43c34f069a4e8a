#include "algorithms/sync_rule.h"

#include <algorithm>
#include <cstring>

#include "algorithms/finite_apply.h"
#include "algorithms/strategy.h"
#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {

using ps::PushOutcome;

namespace {

// SaveState's format: this tag, the optimizer's name, a NUL, then its State() floats.
constexpr std::string_view kStateTag = "asgd sync optimizer v1\n";

}  // namespace

SyncRule::SyncRule(int replicas_to_aggregate, Combine combine, std::string name,
                   std::optional<ServerStep> step)
    : configured_n_(replicas_to_aggregate),
      n_(replicas_to_aggregate),
      combine_(combine),
      name_(std::move(name)),
      step_(std::move(step)) {
  ASGD_CHECK(n_ >= 1, "replicas_to_aggregate must be >= 1");
  ASGD_CHECK(!step_ || combine_ != Combine::kMeanReplace, "a server step adds gradients");
  ASGD_CHECK(combine_ != Combine::kSignVote || (step_ && step_->optimizer.name == "sgd"),
             "a sign vote is applied by an sgd server step");
  // Validates the optimizer options now (ConfigError naming the key), not at Start.
  if (step_) (void)NewOptimizer(step_->optimizer, 1);
}

Setting ReplicasSetting() {
  Setting s = IntSetting(
      "replicas_to_aggregate", 0, 0, 1024,
      "N, the fresh pushes one round applies; with N < workers the slowest workers' pushes of "
      "each round are dropped and counted (backup workers); 0 = every worker");
  s.check = [](const StrategyOptions& o) -> std::string {
    if (o.settings.Int("replicas_to_aggregate") <= o.num_workers) return "";
    return internal::StrCat("at most algorithm.workers (", o.num_workers, "); 0 = all");
  };
  return s;
}

Setting AggregationSetting() {
  return ChoiceSetting("aggregation", "mean", {"mean", "sum"},
                       "combine a round's pushes by their mean (TensorFlow's "
                       "SyncReplicasOptimizer) or their sum");
}

int Replicas(const StrategyOptions& o) {
  const auto n = static_cast<int>(o.settings.Int("replicas_to_aggregate"));
  return n > 0 ? n : o.num_workers;
}

SyncRule::Combine SyncRule::FromAggregation(const std::string& aggregation) {
  if (aggregation == "mean") return Combine::kMeanAdd;
  if (aggregation == "sum") return Combine::kSumAdd;
  throw ConfigError("algorithm.aggregation", aggregation, "mean or sum");
}

void SyncRule::Start(ps::ShardContext& ctx) {
  count_ = ctx.size();
  if (step_) optimizer_ = NewOptimizer(step_->optimizer, count_);
}

std::string SyncRule::SaveState() const {
  if (!optimizer_) return {};
  const std::vector<float> slots = optimizer_->State();
  std::string out(kStateTag);
  out += optimizer_->Name();
  out += '\0';
  out.append(reinterpret_cast<const char*>(slots.data()), slots.size() * sizeof(float));
  return out;
}

void SyncRule::LoadState(std::string_view state) {
  if (!optimizer_) {
    ServerRule::LoadState(state);
    return;
  }
  const std::string what = name_ + " server optimizer state";
  if (state.empty()) {
    // A checkpoint from before the optimizer moved to the server holds no slots: only a
    // slot-less optimizer can continue from it exactly.
    if (!optimizer_->State().empty()) {
      throw InputError(what + ": none in the checkpoint, expected the " + optimizer_->Name() +
                       " optimizer's slots (a checkpoint written before sync_sgd applied its "
                       "optimizer on the server; start the run afresh)");
    }
    return;
  }
  if (state.substr(0, kStateTag.size()) != kStateTag) {
    throw InputError(what + ": not a sync optimizer state (expected its format tag)");
  }
  state.remove_prefix(kStateTag.size());
  const std::size_t nul = state.find('\0');
  if (nul == std::string_view::npos) throw InputError(what + ": truncated before its slots");
  const std::string saved(state.substr(0, nul));
  if (saved != optimizer_->Name()) {
    throw InputError(what + ": saved by the " + saved + " optimizer, this run uses " +
                     optimizer_->Name());
  }
  state.remove_prefix(nul + 1);
  const std::size_t expected = optimizer_->State().size();
  if (state.size() != expected * sizeof(float)) {
    throw InputError(what + ": " + std::to_string(state.size()) + " bytes of slots, expected " +
                     std::to_string(expected * sizeof(float)));
  }
  std::vector<float> slots(expected);
  std::memcpy(slots.data(), state.data(), state.size());
  optimizer_->SetState(slots);
}

PushOutcome SyncRule::OnPush(ps::ShardContext& ctx, ps::ServerCall& call) {
  const ps::RequestInfo& info = call.info();
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
  // answered when the call returns (a rule cannot release its own call's token). A round
  // whose result would not be finite is refused with this push (NonFiniteResultError,
  // nothing changed); the others stay held for a fresh N-th push.
  try {
    Complete(ctx);
  } catch (const ps::NonFiniteResultError&) {
    round_.erase(info.worker);
    throw;
  }
  return PushOutcome::kAccepted;
}

void SyncRule::OnMembership(ps::ShardContext& ctx, int live_workers) {
  n_ = std::max(1, std::min(configured_n_, live_workers));
  if (!round_.empty() && static_cast<int>(round_.size()) >= n_) {
    try {
      Complete(ctx);
    } catch (const ps::NonFiniteResultError& e) {
      // No push to refuse here: the round cannot be applied, so its held pushes fail.
      round_.clear();
      std::vector<uint64_t> fail;
      fail.swap(held_);
      for (uint64_t token : fail) ctx.Fail(token, e.what());
    }
  }
}

void SyncRule::Complete(ps::ShardContext& ctx) {
  const auto pushes = static_cast<float>(round_.size());
  std::vector<float> sum(static_cast<std::size_t>(count_), 0.0f);
  if (combine_ == Combine::kSignVote) {
    // Each push votes sign(u_i) in {-1, 0, +1}; the round's direction is the sign of the
    // votes' sum, 0 on a tie. Counts stay exact in float (|sum| <= N).
    for (const auto& [worker, u] : round_) {
      for (std::size_t i = 0; i < sum.size(); ++i) {
        sum[i] += static_cast<float>((u[i] > 0) - (u[i] < 0));
      }
    }
    for (float& v : sum) v = static_cast<float>((v > 0) - (v < 0));
  } else {
    for (const auto& [worker, u] : round_) ps::AddTo(sum, u);  // all or nothing
  }
  auto values = ctx.mutable_values();
  if (optimizer_) {
    // The optimizer writes values and slots in one pass: it steps a copy, and the shard
    // and slots change only when every result is finite (issue 22 item 4).
    std::vector<float> stepped(values.begin(), values.end());
    const std::vector<float> slots = optimizer_->State();
    // The round's gradient (mean or sum, in worker order), one optimizer step at the
    // schedule's rate for this round. The version counts rounds.
    if (combine_ == Combine::kMeanAdd) {
      const float inv = 1.0f / pushes;
      for (float& g : sum) g *= inv;
    }
    const double epoch = static_cast<double>(ctx.version()) * step_->epochs_per_round;
    const auto lr =
        static_cast<float>(step_->learning_rate * LearningRateScale(step_->schedule, epoch));
    optimizer_->Step(stepped, sum, lr);
    const std::vector<float> new_slots = optimizer_->State();
    const uint32_t value_bits = MaxMagnitudeBits(stepped.data(), stepped.size());
    if (std::max(value_bits, MaxMagnitudeBits(new_slots.data(), new_slots.size())) >= 0x7f800000u) {
      optimizer_->SetState(slots);
      const ps::Payload::Piece whole{0, sum};
      RequireFiniteResults(Name() + " round", {&whole, 1}, stepped, value_bits);
      throw ps::NonFiniteResultError(
          Name() + ": the round's optimizer state would not be finite; the shard is unchanged");
    }
    std::copy(stepped.begin(), stepped.end(), values.begin());
  } else {
    switch (combine_) {
      case Combine::kMeanAdd:
        ps::AddScaledTo(values, 1.0f / pushes, sum);
        break;
      case Combine::kSumAdd:
        ps::AddTo(values, sum);
        break;
      case Combine::kMeanReplace: {
        const float inv = 1.0f / pushes;
        for (std::size_t i = 0; i < sum.size(); ++i) values[i] = sum[i] * inv;
        break;
      }
      case Combine::kSignVote:  // always with a server step (constructor)
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
