#include "collective/bucketed_allreduce.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace asgd::collective {

std::vector<Range> ReverseBuckets(int64_t count, int64_t bucket_floats) {
  ASGD_CHECK(count >= 0 && bucket_floats > 0, "buckets of ", bucket_floats, " floats of ", count);
  std::vector<Range> buckets;
  for (int64_t end = count; end > 0; end -= bucket_floats) {
    const int64_t begin = std::max<int64_t>(0, end - bucket_floats);
    buckets.push_back({begin, end - begin});
  }
  return buckets;
}

BucketedAllreduce::BucketedAllreduce(Collective& collective, std::span<float> data,
                                     int64_t bucket_floats, ReduceOp op)
    : collective_(collective),
      data_(data),
      bucket_floats_(bucket_floats),
      op_(op),
      buckets_(ReverseBuckets(static_cast<int64_t>(data.size()), bucket_floats)),
      ready_(buckets_.size(), 0) {
  for (const Range& b : buckets_) {
    collective_.Bind(
        data_.subspan(static_cast<std::size_t>(b.begin), static_cast<std::size_t>(b.count)), op_);
  }
  thread_ = std::thread([this] { Communicate(); });
}

BucketedAllreduce::~BucketedAllreduce() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BucketedAllreduce::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  ASGD_CHECK(!running_, "BucketedAllreduce::Start before the last round's Wait");
  if (error_) std::rethrow_exception(error_);
  std::fill(ready_.begin(), ready_.end(), 0);
  reduced_ = 0;
  reported_ = 0;
  running_ = true;
}

void BucketedAllreduce::Ready(Range range) {
  const auto n = static_cast<int64_t>(data_.size());
  ASGD_CHECK(range.begin >= 0 && range.count >= 0 && range.end() <= n, "ready range [", range.begin,
             ", ", range.end(), ") of ", n);
  if (range.count == 0) return;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASGD_CHECK(running_, "BucketedAllreduce::Ready outside a round");
    // Buckets are numbered from the end: element i is in bucket (n - 1 - i) / B, so the
    // range's last element is in its first bucket.
    const auto first = static_cast<std::size_t>((n - range.end()) / bucket_floats_);
    const auto last = static_cast<std::size_t>((n - 1 - range.begin) / bucket_floats_);
    for (std::size_t k = first; k <= last; ++k) {
      const Range& b = buckets_[k];
      const int64_t overlap = std::min(b.end(), range.end()) - std::max(b.begin, range.begin);
      ready_[k] += overlap;
      ASGD_CHECK(ready_[k] <= b.count, "bucket ", k, " reported twice");
    }
    reported_ += range.count;
    wake = reduced_ < buckets_.size() && ready_[reduced_] == buckets_[reduced_].count;
  }
  if (wake) cv_.notify_all();
}

void BucketedAllreduce::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  ASGD_CHECK(running_, "BucketedAllreduce::Wait outside a round");
  ASGD_CHECK_EQ(reported_, static_cast<int64_t>(data_.size()),
                "elements reported before BucketedAllreduce::Wait");
  cv_.wait(lock, [&] { return reduced_ == buckets_.size() || error_ != nullptr; });
  running_ = false;
  if (error_) std::rethrow_exception(error_);
}

// The communication thread: reduces the round's buckets in bucket order, each as soon as
// it is complete, with the lock released while the collective runs (Ready keeps counting
// meanwhile). The mutex hands the vector's bucket from the computing thread to this one
// and back, so the two never touch one bucket at the same time.
void BucketedAllreduce::Communicate() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] {
      return stop_ || (running_ && error_ == nullptr && reduced_ < buckets_.size() &&
                       ready_[reduced_] == buckets_[reduced_].count);
    });
    if (stop_) return;
    const Range b = buckets_[reduced_];
    lock.unlock();
    std::exception_ptr error;
    try {
      collective_.Allreduce(
          data_.subspan(static_cast<std::size_t>(b.begin), static_cast<std::size_t>(b.count)), op_);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) {
      error_ = std::move(error);
    } else {
      ++reduced_;
    }
    if (error_ || reduced_ == buckets_.size()) cv_.notify_all();
  }
}

}  // namespace asgd::collective
