#include "algorithms/hogwild.h"

#include <cmath>

#include "algorithms/builtin_strategies.h"
#include "algorithms/windowed_worker.h"
#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {

HogwildStore::AddMode HogwildStore::ParseAddMode(const std::string& name) {
  if (name == "atomic") return AddMode::kAtomic;
  if (name == "racy") return AddMode::kRacy;
  throw ConfigError("algorithm.hogwild_add", name, "atomic or racy");
}

HogwildStore::HogwildStore(std::span<const float> initial, const Clock* clock,
                           transport::StalenessSink* sink, AddMode mode)
    : n_(initial.size()),
      mode_(mode),
      values_(new float[initial.size()]),
      clock_(clock),
      sink_(sink) {
  std::copy(initial.begin(), initial.end(), values_.get());
}

namespace {

// values[i] += u, by the store's mode (hogwild.h).
inline void AddOne(float& value, float u, HogwildStore::AddMode mode) {
  std::atomic_ref<float> v(value);
  if (mode == HogwildStore::AddMode::kAtomic) {
    v.fetch_add(u, std::memory_order_relaxed);
  } else {
    v.store(v.load(std::memory_order_relaxed) + u, std::memory_order_relaxed);
  }
}

}  // namespace

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

void HogwildStore::ReadAt(std::span<const int64_t> indices, std::span<float> out) const {
  ASGD_CHECK_EQ(out.size(), n_, "hogwild read size");
  for (const int64_t j : indices) {
    ASGD_CHECK(j >= 0 && static_cast<std::size_t>(j) < n_, "hogwild index ", j);
    const auto i = static_cast<std::size_t>(j);
    out[i] = std::atomic_ref<float>(values_[i]).load(std::memory_order_relaxed);
  }
}

uint64_t HogwildStore::AddAt(std::span<const int64_t> indices, std::span<const float> update) {
  ASGD_CHECK_EQ(indices.size(), update.size(), "hogwild sparse update");
  for (std::size_t k = 0; k < indices.size(); ++k) {
    ASGD_CHECK(indices[k] >= 0 && static_cast<std::size_t>(indices[k]) < n_, "hogwild index ",
               indices[k]);
    if (update[k] != 0.0f) AddOne(values_[static_cast<std::size_t>(indices[k])], update[k], mode_);
  }
  return version_.fetch_add(1, std::memory_order_acq_rel);
}

uint64_t HogwildStore::Add(std::span<const float> update) {
  ASGD_CHECK_EQ(update.size(), n_, "hogwild update size");
  if (mode_ == AddMode::kAtomic) {
    for (std::size_t i = 0; i < n_; ++i) {
      if (update[i] != 0.0f) {
        std::atomic_ref<float>(values_[i]).fetch_add(update[i], std::memory_order_relaxed);
      }
    }
  } else {
    // No branch on zero: a relaxed store of an unchanged value is harmless and the loop
    // stays a plain load-add-store.
    for (std::size_t i = 0; i < n_; ++i) {
      std::atomic_ref<float> v(values_[i]);
      v.store(v.load(std::memory_order_relaxed) + update[i], std::memory_order_relaxed);
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

Status HogwildClient::DoPull(std::span<float> out) {
  pulled_ = store_->version();
  store_->Read(out);
  return Status::Ok();
}

namespace {

// A NaN or Inf never reaches the shared vector (as on a ShardServer).
Status CheckFinite(std::span<const float> update, uint32_t worker) {
  const int64_t bad = transport::FindNonFinite(update);
  if (bad < 0) return Status::Ok();
  return Status(transport::StatusCode::kRemoteError,
                internal::StrCat("hogwild: update of worker ", worker, " holds ",
                                 update[static_cast<std::size_t>(bad)], " at element ", bad),
                transport::ErrorCode::kNonFinite);
}

}  // namespace

Status HogwildClient::DoPush(std::span<const float> update, int64_t step) {
  Status st = CheckFinite(update, worker_);
  if (!st.ok()) return st;
  const uint64_t applied = store_->Add(update);
  store_->Record(worker_, step, pulled_, applied);
  return Status::Ok();
}

Status HogwildClient::DoPullSparse(std::span<const int64_t> indices, std::span<float> out) {
  pulled_ = store_->version();
  store_->ReadAt(indices, out);
  return Status::Ok();
}

Status HogwildClient::DoPushSparse(std::span<const int64_t> indices, std::span<const float> values,
                                   int64_t step) {
  Status st = CheckFinite(values, worker_);
  if (!st.ok()) return st;
  const uint64_t applied = store_->AddAt(indices, values);
  store_->Record(worker_, step, pulled_, applied);
  return Status::Ok();
}

namespace {

// Dense: WindowedWorker with W = 1 (read, optimizer step, add the update). Sparse (the
// runner set env.sparse_gradient): read the batch's coordinates, add −η·g at them.
class HogwildWorker final : public WorkerRule {
 public:
  Status Start(WorkerEnv& env) override {
    sparse_ = static_cast<bool>(env.sparse_gradient);
    if (!sparse_) return dense_.Start(env);
    steps_ = 0;
    return Status::Ok();  // nothing to read until a batch says which coordinates
  }
  StepResult Step(WorkerEnv& env) override {
    if (!sparse_) return dense_.Step(env);
    StepResult r;
    ParamClient* ps = env.ps;
    const SparseReader read = [&](std::span<const int64_t> indices, std::span<float> params) {
      return ps->PullSparse(indices, params);
    };
    Status st;
    r.loss = env.sparse_gradient(read, &grad_, &st);
    if (!st.ok()) {
      r.status = st;
      return r;
    }
    const auto lr = static_cast<float>(env.options.learning_rate * env.learning_rate_scale);
    for (float& g : grad_.values) g *= -lr;
    r.status = ps->PushSparse(grad_.indices, grad_.values, ++steps_);
    r.pushes = 1;
    return r;
  }
  std::span<const float> local_params() const override {
    return sparse_ ? std::span<const float>() : dense_.local_params();
  }

 private:
  WindowedWorker dense_{WindowedWorker::Mode{.single_step = true}};
  bool sparse_ = false;
  SparseUpdate grad_;
  int64_t steps_ = 0;
};

}  // namespace

Status HogwildClient::DoPushPull(std::span<const float> update, std::span<float> out,
                                 int64_t step) {
  Status st = DoPush(update, step);
  if (!st.ok()) return st;
  return DoPull(out);
}

Strategy HogwildStrategy() {
  Strategy s;
  s.name = "hogwild";
  s.description = "Hogwild!: lock-free threads adding into one shared vector";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys, {"algorithm.hogwild_add"});
  s.shared_memory = true;
  s.can_simulate = false;
  s.supports_sparse = true;
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<HogwildWorker>();
  };
  // Over a parameter server (no shared memory) hogwild is async_sgd.
  s.server_rule = [](const StrategyOptions&, uint32_t) { return transport::NewAddRule(); };
  return s;
}

}  // namespace asgd::algorithms
