#include "experiments/run/collective_rank.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <exception>

#include "core/check.h"
#include "core/error.h"
#include "core/rng.h"

namespace asgd::experiments {

namespace alg = ::asgd::algorithms;
namespace col = ::asgd::collective;
using ::asgd::internal::StrCat;

namespace {

// A 64-bit hash of the bits of `v` (four multiply-rotate lanes over 64-bit words, then
// SplitMix64 over the lanes and the length): -0 and 0, or two NaNs, hash apart.
uint64_t HashBits(std::span<const float> v) {
  constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full;
  std::array<uint64_t, 4> lane = {kP1, kP2, kP1 ^ kP2, kP1 + kP2};
  const std::size_t words = v.size() / 2;
  const std::size_t blocks = words / 4;
  const char* bytes = reinterpret_cast<const char*>(v.data());
  auto word = [&](std::size_t i) {
    uint64_t w;
    std::memcpy(&w, bytes + i * sizeof(uint64_t), sizeof(w));
    return w;
  };
  for (std::size_t b = 0; b < blocks; ++b) {
    for (std::size_t j = 0; j < 4; ++j) {
      lane[j] = std::rotl(lane[j] + word(4 * b + j) * kP2, 31) * kP1;
    }
  }
  uint64_t h = SplitMix64(static_cast<uint64_t>(v.size()));
  for (uint64_t l : lane) h = SplitMix64(h ^ l);
  for (std::size_t i = 4 * blocks; i < words; ++i) h = SplitMix64(h ^ word(i));
  if (v.size() % 2 != 0) h = SplitMix64(h ^ std::bit_cast<uint32_t>(v.back()));
  return h;
}

// Whether every rank's `v` has the same bits (up to a hash collision, odds 2^-64): the
// hash's four 16-bit pieces and their negations, reduced by their maximum (exact in
// float), agree on every rank iff each piece's maximum equals its minimum. Every rank
// must call it at the same point with vectors of equal length.
bool SameOnEveryRank(std::span<const float> v, col::Collective& control) {
  const uint64_t h = HashBits(v);
  std::array<float, 8> pieces{};
  for (std::size_t k = 0; k < 4; ++k) {
    const auto piece = static_cast<float>((h >> (16 * k)) & 0xffffu);
    pieces[k] = piece;
    pieces[4 + k] = -piece;
  }
  control.Allreduce(pieces, col::ReduceOp::kMax);
  for (std::size_t k = 0; k < 4; ++k) {
    if (pieces[k] != -pieces[4 + k]) return false;
  }
  return true;
}

}  // namespace

CollectivePlan CollectivePlan::Make(const RunPlan& run, const alg::StrategyOptions& options,
                                    const std::vector<std::vector<int64_t>>& partitions,
                                    int64_t train_examples) {
  CollectivePlan p;
  p.workers = static_cast<int>(partitions.size());
  p.period = run.strategy->steps_per_round(options);
  p.vote_every = ((kVoteSteps + p.period - 1) / p.period) * p.period;
  p.batch_size = run.batch_size;
  p.train_examples = train_examples;
  for (const auto& part : partitions)
    p.partition_sizes.push_back(static_cast<int64_t>(part.size()));
  p.schedule = run.schedule;
  p.stop = run.MakeStopPolicy(train_examples);
  p.evals = run.MakeEvalSchedule(train_examples);
  return p;
}

int64_t CollectivePlan::SamplesAtStep(int64_t s, int rank) const {
  const int64_t p = partition_sizes[static_cast<std::size_t>(rank)];
  const int64_t per_pass = (p + batch_size - 1) / batch_size;
  return (s / per_pass) * p + (s % per_pass) * batch_size;
}

int64_t CollectivePlan::SamplesAtStep(int64_t s) const {
  int64_t total = 0;
  for (int r = 0; r < workers; ++r) total += SamplesAtStep(s, r);
  return total;
}

WorkerOutcome RunCollectiveRank(WorkerLoop& loop, const CollectivePlan& plan, int rank,
                                col::Collective& payload, col::Collective& control,
                                std::span<const float> initial, const CollectiveRankHooks& hooks) {
  WorkerOutcome outcome;
  try {
    ASGD_CHECK(plan.stop && plan.evals, "a collective plan from CollectivePlan::Make");
    const StopPolicy& stop = *plan.stop;
    // This rank's copy of the schedule by samples (its time part is the driver's).
    EvalSchedule due_by_samples = *plan.evals;
    const int n = plan.workers;
    int64_t step = plan.first_step;
    if (step > 0) due_by_samples.Evaluated(plan.SamplesAtStep(step), 0.0, false);
    const alg::WorkerRule* rule = nullptr;
    // [stop, checkpoint, evaluation id], reduced by their maximum: three floats whatever N
    // (a vote of N + 3 summed slots cost local_sgd 5-10 % of its samples/s with 4 ranks on
    // 2 cores: a small allreduce is latency, and every non-empty ring segment adds hops).
    std::array<float, 3> vote{};
    WorkerHooks wh;
    wh.started = [&](const alg::WorkerRule& r) { rule = &r; };
    wh.before_step = [&](double* lr_scale) {
      const int64_t samples_now = plan.SamplesAtStep(step);
      if (step % plan.period == 0) {
        bool done = !stop.WorkMayContinue(samples_now, step * n);
        bool hold = step > plan.first_step && due_by_samples.Due(samples_now, 0.0);
        bool checkpoint = false;
        int64_t eval_id = 0;
        if (step % plan.vote_every == 0) {
          vote[0] = hooks.stop_wanted() ? 1.0f : 0.0f;
          vote[1] = hooks.checkpoint_wanted && hooks.checkpoint_wanted() ? 1.0f : 0.0f;
          vote[2] = static_cast<float>(std::max<int64_t>(hooks.eval_wanted(), 0));
          control.Allreduce(vote, col::ReduceOp::kMax);
          done = done || vote[0] > 0;
          checkpoint = vote[1] > 0;
          eval_id = static_cast<int64_t>(vote[2]);
          hold = hold || eval_id > 0;
        }
        if (done || hold || checkpoint) {
          // θ̄ is the replicas' own bits when they agree (allreduce_sgd; local_sgd after
          // its averaging), where mean(θ_i) rounds (N·θ)/N and would move a checkpoint or an
          // evaluation off them; it costs one 8-float allreduce then. Otherwise θ̄ is
          // mean(θ_i) and the consensus distance (1/N)·Σ‖θ_i − θ̄‖².
          // θ̄ is read in the hook only (the drivers copy it there), so agreeing replicas
          // lend their own vector: no rank holds a copy (a simulation holds every rank's
          // at once at a boundary).
          const std::span<const float> params = rule->local_params();
          std::vector<float> average;
          std::span<const float> theta_bar = params;
          double consensus = 0;
          if (!SameOnEveryRank(params, control)) {
            average.assign(params.begin(), params.end());
            theta_bar = average;
            control.Allreduce(average, col::ReduceOp::kMean);
            double d = 0;
            for (std::size_t k = 0; k < average.size(); ++k) {
              const double diff = static_cast<double>(params[k]) - static_cast<double>(average[k]);
              d += diff * diff;
            }
            float distance[1] = {static_cast<float>(d)};
            control.Allreduce(distance, col::ReduceOp::kMean);
            consensus = static_cast<double>(distance[0]);
          }
          CollectiveBoundary b;
          b.rank = rank;
          b.step = step;
          b.samples = samples_now;
          b.final = done;
          b.evaluate = hold && !done;
          b.checkpoint = checkpoint;
          b.eval_id = eval_id;
          b.average = theta_bar;
          b.consensus = consensus;
          hooks.boundary(b);
          if (done) return false;
          if (hold) due_by_samples.Evaluated(samples_now, 0.0, false);
        }
      }
      *lr_scale = alg::LearningRateScale(plan.schedule, plan.EpochsAtStep(step));
      ++step;
      return true;
    };
    wh.after_step = [&](const alg::StepResult& r, int64_t batch) {
      if (hooks.after_step) hooks.after_step(r, batch, step);
    };
    wh.ending = [] { return false; };
    outcome = loop.Run(payload, initial, wh);
    // A rank that closes its connections while a peer finishes an operation fails it.
    if (outcome.failure.empty()) {
      payload.Barrier();
      control.Barrier();
    }
  } catch (const std::exception& e) {
    outcome.failure = StrCat("worker ", rank, ": ", e.what());
  }
  return outcome;
}

}  // namespace asgd::experiments
