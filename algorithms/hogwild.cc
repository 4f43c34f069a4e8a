#include "algorithms/hogwild.h"

#include <cmath>

#include "algorithms/builtin_strategies.h"
#include "algorithms/windowed_worker.h"
#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {

HogwildStore::HogwildStore(std::span<const float> initial, const Clock* clock,
                           transport::StalenessSink* sink)
    : n_(initial.size()), values_(new float[initial.size()]), clock_(clock), sink_(sink) {
  std::copy(initial.begin(), initial.end(), values_.get());
}

std::vector<float> HogwildStore::values() const {
  std::vector<float> out(n_);
  Read(out);
  return out;
}

void HogwildStore::Read(std::span<float> out) const {
  ASGD_CHECK_EQ(out.size(), n_, "hogwild read size");
  for (std::size_t i = 0; i < n_; ++i) {
    out[i] = std::atomic_ref<float>(values_[i]).load(std::memory_order_relaxed);
  }
}

uint64_t HogwildStore::Add(std::span<const float> update) {
  ASGD_CHECK_EQ(update.size(), n_, "hogwild update size");
  for (std::size_t i = 0; i < n_; ++i) {
    if (update[i] != 0.0f) {
      std::atomic_ref<float>(values_[i]).fetch_add(update[i], std::memory_order_relaxed);
    }
  }
  return version_.fetch_add(1, std::memory_order_acq_rel);
}

void HogwildStore::Record(uint32_t worker, int64_t step, uint64_t pulled, uint64_t applied) {
  const auto s = static_cast<int64_t>(applied - pulled);
  records_.fetch_add(1, std::memory_order_relaxed);
  staleness_sum_.fetch_add(std::max<int64_t>(0, s), std::memory_order_relaxed);
  if (sink_ != nullptr) {
    transport::StalenessRecord r;
    r.worker = worker;
    r.step = step;
    r.pulled_version = pulled;
    r.applied_version = applied;
    r.staleness = s;
    r.wall_time_s = clock_ != nullptr ? std::chrono::duration<double>(clock_->Now()).count() : 0;
    sink_->Record(r);
  }
}

Status HogwildClient::Pull(std::span<float> out) {
  pulled_ = store_->version();
  store_->Read(out);
  return Status::Ok();
}

Status HogwildClient::Push(std::span<const float> update, int64_t step) {
  const int64_t bad = transport::FindNonFinite(update);
  if (bad >= 0) {
    return Status(transport::StatusCode::kRemoteError,
                  internal::StrCat("hogwild: update of worker ", worker_, " holds ",
                                   update[static_cast<std::size_t>(bad)], " at element ", bad),
                  transport::ErrorCode::kNonFinite);
  }
  const uint64_t applied = store_->Add(update);
  store_->Record(worker_, step, pulled_, applied);
  return Status::Ok();
}

Status HogwildClient::PushPull(std::span<const float> update, std::span<float> out, int64_t step) {
  Status st = Push(update, step);
  if (!st.ok()) return st;
  return Pull(out);
}

Strategy HogwildStrategy() {
  Strategy s;
  s.name = "hogwild";
  s.description = "Hogwild!: lock-free threads adding into one shared vector";
  s.shared_memory = true;
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    WindowedWorker::Mode mode;
    mode.single_step = true;
    return std::make_unique<WindowedWorker>(mode);
  };
  // Over a parameter server (no shared memory) hogwild is async_sgd.
  s.server_rule = [](const StrategyOptions&, uint32_t) { return transport::NewAddRule(); };
  return s;
}

}  // namespace asgd::algorithms
