#include "experiments/run/collective_rank.h"

#include <algorithm>
#include <exception>

#include "core/check.h"
#include "core/error.h"
#include "experiments/config/setup.h"

namespace asgd::experiments {

namespace alg = ::asgd::algorithms;
namespace col = ::asgd::collective;
using ::asgd::internal::StrCat;

CollectivePlan CollectivePlan::Make(const Config& config, const alg::Strategy& strategy,
                                    const alg::StrategyOptions& options,
                                    const std::vector<std::vector<int64_t>>& partitions,
                                    int64_t train_examples) {
  CollectivePlan p;
  p.workers = static_cast<int>(partitions.size());
  p.period = strategy.steps_per_round(options);
  p.vote_every = ((kVoteSteps + p.period - 1) / p.period) * p.period;
  p.batch_size = config.Int("algorithm.batch_size");
  p.train_examples = train_examples;
  for (const auto& part : partitions)
    p.partition_sizes.push_back(static_cast<int64_t>(part.size()));
  p.schedule = BuildScheduleOptions(config);
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

WorkerOutcome RunCollectiveRank(WorkerLoop& loop, const CollectivePlan& plan, const Config& config,
                                int rank, col::Collective& payload, col::Collective& control,
                                std::span<const float> initial, const CollectiveRankHooks& hooks) {
  WorkerOutcome outcome;
  try {
    const StopPolicy stop = StopPolicy::FromConfig(config, plan.train_examples);
    // This rank's copy of the schedule by samples (its time part is the driver's).
    EvalSchedule due_by_samples = EvalSchedule::FromConfig(config, plan.train_examples);
    const int n = plan.workers;
    int64_t step = plan.first_step;
    if (step > 0) due_by_samples.Evaluated(plan.SamplesAtStep(step), 0.0, false);
    const alg::WorkerRule* rule = nullptr;
    std::vector<float> vote(static_cast<std::size_t>(n) + 3);
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
          std::fill(vote.begin(), vote.end(), 0.0f);
          vote[0] = hooks.stop_wanted() ? 1.0f : 0.0f;
          const int64_t wanted = hooks.eval_wanted();
          vote[1] = wanted > 0 ? 1.0f : 0.0f;
          vote[2] = hooks.checkpoint_wanted && hooks.checkpoint_wanted() ? 1.0f : 0.0f;
          vote[3 + static_cast<std::size_t>(rank)] = static_cast<float>(wanted);
          control.Allreduce(vote, col::ReduceOp::kSum);
          done = done || vote[0] > 0;
          hold = hold || vote[1] > 0;
          checkpoint = vote[2] > 0;
          for (int r = 0; r < n; ++r) {
            eval_id =
                std::max(eval_id, static_cast<int64_t>(vote[3 + static_cast<std::size_t>(r)]));
          }
        }
        if (done || hold || checkpoint) {
          // θ̄ = θ_0 + mean(θ_i − θ_0): exactly θ_0 when the replicas are identical
          // (allreduce_sgd; local_sgd after its averaging), where mean(θ_i) rounds (N·θ)/N
          // and would move a checkpoint or an evaluation off the replicas' bits. θ_0 comes
          // to every rank by an exact sum (rank 0's vector plus zeros).
          const std::span<const float> params = rule->local_params();
          std::vector<float> reference(params.size(), 0.0f);
          if (rank == 0) std::copy(params.begin(), params.end(), reference.begin());
          control.Allreduce(reference, col::ReduceOp::kSum);
          std::vector<float> average(params.size());
          for (std::size_t k = 0; k < average.size(); ++k) average[k] = params[k] - reference[k];
          control.Allreduce(average, col::ReduceOp::kMean);
          for (std::size_t k = 0; k < average.size(); ++k) average[k] += reference[k];
          double d = 0;
          for (std::size_t k = 0; k < average.size(); ++k) {
            const double diff = static_cast<double>(params[k]) - static_cast<double>(average[k]);
            d += diff * diff;
          }
          float distance[1] = {static_cast<float>(d)};
          control.Allreduce(distance, col::ReduceOp::kMean);
          CollectiveBoundary b;
          b.rank = rank;
          b.step = step;
          b.samples = samples_now;
          b.final = done;
          b.evaluate = hold && !done;
          b.checkpoint = checkpoint;
          b.eval_id = eval_id;
          b.average = average;
          b.consensus = static_cast<double>(distance[0]);
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
