#include "experiments/run/run_plan.h"

#include <chrono>

#include "core/check.h"
#include "core/error.h"
#include "experiments/config/setup.h"
#include "experiments/record/checkpoint.h"
#include "experiments/run/collective_runner.h"
#include "sim/network_model.h"
#include "sim/option_keys.h"

namespace asgd::experiments {

int RunPlan::checkpoint_shards() const {
  const bool sharded = store == StoreKind::kShardServers || store == StoreKind::kSimulated;
  return family == algorithms::Family::kStore && sharded ? shards : 1;
}

ServerBounds ServerBounds::FromConfig(const Config& config) {
  ServerBounds b;
  b.max_queued_reply_bytes = static_cast<uint64_t>(config.Int("cluster.max_queued_reply_bytes"));
  b.barrier_timeout_s = config.Double("cluster.barrier_timeout_s");
  b.max_barriers_per_peer = static_cast<int>(config.Int("cluster.max_barriers_per_peer"));
  return b;
}

double RunPlan::WorkerLearningRate(int w) const {
  if (worker_learning_rates.empty()) return learning_rate;
  ASGD_CHECK(w >= 0 && static_cast<std::size_t>(w) < worker_learning_rates.size(), "worker ", w);
  return worker_learning_rates[static_cast<std::size_t>(w)];
}

models::Device RunPlan::WorkerDevice(int w) const { return ResolveWorkerDevice(device_specs, w); }

StopPolicy RunPlan::MakeStopPolicy(int64_t train_examples) const {
  return StopPolicy(stop, train_examples);
}

EvalSchedule RunPlan::MakeEvalSchedule(int64_t train_examples) const {
  // The product as EvalSchedule::FromConfig forms it, so the marks are the same bits.
  return EvalSchedule(eval_every_epochs * static_cast<double>(train_examples), eval_every_s,
                      eval_examples);
}

RunPlan RunPlan::FromConfig(const Config& config) {
  RunPlan p;
  p.seed = static_cast<uint64_t>(config.Int("experiment.seed"));
  p.name = config.String("algorithm.name");
  p.strategy = &algorithms::FindStrategy(p.name);
  p.workers = static_cast<int>(config.Int("algorithm.workers"));
  p.batch_size = config.Int("algorithm.batch_size");
  p.learning_rate = config.Double("algorithm.learning_rate");
  p.lr_decay = config.Double("algorithm.lr_decay");
  p.epochs = config.Double("experiment.epochs");
  p.progress = config.String("experiment.progress");
  p.model_name = config.String("model.name");
  p.model = BuildModelOptions(config);
  p.device = config.String("model.device");
  p.device_specs = WorkerDeviceSpecs(config, p.workers);
  p.worker_learning_rates = config.DoubleList("algorithm.worker_learning_rates");
  p.augment = BuildAugmentOptions(config);
  p.dataset = config.String("data.dataset");
  p.staleness_rows = config.Int("metrics.staleness_rows");

  p.cluster = ClusterPlan::FromConfig(config);
  p.transport = p.cluster.transport;
  p.shards = p.cluster.shards;
  p.placement.policy = ps::ParsePlacementPolicy(p.cluster.placement);
  p.timeout_s = p.cluster.timeout_s;
  p.chunk_bytes = ChunkBytes(config);
  p.server_bounds = ServerBounds::FromConfig(config);
  p.family = p.strategy->family;
  if (p.transport == "sim") {
    p.store = StoreKind::kSimulated;
  } else if (p.strategy->shared_memory) {
    p.store = StoreKind::kShared;
  } else if (p.transport == "memory") {
    p.store = StoreKind::kMemory;
  } else {
    p.store = StoreKind::kShardServers;
  }

  p.schedule = BuildScheduleOptions(config);
  // The rules as StopPolicy::FromConfig reads them (its texts quote the config).
  p.stop = StopPolicy::FromConfig(config, 1).limits();
  p.eval_every_epochs = config.Double("metrics.eval_every_epochs");
  p.eval_every_s = config.Double("metrics.eval_every_s");
  p.eval_examples = config.Int("metrics.eval_examples");

  p.checkpoint_every_steps = config.Int("experiment.checkpoint_every_steps");
  p.checkpoint_every_s = config.Double("experiment.checkpoint_every_s");
  p.checkpoint_keep = static_cast<int>(config.Int("experiment.checkpoint_keep"));
  p.config_hash = TrainingConfigHash(config);

  p.compression = BuildCompressionOptions(config);
  p.ef_residual = p.compression.name != "none" && p.compression.error_feedback;
  p.sim = BuildSimOptions(config);
  p.delay = HasDelayModel(config);
  if (p.family == algorithms::Family::kGroup) {
    // What no executor of the group family does: CURVE (gloo's TCP is not encrypted), and
    // fair or interleaved sharing in a simulation (the simulated store's network,
    // sim/network_model.h; the simulated collective times its own transfers and would
    // silently ignore them).
    RefuseCurveOnCollective(config);
    const std::string sharing(sim::keys::kSharing);
    if (p.transport == "sim" &&
        sim::ParseNetworkSharing(config.Raw(sharing)) != sim::NetworkSharing::kFifo) {
      throw ConfigError(sharing, config.Raw(sharing),
                        "fifo for a strategy on a collective (fair and interleaved sharing are "
                        "modelled for parameter-server strategies only)");
    }
    p.collective.size = p.workers;
    p.collective.algorithm = collective::ParseAlgorithm(config.String("collective.algorithm"));
    p.collective.timeout = std::chrono::milliseconds(config.Int("collective.timeout_ms"));
    p.collective.Validate();
  }
  return p;
}

}  // namespace asgd::experiments
