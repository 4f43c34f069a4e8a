#include "algorithms/hogwild.h"

#include <cmath>

#include "algorithms/builtin_strategies.h"
#include "algorithms/windowed_worker.h"
#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {

using ps::ParamClient;
using ps::Status;

HogwildStore::AddMode HogwildStore::ParseAddMode(const std::string& name) {
  if (name == "atomic") return AddMode::kAtomic;
  if (name == "racy") return AddMode::kRacy;
  throw ConfigError("algorithm.hogwild_add", name, "atomic or racy");
}

HogwildStore::AddMode HogwildStore::AddModeOf(const StrategyOptions& o) {
  return ParseAddMode(o.settings.String("hogwild_add"));
}

HogwildStore::HogwildStore(std::span<const float> initial, const Clock* clock,
                           ps::StalenessSink* sink, AddMode mode, bool sparse)
    : n_(initial.size()),
      mode_(mode),
      sparse_(sparse),
      // Cache-line aligned, so a block of the passes below is whole lines and the vector
      // shares no line with anything else.
      values_(new (std::align_val_t{kCacheLine}) float[initial.size()]),
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
  Copy(out);
  return out;
}

void HogwildStore::Copy(std::span<float> out) const {
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

namespace {

// The racy mode's push-pull pass, a vector at a time: one load, add and store of 16 floats
// (AVX-512) or 8 (AVX) where the scalar loop takes a load, an add and a store per float,
// more than the pass's memory traffic costs. The vector accesses are inline assembly:
// the machine's accesses, not C++ non-atomic ones (no data race in C++'s sense, and
// ThreadSanitizer does not see them), and each aligned 4-byte element of them is read
// and written whole (the x86 guarantee for aligned doublewords), as a relaxed atomic
// float is. vaddps is the scalar add lane by lane (no fused multiply-add, same
// rounding), so a vector pass and the scalar loop give the same floats.
#if defined(__x86_64__) && defined(__AVX512F__)
#define ASGD_HOGWILD_VECTOR "%%zmm0"
constexpr std::size_t kVector = 16;
#elif defined(__x86_64__) && defined(__AVX__)
#define ASGD_HOGWILD_VECTOR "%%ymm0"
constexpr std::size_t kVector = 8;
#else
constexpr std::size_t kVector = 0;  // the scalar loop only
#endif

#ifdef ASGD_HOGWILD_VECTOR
// values[0, kVector) += update[0, kVector) and out[0, kVector) = the result.
// REQUIRES: values aligned to the vector's size.
inline void RacyAddReadVector(float* values, const float* update, float* out) {
  asm volatile("vmovaps (%[v]), " ASGD_HOGWILD_VECTOR
               "\n\t"
               "vaddps (%[u]), " ASGD_HOGWILD_VECTOR ", " ASGD_HOGWILD_VECTOR
               "\n\t"
               "vmovaps " ASGD_HOGWILD_VECTOR
               ", (%[v])\n\t"
               "vmovups " ASGD_HOGWILD_VECTOR ", (%[o])"
               :
               : [v] "r"(values), [u] "r"(update), [o] "r"(out)
               : "xmm0", "memory");
}
#undef ASGD_HOGWILD_VECTOR
#else
// Not called (kVector is 0), but named by the loop that if constexpr discards.
[[maybe_unused]] inline void RacyAddReadVector(float*, const float*, float*) {}
#endif

// values[i] += update[i] for i < n and, with kRead, out[i] = the value the add left.
// REQUIRES: values aligned to the cache line (the store's vector is).
template <HogwildStore::AddMode kMode, bool kRead>
void AddPass(float* values, const float* update, float* out, std::size_t n) {
  std::size_t i = 0;
  // Only the push-pull goes a vector at a time: the hot path (a plain push is the scalar
  // loop).
  if constexpr (kMode == HogwildStore::AddMode::kRacy && kRead && kVector > 0) {
    for (; i + kVector <= n; i += kVector) RacyAddReadVector(values + i, update + i, out + i);
  }
  for (; i < n; ++i) {
    std::atomic_ref<float> v(values[i]);
    const float u = update[i];
    if constexpr (kMode == HogwildStore::AddMode::kAtomic) {
      // Zeros are not written. fetch_add stores old + u, so out is exactly what it left.
      if (u != 0.0f) {
        const float old = v.fetch_add(u, std::memory_order_relaxed);
        if constexpr (kRead) out[i] = old + u;
      } else if constexpr (kRead) {
        out[i] = v.load(std::memory_order_relaxed);
      }
    } else {
      const float next = v.load(std::memory_order_relaxed) + u;
      v.store(next, std::memory_order_relaxed);
      if constexpr (kRead) out[i] = next;
    }
  }
}

}  // namespace

uint64_t HogwildStore::AddAndRead(std::span<const float> update, std::span<float> out) {
  ASGD_CHECK_EQ(update.size(), n_, "hogwild update size");
  ASGD_CHECK_EQ(out.size(), n_, "hogwild read size");
  if (mode_ == AddMode::kAtomic) {
    AddPass<AddMode::kAtomic, true>(values_.get(), update.data(), out.data(), n_);
  } else {
    AddPass<AddMode::kRacy, true>(values_.get(), update.data(), out.data(), n_);
  }
  return version_.fetch_add(1, std::memory_order_acq_rel);
}

uint64_t HogwildStore::Add(std::span<const float> update) {
  ASGD_CHECK_EQ(update.size(), n_, "hogwild update size");
  if (mode_ == AddMode::kAtomic) {
    AddPass<AddMode::kAtomic, false>(values_.get(), update.data(), nullptr, n_);
  } else {
    AddPass<AddMode::kRacy, false>(values_.get(), update.data(), nullptr, n_);
  }
  return version_.fetch_add(1, std::memory_order_acq_rel);
}

std::string HogwildStore::Describe() const {
  return sparse_ ? "one shared vector (lock-free, sparse updates)" : "one shared vector (lock-free)";
}

std::unique_ptr<ps::ParamClient> HogwildStore::NewClient(uint32_t id, ps::Role) {
  return std::make_unique<HogwildClient>(this, id);
}

std::vector<ps::ShardSnapshot> HogwildStore::Snapshot(const std::function<void()>& while_held) {
  if (while_held) while_held();
  ps::ShardSnapshot snap;
  snap.version = version();
  snap.values = values();
  return {std::move(snap)};
}

void HogwildStore::Restore(const std::vector<ps::ShardSnapshot>& snapshots,
                           const std::string& source) {
  if (snapshots.size() != 1) {
    throw DataError(source, internal::StrCat("holds ", snapshots.size(),
                                             " shards, the shared vector is one"));
  }
  const auto& v = snapshots[0].values;
  if (v.size() != n_) {
    throw DataError(source,
                    internal::StrCat("holds ", v.size(), " parameters, the model has ", n_));
  }
  std::copy(v.begin(), v.end(), values_.get());
  RestoreVersion(snapshots[0].version);
}

ps::StoreStats HogwildStore::stats() const {
  ps::StoreStats s;
  s.pushes_applied = version();
  s.records = static_cast<uint64_t>(records());
  s.staleness_sum = static_cast<uint64_t>(staleness_sum());
  return s;
}

void HogwildStore::Record(uint32_t worker, int64_t step, uint64_t pulled, uint64_t applied) {
  const auto s = static_cast<int64_t>(applied - pulled);
  records_.fetch_add(1, std::memory_order_relaxed);
  staleness_sum_.fetch_add(std::max<int64_t>(0, s), std::memory_order_relaxed);
  if (sink_ != nullptr) {
    ps::StalenessRecord r;
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
  store_->Copy(out);
  return Status::Ok();
}

namespace {

// A NaN or Inf never reaches the shared vector (as on a ShardServer).
Status CheckFinite(std::span<const float> update, uint32_t worker) {
  const int64_t bad = ps::FindNonFinite(update);
  if (bad < 0) return Status::Ok();
  return Status(ps::StatusCode::kRemoteError,
                internal::StrCat("hogwild: update of worker ", worker, " holds ",
                                 update[static_cast<std::size_t>(bad)], " at element ", bad),
                ps::ErrorCode::kNonFinite);
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

// Dense with plain SGD (no weight decay): g ← ∇L_B(θ); g ← −η·g in place; θ ← the shared
// vector after adding g (one PushPull, in place, which the shared-vector client does in
// one pass).
// No optimizer pass over θ and no separate update vector: θ is overwritten by the read
// anyway. Same arithmetic as SgdOptimizer (−η·g, then one add), so one worker is
// sequential SGD bit for bit. Other optimizers: WindowedWorker with W = 1 (read,
// optimizer step, add the update). Sparse (the runner set env.sparse_gradient): read the
// batch's coordinates, add −η·g at them.
class HogwildWorker final : public WorkerRule {
 public:
  explicit HogwildWorker(bool plain_sgd) : plain_sgd_(plain_sgd) {}

  Status Start(WorkerEnv& env) override {
    sparse_ = static_cast<bool>(env.sparse_gradient);
    steps_ = 0;
    if (sparse_) return Status::Ok();  // nothing to read until a batch says which coordinates
    fused_ = plain_sgd_ && env.optimizer != nullptr && env.optimizer->Name() == "sgd";
    if (!fused_) return dense_.Start(env);
    ASGD_CHECK(env.ps != nullptr && env.gradient, "incomplete env");
    const auto n = static_cast<std::size_t>(env.ps->size());
    theta_.assign(n, 0.0f);
    grad_.assign(n, 0.0f);
    return env.ps->Pull(theta_);
  }
  StepResult Step(WorkerEnv& env) override {
    if (sparse_) return SparseStep(env);
    if (!fused_) return dense_.Step(env);
    StepResult r;
    env.ps->MarkWindowStart();
    r.loss = env.gradient(theta_, grad_);
    const float scale = -static_cast<float>(env.options.learning_rate * env.learning_rate_scale);
    for (float& g : grad_) g = scale * g;
    // In place: the read lands in the gradient's buffer, whose lines this step has just
    // written, not in θ's (one pass over the vector less to fetch); the buffers then swap.
    r.status = env.ps->PushPull(grad_, grad_, ++steps_);
    r.pushes = 1;
    if (r.status.ok()) theta_.swap(grad_);
    return r;
  }
  std::span<const float> local_params() const override {
    if (sparse_) return {};
    return fused_ ? std::span<const float>(theta_) : dense_.local_params();
  }

 private:
  StepResult SparseStep(WorkerEnv& env) {
    StepResult r;
    ParamClient* ps = env.ps;
    const SparseReader read = [&](std::span<const int64_t> indices, std::span<float> params) {
      return ps->PullSparse(indices, params);
    };
    Status st;
    r.loss = env.sparse_gradient(read, &sparse_grad_, &st);
    if (!st.ok()) {
      r.status = st;
      return r;
    }
    const auto lr = static_cast<float>(env.options.learning_rate * env.learning_rate_scale);
    for (float& g : sparse_grad_.values) g *= -lr;
    r.status = ps->PushSparse(sparse_grad_.indices, sparse_grad_.values, ++steps_);
    r.pushes = 1;
    return r;
  }

  const bool plain_sgd_;  // the options' optimizer is sgd without weight decay
  WindowedWorker dense_{WindowedWorker::Mode{.single_step = true}};
  bool sparse_ = false;
  bool fused_ = false;
  std::vector<float> theta_, grad_;
  SparseUpdate sparse_grad_;
  int64_t steps_ = 0;
};

}  // namespace

Status HogwildClient::DoPushPull(std::span<const float> update, std::span<float> out,
                                 int64_t step) {
  Status st = CheckFinite(update, worker_);
  if (!st.ok()) return st;
  const uint64_t applied = store_->AddAndRead(update, out);
  store_->Record(worker_, step, pulled_, applied);
  // The read is recorded at this push's version (applied + 1), as a Pull right after it
  // would be at the earliest: like any read here it may also hold parts of pushes that
  // were still being added.
  pulled_ = applied + 1;
  return Status::Ok();
}

Strategy HogwildStrategy() {
  Strategy s;
  s.name = "hogwild";
  s.description = "Hogwild!: lock-free threads adding into one shared vector";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys);
  s.settings = {ChoiceSetting(
      "hogwild_add", "atomic", {"atomic", "racy"},
      "add to the shared vector with per-element atomic read-modify-writes (nothing lost) or "
      "plain relaxed loads and stores (concurrent adds to one coordinate may overwrite each "
      "other, as the paper allows; much cheaper on dense models)")};
  s.shared_memory = true;
  s.can_simulate = false;
  s.supports_sparse = true;
  s.worker_rule = [](const StrategyOptions& o) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<HogwildWorker>(o.optimizer.name == "sgd" &&
                                           o.optimizer.weight_decay == 0.0);
  };
  // Over a parameter server (no shared memory) hogwild is async_sgd.
  s.server_rule = [](const StrategyOptions&, uint32_t) { return ps::NewAddRule(); };
  return s;
}

}  // namespace asgd::algorithms
