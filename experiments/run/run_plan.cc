#include "experiments/run/run_plan.h"

#include <chrono>

#include "experiments/config/setup.h"
#include "experiments/record/checkpoint.h"

namespace asgd::experiments {

int RunPlan::checkpoint_shards() const {
  const bool sharded = store == StoreKind::kShardServers || store == StoreKind::kSimulated;
  return family == algorithms::Family::kStore && sharded ? shards : 1;
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
  p.dataset = config.String("data.dataset");
  p.staleness_rows = config.Int("metrics.staleness_rows");

  p.cluster = ClusterPlan::FromConfig(config);
  p.transport = p.cluster.transport;
  p.shards = p.cluster.shards;
  p.placement.policy = ps::ParsePlacementPolicy(p.cluster.placement);
  p.timeout_s = p.cluster.timeout_s;
  p.chunk_bytes = ChunkBytes(config);
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

  p.checkpoint_every_steps = config.Int("experiment.checkpoint_every_steps");
  p.checkpoint_every_s = config.Double("experiment.checkpoint_every_s");
  p.checkpoint_keep = static_cast<int>(config.Int("experiment.checkpoint_keep"));
  p.config_hash = TrainingConfigHash(config);

  p.compression = BuildCompressionOptions(config);
  p.ef_residual = p.compression.name != "none" && p.compression.error_feedback;
  p.sim = BuildSimOptions(config);
  p.delay = HasDelayModel(config);
  if (p.family == algorithms::Family::kGroup) {
    p.collective.size = p.workers;
    p.collective.algorithm = collective::ParseAlgorithm(config.String("collective.algorithm"));
    p.collective.timeout = std::chrono::milliseconds(config.Int("collective.timeout_ms"));
    p.collective.Validate();
  }
  return p;
}

}  // namespace asgd::experiments
