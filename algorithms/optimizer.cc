#include "algorithms/optimizer.h"

#include <cmath>

#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {

const float* Optimizer::Decayed(std::span<const float> params, std::span<const float> grad) {
  ASGD_CHECK_EQ(static_cast<int64_t>(params.size()), size_, "params vs optimizer size");
  ASGD_CHECK_EQ(static_cast<int64_t>(grad.size()), size_, "grad vs optimizer size");
  if (weight_decay_ == 0.0) return grad.data();
  decayed_.resize(static_cast<std::size_t>(size_));
  const auto wd = static_cast<float>(weight_decay_);
  for (int64_t i = 0; i < size_; ++i) decayed_[i] = grad[i] + wd * params[i];
  return decayed_.data();
}

void Optimizer::Step(std::span<float> params, std::span<const float> grad, float lr,
                     std::span<float> applied) {
  Accumulate a;
  a.applied = applied;
  Step(params, grad, lr, a);
}

void Optimizer::Step(std::span<float> params, std::span<const float> grad, float lr,
                     const Accumulate& accumulate) {
  ASGD_CHECK(accumulate.applied.empty() || static_cast<int64_t>(accumulate.applied.size()) == size_,
             "applied buffer size ", accumulate.applied.size(), " vs ", size_);
  const float* g = Decayed(params, grad);
  ++steps_;
  Target t;
  t.acc = accumulate.applied.empty() ? nullptr : accumulate.applied.data();
  t.assign = accumulate.assign;
  t.scale = accumulate.scale;
  t.write_params = !accumulate.skip_params;
  Apply(params.data(), g, lr, t);
}

namespace {

// One loop per target form, so that each stays a plain vectorisable loop; `update(i)`
// computes element i's update (advancing the optimizer's slots) and is inlined.
template <bool kParams, bool kAcc, bool kAssign, bool kScale, class Update>
void UpdateLoop(int64_t n, float* __restrict p, float* __restrict acc, float scale,
                Update&& update) {
  for (int64_t i = 0; i < n; ++i) {
    const float u = update(i);
    if constexpr (kAcc) {
      // 0 + u, not u: the same bits as adding into zeros, -0 included.
      float a = kAssign ? 0.0f + u : acc[i] + u;
      if constexpr (kScale) a *= scale;
      acc[i] = a;
    }
    if constexpr (kParams) p[i] += u;
  }
}

template <bool kParams, class Update>
void UpdateInto(int64_t n, float* p, const Optimizer::Target& t, Update&& update) {
  if (t.acc == nullptr)
    return UpdateLoop<kParams, false, false, false>(n, p, nullptr, 1.0f, update);
  const bool scale = t.scale != 1.0f;
  if (t.assign) {
    if (scale) return UpdateLoop<kParams, true, true, true>(n, p, t.acc, t.scale, update);
    return UpdateLoop<kParams, true, true, false>(n, p, t.acc, 1.0f, update);
  }
  if (scale) return UpdateLoop<kParams, true, false, true>(n, p, t.acc, t.scale, update);
  UpdateLoop<kParams, true, false, false>(n, p, t.acc, 1.0f, update);
}

template <class Update>
void ForEachUpdate(int64_t n, float* p, const Optimizer::Target& t, Update&& update) {
  if (t.write_params) {
    UpdateInto<true>(n, p, t, update);
  } else {
    UpdateInto<false>(n, p, t, update);
  }
}

class SgdOptimizer final : public Optimizer {
 public:
  SgdOptimizer(int64_t size, double wd) : Optimizer(size, wd) {}
  std::string Name() const override { return "sgd"; }
  void Reset() override { steps_ = 0; }
  std::vector<float> State() const override { return {}; }
  void SetState(std::span<const float> state) override { ASGD_CHECK(state.empty()); }

 protected:
  void Apply(float* p, const float* g, float lr, const Target& t) override {
    ForEachUpdate(size_, p, t, [&](int64_t i) { return -lr * g[i]; });
  }
};

class MomentumOptimizer final : public Optimizer {
 public:
  MomentumOptimizer(int64_t size, double wd, double mu, bool nesterov)
      : Optimizer(size, wd),
        mu_(static_cast<float>(mu)),
        nesterov_(nesterov),
        v_(static_cast<std::size_t>(size), 0.0f) {}
  std::string Name() const override { return nesterov_ ? "nesterov" : "momentum"; }
  void Reset() override {
    steps_ = 0;
    std::fill(v_.begin(), v_.end(), 0.0f);
  }
  std::vector<float> State() const override { return v_; }
  void SetState(std::span<const float> state) override {
    ASGD_CHECK_EQ(state.size(), v_.size());
    v_.assign(state.begin(), state.end());
  }

 protected:
  void Apply(float* p, const float* g, float lr, const Target& t) override {
    float* __restrict v = v_.data();
    const float mu = mu_;
    if (nesterov_) {
      ForEachUpdate(size_, p, t, [&](int64_t i) {
        v[i] = mu * v[i] + g[i];
        return -lr * (g[i] + mu * v[i]);
      });
    } else {
      ForEachUpdate(size_, p, t, [&](int64_t i) {
        v[i] = mu * v[i] + g[i];
        return -lr * v[i];
      });
    }
  }

