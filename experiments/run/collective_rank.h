// One rank of a run on a collective (the group family: allreduce_sgd, local_sgd, dpsgd),
// shared by every executor: the worker threads and the simulated tasks of `asgd run`
// (the group's family session, family_session.h) and the worker processes of
// `asgd launch` / `asgd task` (experiments/cluster/worker_group.cc). The driver
// supplies the ranks' two groups (payload: the strategy's traffic, counted in workers.csv;
// control: the votes and averages below, not counted) and hooks for what only it knows.
//
// Agreement. Every rank must take the same steps, so the ranks decide together, at round
// boundaries (Strategy::steps_per_round), when to stop and when to stop for an
// evaluation:
//   - alike on every rank from the step count, without a message: the epoch and step
//     limits (StopPolicy) and the evaluations by epochs (EvalSchedule by samples);
//   - by a vote about every kVoteSteps steps on the control group (a 3-float allreduce
//     taking the maximum: stop, checkpoint, evaluation id): what only the driver knows (a
//     time limit, the target, a failure, an evaluation by seconds, a checkpoint). One
//     rank's wish is enough, and every rank learns the largest evaluation id any rank
//     wanted (exact in float below 2^24 evaluations).
// At such a boundary the ranks first check on the control group whether their parameters
// have the same bits (a 64-bit hash of them, one 8-float allreduce): if so, θ̄ is those
// bits and the consensus distance 0, with no other message (mean(θ_i) would round (N·θ)/N
// and move an evaluation or a checkpoint off the replicas' bits); if not, θ̄ = mean(θ_i)
// and the distance (1/N)·Σ‖θ_i − θ̄‖², two allreduces. Then every rank calls the driver's
// boundary hook, rank 0 with the average. A rank returns from the hook when the driver's
// part is done (threads: the main thread evaluated; processes: rank 0 evaluated and
// reported, the others go straight on and wait in their next collective call, which
// collective.timeout_ms bounds).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "experiments/record/run_core.h"
#include "experiments/run/run_plan.h"
#include "experiments/run/worker_loop.h"

namespace asgd::experiments {

// The workers vote on the driver's wishes about this often (rounded up to a round
// boundary): often enough for a time limit, rarely enough to cost nothing.
inline constexpr int64_t kVoteSteps = 16;

// What every rank derives from the run plan alike (so the ranks agree without a message).
struct CollectivePlan {
  int workers = 1;
  int64_t period = 1;      // steps per round
  int64_t vote_every = 1;  // a multiple of period
  int64_t batch_size = 1;
  int64_t train_examples = 1;
  std::vector<int64_t> partition_sizes;  // per rank
  algorithms::ScheduleOptions schedule;
  // The run's stop rules and its evaluations (their part by samples is the ranks'), for
  // the training set (RunPlan::MakeStopPolicy, MakeEvalSchedule). Set by Make.
  std::optional<StopPolicy> stop;
  std::optional<EvalSchedule> evals;
  // The steps every rank took before this run (a resumed run: its checkpoint's). The
  // limits, the schedule and the evaluations by epochs count from 0 as if the run had
  // not stopped; no evaluation is due at first_step itself (the checkpoint's rows end
  // there). The driver starts each rank's sampler first_step batches in
  // (WorkerSetup::skip_batches).
  int64_t first_step = 0;

  // period from the plan's strategy; partitions as datasets::PartitionIndices made them.
  static CollectivePlan Make(const RunPlan& run, const algorithms::StrategyOptions& options,
                             const std::vector<std::vector<int64_t>>& partitions,
                             int64_t train_examples);
  // The training samples of the first s steps of every worker: each pass over a
  // partition of p examples is ceil(p / B) batches, the last one partial (the sampler's
  // order).
  int64_t SamplesAtStep(int64_t s) const;
  // Rank r's part of it.
  int64_t SamplesAtStep(int64_t s, int rank) const;
  double EpochsAtStep(int64_t s) const {
    return static_cast<double>(SamplesAtStep(s)) / static_cast<double>(train_examples);
  }
};

// A round boundary at which the ranks stop or are held for an evaluation.
struct CollectiveBoundary {
  int rank = 0;
  int64_t step = 0;         // the steps every rank has taken
  int64_t samples = 0;      // plan.SamplesAtStep(step)
  bool final = false;       // the ranks stop here (the final evaluation's parameters)
  bool evaluate = false;    // an evaluation is due here (by epochs or the driver's wish)
  bool checkpoint = false;  // the driver wanted a checkpoint (of the average, at step)
  // The largest evaluation id any rank's driver wanted at the vote (0: none; the
  // evaluation is one by epochs, or the final one).
  int64_t eval_id = 0;
  std::span<const float> average;  // θ̄ (every rank has it), valid during the hook
  double consensus = 0;            // (1/N)·Σ‖θ_i − θ̄‖²
};

struct CollectiveRankHooks {
  // The driver's wishes, read at each vote: stop the run; an evaluation (an id > 0); a
  // checkpoint (optional: none).
  std::function<bool()> stop_wanted;
  std::function<int64_t()> eval_wanted;
  std::function<bool()> checkpoint_wanted;
  // At a boundary (above), on every rank; REQUIRED.
  std::function<void(const CollectiveBoundary&)> boundary;
  // After each step, with the step count so far (optional).
  std::function<void(const algorithms::StepResult&, int64_t batch, int64_t step)> after_step;
};

// Runs rank `rank` of the plan with `loop` (this rank's WorkerLoop) on `payload`, from
// `initial` (rank 0's is broadcast) until the ranks agree to stop or one fails, then
// meets the others at a barrier on both groups (a rank that closes its connections while
// a peer finishes an operation fails it). The outcome's failure names the rank ("worker
// r: ..."): a CollectiveError (a dead or silent peer), a NaN loss, an exception of a hook.
WorkerOutcome RunCollectiveRank(WorkerLoop& loop, const CollectivePlan& plan, int rank,
                                collective::Collective& payload, collective::Collective& control,
                                std::span<const float> initial, const CollectiveRankHooks& hooks);

}  // namespace asgd::experiments
