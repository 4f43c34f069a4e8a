// Turning a Config into the options structs of the libraries (datasets, models,
// algorithms). Only experiments/ reads configuration; libraries take these structs.
#pragma once

#include <string>
#include <vector>

#include "algorithms/optimizer.h"
#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "compression/compressor.h"
#include "datasets/augment.h"
#include "datasets/loader.h"
#include "experiments/config/config.h"
#include "models/device.h"
#include "models/factory.h"
#include "sim/options.h"

namespace asgd::experiments {

datasets::DataOptions BuildDataOptions(const Config& config,
                                       const std::vector<std::string>& search_dirs);
// data.random_crop_padding and data.random_flip; the seed is left 0 (each worker's sampler
// takes DeriveSeed(run seed, "augment", worker)). The sampler checks them against the
// dataset (ConfigError naming the key).
datasets::AugmentOptions BuildAugmentOptions(const Config& config);
// The config to record in a run folder: `config` with data.mean and data.std set to the
// per-channel statistics computed from the training split (train.channel_mean/std) when
// data.normalize = per_channel left them empty, so config.ini says which values were used
// and replays them; else `config` unchanged.
Config WithDataStatistics(const Config& config, const datasets::Dataset& train);
models::ModelOptions BuildModelOptions(const Config& config);
models::InputSpec InputSpecFor(const datasets::Dataset& train);
algorithms::OptimizerOptions BuildOptimizerOptions(const Config& config);

// The options of the distributed strategy named by algorithm.name, with the checks that
// involve several keys: every strategy setting's own (Setting::check, e.g. at most
// algorithm.workers), one worker_learning_rates entry per worker, and the named strategy's
// (Strategy::check, e.g. easgd's stability condition): ConfigError naming the key.
// StrategyOptions::settings holds every declared setting's value (algorithms/settings.h).
// train_examples: the training set's size, from which a server that follows the schedule
// (sync_sgd, dc_asgd, staleness_aware) knows the epochs it has applied; 0 when only
// validating a config.
algorithms::StrategyOptions BuildStrategyOptions(const Config& config, int64_t train_examples);
// The learning-rate schedule: algorithm.lr_decay, and with algorithm.linear_scaling the
// factor k (the mini-batches one update aggregates) and algorithm.warmup_epochs.
algorithms::ScheduleOptions BuildScheduleOptions(const Config& config);
// cluster.chunk_bytes, for transport::ClientOptions::chunk_bytes: 0 (never chunk) or at
// least kMinChunkBytes, else ConfigError naming the key. Every role that builds a
// client's options (the training worker and evaluator, ps-check's worker, the
// one-process runner's clients) takes it from here.
inline constexpr int64_t kMinChunkBytes = 65536;
int64_t ChunkBytes(const Config& config);

// [compression], checked against the strategy: ConfigError naming compression.name when
// the strategy pushes something compression would destroy (Strategy::supports_compression)
// or takes only some compressors (Strategy::compressors: signsgd_vote, sign only), or the
// run is simulated (cluster.transport = sim), and the compressor's own checks
// (compression.ratio, levels, bucket, clip, error_feedback with none).
compression::CompressionOptions BuildCompressionOptions(const Config& config);

// The algorithm.* keys the config sets (file or --set) that its strategy does not read
// (Strategy::keys), sorted.
std::vector<std::string> IgnoredAlgorithmKeys(const Config& config);
// Worker w's base learning rate: algorithm.worker_learning_rates[w], or learning_rate.
double WorkerLearningRate(const Config& config, int worker);

// model.device: "cpu"; "cuda" (worker w on cuda:(w mod the visible devices)); "cuda:N";
// or a comma list with one of those per worker ("cuda:0,cuda:1,cpu,cpu": a mixed
// cluster). WorkerDeviceSpecs (and CheckWorkerDevices, which keeps nothing) checks the
// syntax and the list's length only (ConfigError naming model.device), so a launcher
// without GPUs can validate a cluster whose workers run where they are: the run plan
// holds the specs. ResolveWorkerDevice makes worker w's device from them and checks that
// it is usable in this process (ConfigError: CUDA not built in, no driver or device, or
// cuda:N out of range).
void CheckWorkerDevices(const Config& config, int workers);
std::vector<std::string> WorkerDeviceSpecs(const Config& config, int workers);
models::Device ResolveWorkerDevice(const std::vector<std::string>& specs, int worker);
// The summary's device column: "cpu", "cuda:0", or the workers' distinct devices in
// order, joined by '+' ("cuda:0+cuda:1+cpu").
std::string DescribeDevices(const std::vector<models::Device>& devices);

// The data search path for a config's [data] dir: that key, $ASGD_DATA_DIR, ./data,
// /usr/share/datasets (empty entries skipped).
std::vector<std::string> DataSearchDirs(const std::string& config_dir);

// The simulator's options from the [delay], [network] and [sim] keys the config sets
// (sim::SimOptionsFromMap: network.preset first, then the other keys, then validation;
// a key left at its table default, e.g. "(preset)", is not set). Used by simulated runs
// (cluster.transport = sim) and, for delay.*, by real runs' injected delays. Throws
// ConfigError naming the key.
sim::SimOptions BuildSimOptions(const Config& config);
// True when the config's delay model can stretch a step (anything but the measured time
// with scale 1, equal speeds, no stragglers, no pauses): real runs then sleep the
// model's extra time after each gradient (sim::DelayModel::ExtraDelay).
bool HasDelayModel(const Config& config);
// The time model in one line for summary.csv and provenance.json: the compute kind and
// the network preset always, every other delay.* and network.* key the config sets, e.g.
// "delay.compute=constant delay.mean_ms=10 network.preset=dc_10gbe".
std::string DescribeTimeModel(const Config& config);

}  // namespace asgd::experiments
