// BucketedAllreduce: an allreduce of one vector in buckets, each started as soon as its
// part of the vector is final, on a communication thread of its own, so that the
// reduction of the gradient's last layers runs while backward still computes the first
// ones (PyTorch DDP's gradient buckets: Li et al. 2020, "PyTorch Distributed: Experiences
// on Accelerating Data Parallel Training", section 3.2.3).
//
// The vector is cut into buckets from its end: bucket 0 is its last `bucket_floats`
// floats, bucket 1 the ones before, and so on (the last bucket, at the vector's start,
// may be shorter). That is reverse parameter order, the order in which backward produces
// a model's layers (models/model.h, LossAndGradientReporting). A round is:
//   Start();  model.LossAndGradientReporting(params, batch, data, allreduce);  Wait();
// The model calls Ready (core/gradient_ready.h) for each range it has finished; the
// communication thread allreduces bucket 0, 1, ... in that fixed order, each once every
// element of it has been reported. The fixed order is what keeps the ranks' calls
// matched (collective.h: calls are matched by order) whatever order the ranges arrive in.
//
// Result: each element becomes Allreduce's reduction of it (the sum of the same values
// over the same ranks, divided by N for kMean), and every rank holds the same bits (the
// algorithms' allgather). Compared with one Allreduce of the whole vector the order of
// each element's summation over the ranks may differ (the algorithms cut the vector into
// per-rank chunks by its length), so the two agree within float rounding of that order;
// with two ranks they agree bit for bit (a + b == b + a in IEEE arithmetic).
//
// Thread safety: Start, Ready and Wait are called by one thread (the one computing the
// gradient); the collective must not be used by anyone else from Start until Wait
// returns. Between Wait and the next Start the caller owns both the vector and the
// collective again.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "collective/collective.h"
#include "core/gradient_ready.h"
#include "core/param_layout.h"

namespace asgd::collective {

// The buckets of a vector of `count` floats cut from its end into buckets of
// `bucket_floats`: element i is in bucket (count - 1 - i) / bucket_floats. Returned in
// bucket order (the last elements first). None for count == 0.
// REQUIRES count >= 0, bucket_floats > 0 (else InvariantError).
std::vector<Range> ReverseBuckets(int64_t count, int64_t bucket_floats);

class BucketedAllreduce final : public GradientReady {
 public:
  // Binds every bucket of `data` (Collective::Bind, in bucket order: every rank
  // constructs its BucketedAllreduce at the same point of its sequence of calls) and
  // starts the communication thread. `data` must outlive this object and keep its
  // storage. Any op (kMean divides each bucket by N, as Allreduce does).
  // REQUIRES bucket_floats > 0 (else InvariantError). Throws CollectiveError (from Bind).
  BucketedAllreduce(Collective& collective, std::span<float> data, int64_t bucket_floats,
                    ReduceOp op);
  // Joins the communication thread; a round in progress is abandoned (the peers then
  // fail their next call).
  ~BucketedAllreduce();
  BucketedAllreduce(const BucketedAllreduce&) = delete;
  BucketedAllreduce& operator=(const BucketedAllreduce&) = delete;

  // Begins a round: nothing of the vector is ready. REQUIRES the previous round waited.
  void Start();
  // Elements [range.begin, range.end()) of the vector are final for this round. Ranges of
  // one round are disjoint (core/gradient_ready.h). REQUIRES Start was called.
  void Ready(Range range) override;
  // Blocks until every bucket is reduced; the vector then holds the result. Rethrows the
  // CollectiveError of a failed bucket (the collective is then unusable). REQUIRES every
  // element was reported this round (else InvariantError, instead of waiting forever).
  void Wait();

  const std::vector<Range>& buckets() const { return buckets_; }

 private:
  void Communicate();

  Collective& collective_;
  const std::span<float> data_;
  const int64_t bucket_floats_;
  const ReduceOp op_;
  const std::vector<Range> buckets_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_:
  bool running_ = false;        // between Start and the end of Wait
  bool stop_ = false;           // the destructor asks the thread to end
  std::vector<int64_t> ready_;  // per bucket: elements reported this round
  std::size_t reduced_ = 0;     // buckets reduced this round (the thread's next one)
  int64_t reported_ = 0;        // elements reported this round
  std::exception_ptr error_;    // the first failure; the thread stops reducing

  std::thread thread_;  // last: started once everything above exists
};

}  // namespace asgd::collective