 private:
  float mu_;
  bool nesterov_;
  std::vector<float> v_;
};

class AdagradOptimizer final : public Optimizer {
 public:
  AdagradOptimizer(int64_t size, double wd, double initial, double eps)
      : Optimizer(size, wd),
        initial_(static_cast<float>(initial)),
        eps_(static_cast<float>(eps)),
        a_(static_cast<std::size_t>(size), static_cast<float>(initial)) {}
  std::string Name() const override { return "adagrad"; }
  void Reset() override {
    steps_ = 0;
    std::fill(a_.begin(), a_.end(), initial_);
  }
  std::vector<float> State() const override { return a_; }
  void SetState(std::span<const float> state) override {
    ASGD_CHECK_EQ(state.size(), a_.size());
    a_.assign(state.begin(), state.end());
  }

 protected:
  void Apply(float* p, const float* g, float lr, const Target& t) override {
    float* __restrict a = a_.data();
    const float eps = eps_;
    ForEachUpdate(size_, p, t, [&](int64_t i) {
      a[i] += g[i] * g[i];
      return -lr * g[i] / (std::sqrt(a[i]) + eps);
    });
  }

 private:
  float initial_;
  float eps_;
  std::vector<float> a_;
};

class AdamOptimizer final : public Optimizer {
 public:
  AdamOptimizer(int64_t size, double wd, double b1, double b2, double eps)
      : Optimizer(size, wd),
        b1_(b1),
        b2_(b2),
        eps_(static_cast<float>(eps)),
        m_(static_cast<std::size_t>(size), 0.0f),
        s_(static_cast<std::size_t>(size), 0.0f) {}
  std::string Name() const override { return "adam"; }
  void Reset() override {
    steps_ = 0;
    std::fill(m_.begin(), m_.end(), 0.0f);
    std::fill(s_.begin(), s_.end(), 0.0f);
  }
  // Layout: m, then s, then the step count (as a float; exact up to 2^24 steps).
  std::vector<float> State() const override {
    std::vector<float> out(m_);
    out.insert(out.end(), s_.begin(), s_.end());
    out.push_back(static_cast<float>(steps_));
    return out;
  }
  void SetState(std::span<const float> state) override {
    ASGD_CHECK_EQ(state.size(), 2 * m_.size() + 1);
    std::copy(state.begin(), state.begin() + static_cast<std::ptrdiff_t>(m_.size()), m_.begin());
    std::copy(state.begin() + static_cast<std::ptrdiff_t>(m_.size()), state.end() - 1, s_.begin());
    steps_ = static_cast<int64_t>(state.back());
  }

 protected:
  void Apply(float* p, const float* g, float lr, const Target& target) override {
    const double t = static_cast<double>(steps_);
    const auto c1 = static_cast<float>(1.0 / (1.0 - std::pow(b1_, t)));
    const auto c2 = static_cast<float>(1.0 / (1.0 - std::pow(b2_, t)));
    const auto b1 = static_cast<float>(b1_);
    const auto b2 = static_cast<float>(b2_);
    float* __restrict m = m_.data();
    float* __restrict s = s_.data();
    const float eps = eps_;
    ForEachUpdate(size_, p, target, [&](int64_t i) {
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      s[i] = b2 * s[i] + (1.0f - b2) * g[i] * g[i];
      return -lr * (m[i] * c1) / (std::sqrt(s[i] * c2) + eps);
    });
  }

 private:
  double b1_;
  double b2_;
  float eps_;
  std::vector<float> m_;
  std::vector<float> s_;
};

void CheckUnitInterval(const char* key, double v) {
  if (!(v >= 0.0 && v < 1.0)) throw ConfigError(key, std::to_string(v), "a value in [0, 1)");
}

}  // namespace

std::vector<std::string> OptimizerNames() {
  return {"sgd", "momentum", "nesterov", "adagrad", "adam"};
}

std::unique_ptr<Optimizer> NewOptimizer(const OptimizerOptions& o, int64_t size) {
  ASGD_CHECK_GE(size, 0);
  if (!(o.weight_decay >= 0.0)) {
    throw ConfigError("algorithm.weight_decay", std::to_string(o.weight_decay), "a value >= 0");
  }
  if (o.name == "sgd") return std::make_unique<SgdOptimizer>(size, o.weight_decay);
  if (o.name == "momentum" || o.name == "nesterov") {
    CheckUnitInterval("algorithm.momentum", o.momentum);
    return std::make_unique<MomentumOptimizer>(size, o.weight_decay, o.momentum,
                                               o.name == "nesterov");
  }
  if (!(o.epsilon > 0.0)) {
    throw ConfigError("algorithm.epsilon", std::to_string(o.epsilon), "a value > 0");
  }
  if (o.name == "adagrad") {
    if (!(o.initial_accumulator >= 0.0)) {
      throw ConfigError("algorithm.initial_accumulator", std::to_string(o.initial_accumulator),
                        "a value >= 0");
    }
    return std::make_unique<AdagradOptimizer>(size, o.weight_decay, o.initial_accumulator,
                                              o.epsilon);
  }
  if (o.name == "adam") {
    CheckUnitInterval("algorithm.beta1", o.beta1);
    CheckUnitInterval("algorithm.beta2", o.beta2);
    return std::make_unique<AdamOptimizer>(size, o.weight_decay, o.beta1, o.beta2, o.epsilon);
  }
  throw ConfigError("algorithm.optimizer", o.name, "one of sgd, momentum, nesterov, adagrad, adam");
}

}  // namespace asgd::algorithms
