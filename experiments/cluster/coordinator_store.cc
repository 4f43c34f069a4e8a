// StoreFamily: the coordinator of a strategy on the parameter server
// (algorithms::Family::kStore). The shard servers hold the centre and save their own
// ranges for a checkpoint; an evaluator process, or else the coordinator itself, reads the
// centre and evaluates it; synchronous rounds may fix every worker's steps in advance.
#include "algorithms/sync_rule.h"
#include "core/check.h"
#include "experiments/cluster/coordinator.h"
#include "experiments/run/collective_rank.h"

namespace asgd::experiments::cluster {

using ::asgd::internal::StrCat;

class StoreFamily final : public CoordinatorFamily {
 public:
  explicit StoreFamily(Coordinator& c) : c_(c) {}

  void Expect() override {
    for (int i = 0; i < c_.s_.spec.num_ps(); ++i) c_.roles_[{"ps", i}] = Coordinator::Role{};
    evaluator_process_ = !c_.s_.spec.evaluator.empty();
    if (evaluator_process_) c_.roles_[{"evaluator", 0}] = Coordinator::Role{};
  }

  void Opened() override {}

  std::string Shape() const override {
    return StrCat(c_.s_.spec.num_ps(), " shards", evaluator_process_ ? ", an evaluator" : "");
  }
  // One snapshot per shard server of the cluster.
  int CheckpointShards() const override { return c_.s_.spec.num_ps(); }
  int64_t PushesPerStep() const override { return 1; }
  int64_t Recorded(int64_t pushes) const override { return pushes; }

  int64_t LockstepRounds() const override {
    const Problem& p = c_.s_.problem;
    const int n = p.plan.workers;
    if (!p.plan.strategy->rounds || algorithms::Replicas(p.strategy_options) != n) return 0;
    // The workers' samples after r steps each, as their samplers draw them (each pass over
    // a part of p examples is ceil(p / B) batches, the last one partial).
    CollectivePlan steps;
    steps.workers = n;
    steps.batch_size = p.plan.batch_size;
    for (const auto& part : p.partitions) {
      steps.partition_sizes.push_back(static_cast<int64_t>(part.size()));
    }
    const StopPolicy& stop = c_.session_->stop();
    const int64_t max_steps = stop.limits().max_steps;
    int64_t r = 0;
    while (static_cast<double>(steps.SamplesAtStep(r)) < stop.total_samples() &&
           !(max_steps > 0 && r * n >= max_steps)) {
      ++r;
    }
    return r;
  }

  void Registered(const Key& key, bool, RegisterReply& reply) override {
    // The evaluator writes the models (the coordinator's own evaluation: SaveFinal).
    if (key.first == "evaluator" && c_.s_.problem.model->CanSave()) {
      reply.save_dir = c_.session_->path();
      reply.best_above = c_.session_->recorder().best_test_accuracy();
    }
  }

  void WorkerReported(const WorkerReport&) override {}
  void WorkerFailed(int, const std::string& why) override { c_.Fail(why); }
  void FillReply(int, WorkerReply&) override {}
  void NameCheckpoint(CheckpointManifest&, int64_t) const override {}

  void Evaluate(bool full) override {
    if (evaluator_process_) return;  // the evaluator's next report takes it
    try {
      if (auto r = inline_evaluator_->Evaluate(full)) {
        const double best_before = c_.session_->recorder().best_test_accuracy();
        c_.Evaluated(*r);
        inline_evaluator_->SaveBest(r->accuracy(), best_before, c_.session_->path());
      } else {
        c_.pending_.reset();  // dropped: the next one is asked for as usual
      }
    } catch (const InputError& e) {
      c_.Fail(e.what());
    }
  }

  bool Start() override {
    if (evaluator_process_) return true;
    inline_evaluator_ = std::make_unique<CentreEvaluator>(c_.context_, c_.s_);
    const ps::Status st = inline_evaluator_->WaitForServers();
    if (!st.ok()) {
      c_.Fail("coordinator: the shard servers: " + st.ToString());
      return false;
    }
    return true;
  }

  void WorkersFinished() override {
    if (c_.failure_.empty()) {
      c_.Enter(Coordinator::Phase::kFinalEval);
      c_.RequestEval(true);
    } else {
      c_.Enter(Coordinator::Phase::kStoppingShards);
    }
  }

  std::string WorkerLossFatal() const override {
    const algorithms::Strategy& strategy = *c_.s_.problem.plan.strategy;
    if (!strategy.synchronous) return "";
    if (c_.LiveWorkers() == 0) return "no worker is left";
    // The rounds of sync_sgd, sagn, easgd and model_averaging are re-formed with the
    // survivors (the shards hear of it in their next report: SetLiveWorkers); SSP's clock
    // table would wait for the lost worker's clock forever.
    if (strategy.clocks) {
      return "ssp waits for every worker's clock (re-forming SSP without a worker is not "
             "supported)";
    }
    return "";
  }

  void End(RunEnd& end) const override {
    end.ps_shards = c_.s_.spec.num_ps();
    const std::string ps0 = c_.s_.spec.PsAddress(0);
    end.transport = ps0.substr(0, ps0.find(':'));
  }

  void SaveFinal() override {
    if (inline_evaluator_) inline_evaluator_->SaveFinal(c_.session_->path());
  }

 private:
  Coordinator& c_;
  bool evaluator_process_ = false;
  std::unique_ptr<CentreEvaluator> inline_evaluator_;  // without an evaluator process
};

std::unique_ptr<CoordinatorFamily> NewStoreFamily(Coordinator& c) {
  return std::make_unique<StoreFamily>(c);
}

}  // namespace asgd::experiments::cluster
