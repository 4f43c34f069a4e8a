// The run plan: the config resolved once, into the typed values every driver reads
// (sequential, threads, collective, simulated). A driver reads its plan, not the config
// by key: the keys are named here, once, and validated before the run folder exists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "compression/compressor.h"
#include "datasets/augment.h"
#include "experiments/config/cluster_plan.h"
#include "experiments/config/config.h"
#include "experiments/record/run_core.h"
#include "models/device.h"
#include "models/factory.h"
#include "ps/placement.h"
#include "sim/options.h"

namespace asgd::experiments {

// Where the parameters of a strategy of the store family (algorithms::Family::kStore) live
// (ps/param_store.h), by algorithm.name and cluster.transport. The other families have no
// store: their plan's `store` is not read.
enum class StoreKind {
  kShared,        // one shared vector (a shared_memory strategy: hogwild)
  kMemory,        // cluster.transport = memory
  kShardServers,  // cluster.transport = inproc: ZeroMQ shard servers in this process
  kSimulated,     // cluster.transport = sim
};

// A ZeroMQ shard server's per-peer bounds (issue 22), applied by ApplyServerBounds
// (server_bounds.h) with RunPlan::chunk_bytes.
struct ServerBounds {
  uint64_t max_queued_reply_bytes = 0;  // cluster.max_queued_reply_bytes
  double barrier_timeout_s = 0;         // cluster.barrier_timeout_s
  int max_barriers_per_peer = 0;        // cluster.max_barriers_per_peer

  // Reads the keys above (the schema validated them), for a role that has no run plan
  // (ps-check's shard); a run's are in its plan.
  static ServerBounds FromConfig(const Config& config);
};

struct RunPlan {
  uint64_t seed = 0;                               // experiment.seed
  std::string name;                                // algorithm.name
  const algorithms::Strategy* strategy = nullptr;  // its registry entry
  int workers = 1;                                 // algorithm.workers
  int64_t batch_size = 0;                          // algorithm.batch_size
  double learning_rate = 0;                        // algorithm.learning_rate (the base rate)
  double lr_decay = 1;                             // algorithm.lr_decay (per epoch)
  double epochs = 1;                               // experiment.epochs (the target)
  std::string progress;                            // experiment.progress
  std::string model_name;                          // model.name
  models::ModelOptions model;                      // [model]: what a worker's model is built from
  std::string device;                              // model.device, as written
  std::vector<std::string> device_specs;           // its per-worker specs (syntax checked)
  std::vector<double> worker_learning_rates;       // algorithm.worker_learning_rates (may be empty)
  datasets::AugmentOptions augment;                // [data] augmentation
  std::string dataset;                             // data.dataset
  int64_t staleness_rows = 0;                      // metrics.staleness_rows

  // The strategy's family (strategy->family), and for the store family its store.
  algorithms::Family family = algorithms::Family::kStore;
  StoreKind store = StoreKind::kMemory;
  std::string transport;           // cluster.transport
  int shards = 1;                  // cluster.shards
  ps::PlacementOptions placement;  // cluster.placement
  double timeout_s = 0;            // cluster.timeout_s
  int64_t chunk_bytes = 0;         // cluster.chunk_bytes (checked)
  ClusterPlan cluster;             // [cluster]: what a run as processes reads
  ServerBounds server_bounds;      // a shard server's per-peer bounds

  // The learning-rate schedule (algorithm.lr_schedule and its keys), the stop rules
  // (experiment.{epochs,max_steps,max_time_s,target_accuracy,stop_at_target}) and the
  // evaluations (metrics.{eval_every_epochs,eval_every_s,eval_examples}); MakeStopPolicy()
  // and MakeEvalSchedule() build them for a training set's size.
  algorithms::ScheduleOptions schedule;
  StopPolicy::Limits stop;
  double eval_every_epochs = 1;
  double eval_every_s = 0;
  int64_t eval_examples = 0;

  int64_t checkpoint_every_steps = 0;  // experiment.checkpoint_every_steps
  double checkpoint_every_s = 0;       // experiment.checkpoint_every_s
  int checkpoint_keep = 1;             // experiment.checkpoint_keep
  std::string config_hash;             // TrainingConfigHash: what a checkpoint must match

  compression::CompressionOptions compression;  // [compression]
  bool ef_residual = false;  // compressing with error feedback: convergence.csv's column
  sim::SimOptions sim;       // [sim], [network], [delay] (validated)
  bool delay = false;        // a [delay] model is set: real runners inject it as sleeps
  // The group family: collective.algorithm and collective.timeout_ms, size the
  // workers (validated); rank 0 (each rank sets its own).
  collective::CollectiveOptions collective;

  bool checkpointing() const { return checkpoint_every_steps > 0 || checkpoint_every_s > 0; }
  // The snapshots a checkpoint of this run holds: 1 for the single-vector stores and for
  // a collective (the workers' average), cluster.shards for the shard servers.
  int checkpoint_shards() const;
  // Worker w's base rate: worker_learning_rates[w], or learning_rate.
  double WorkerLearningRate(int w) const;
  // Worker w's device (models::ResolveDevice: ConfigError if it is not usable here).
  models::Device WorkerDevice(int w) const;

  // The stop rules and the evaluation schedule of a training set of `train_examples`:
  // what StopPolicy::FromConfig and EvalSchedule::FromConfig build from the same keys.
  experiments::StopPolicy MakeStopPolicy(int64_t train_examples) const;
  experiments::EvalSchedule MakeEvalSchedule(int64_t train_examples) const;

  // Reads and validates the keys above. Throws ConfigError naming the first bad key.
  static RunPlan FromConfig(const Config& config);
};

}  // namespace asgd::experiments
