#include "experiments/config/setup.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/rng.h"
#include "experiments/config/config_keys.h"

namespace asgd::experiments {

datasets::DataOptions BuildDataOptions(const Config& config,
                                       const std::vector<std::string>& search_dirs) {
  datasets::DataOptions d;
  d.name = config.String("data.dataset");
  d.search_dirs = search_dirs;
  d.verify = config.Bool("data.verify");
  d.num_features = config.Int("data.num_features");
  const int64_t train_limit = config.Int("data.train_limit");
  const int64_t test_limit = config.Int("data.test_limit");
  d.max_train = train_limit > 0 ? train_limit : -1;
  d.max_test = test_limit > 0 ? test_limit : -1;
  d.synthetic.num_train = config.Int("data.synthetic_train");
  d.synthetic.num_test = config.Int("data.synthetic_test");
  d.synthetic.num_features = config.Int("data.synthetic_features");
  d.synthetic.num_classes = static_cast<int>(config.Int("data.synthetic_classes"));
  d.synthetic.separation = config.Double("data.synthetic_separation");
  d.synthetic.noise = config.Double("data.synthetic_noise");
  d.synthetic.nonzeros_per_example = config.Int("data.synthetic_nonzeros");
  d.synthetic.seed = DeriveSeed(static_cast<uint64_t>(config.Int("experiment.seed")), "synthetic");
  d.normalize.per_channel = config.String("data.normalize") == "per_channel";
  d.normalize.mean = config.DoubleList("data.mean");
  d.normalize.std = config.DoubleList("data.std");
  d.augment = BuildAugmentOptions(config);
  return d;
}

datasets::AugmentOptions BuildAugmentOptions(const Config& config) {
  datasets::AugmentOptions a;
  a.crop_padding = config.Int("data.random_crop_padding");
  a.flip = config.Bool("data.random_flip");
  return a;
}

Config WithDataStatistics(const Config& config, const datasets::Dataset& train) {
  Config out = config;
  if (train.channel_mean.empty() || !config.DoubleList("data.mean").empty()) return out;
  auto list = [](const std::vector<double>& v) {
    std::string s;
    for (double x : v) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.17g", x);
      if (!s.empty()) s += ',';
      s += buf;
    }
    return s;
  };
  out.Set("data.mean", list(train.channel_mean));
  out.Set("data.std", list(train.channel_std));
  return out;
}

models::ModelOptions BuildModelOptions(const Config& config) {
  models::ModelOptions m;
  m.name = config.String("model.name");
  m.hidden = config.IntList("model.hidden");
  m.activation = config.String("model.activation");
  m.cnn_channels = config.IntList("model.cnn_channels");
  m.cnn_fc = config.IntList("model.cnn_fc");
  m.cnn_kernel = config.Int("model.cnn_kernel");
  m.file = config.String("model.file");
  if (!m.file.empty()) {
    // Relative to the config file's folder (the working directory for a config without a
    // file), made absolute so that every process of a run opens the same file.
    const std::filesystem::path source(config.source());
    std::filesystem::path file(m.file);
    if (file.is_relative() && !config.source().empty()) file = source.parent_path() / file;
    m.file = std::filesystem::absolute(file).lexically_normal().string();
  }
  m.input_shape = config.IntList("model.input_shape");
  m.init = config.String("model.init");
  m.bn_batches = config.Int("model.bn_batches");
  m.bn_batch_size = config.Int("algorithm.batch_size");
  return m;
}

models::InputSpec InputSpecFor(const datasets::Dataset& train) {
  models::InputSpec in;
  in.example_shape = train.example_shape;
  in.num_features = train.num_features;
  in.num_classes = train.num_classes;
  in.sparse = train.sparse;
  return in;
}

algorithms::OptimizerOptions BuildOptimizerOptions(const Config& config) {
  algorithms::OptimizerOptions o;
  o.name = config.String("algorithm.optimizer");
  o.momentum = config.Double("algorithm.momentum");
  o.beta1 = config.Double("algorithm.beta1");
  o.beta2 = config.Double("algorithm.beta2");
  o.epsilon = config.Double("algorithm.epsilon");
  o.initial_accumulator = config.Double("algorithm.initial_accumulator");
  o.weight_decay = config.Double("algorithm.weight_decay");
  return o;
}

algorithms::StrategyOptions BuildStrategyOptions(const Config& config, int64_t train_examples) {
  algorithms::StrategyOptions so;
  const int workers = static_cast<int>(config.Int("algorithm.workers"));
  if (workers > kMaxRealWorkers && config.String("cluster.transport") != "sim") {
    throw ConfigError("algorithm.workers", config.Raw("algorithm.workers"),
                      internal::StrCat("at most ", kMaxRealWorkers, " with cluster.transport = ",
                                       config.String("cluster.transport"), " (up to ",
                                       kMaxSimWorkers, " with sim)"));
  }
  so.num_workers = workers;
  so.worker.learning_rate = config.Double("algorithm.learning_rate");
  so.worker.window = config.Int("algorithm.window");
  so.worker.fetch_window = config.Int("algorithm.fetch_window") > 0
                               ? config.Int("algorithm.fetch_window")
                               : so.worker.window;
  so.worker.overlap = config.Bool("collective.overlap");
  so.worker.bucket_floats =
      config.Int("collective.bucket_kib") * 1024 / static_cast<int64_t>(sizeof(float));
  // The strategies' own settings (every strategy's: a run reads its own), then their checks
  // against the other options.
  for (const algorithms::Setting* setting : algorithms::AllSettings()) {
    so.settings.Set(setting->name, config.Raw("algorithm." + setting->name));
  }
  for (const algorithms::Setting* setting : algorithms::AllSettings()) {
    if (!setting->check) continue;
    const std::string expected = setting->check(so);
    if (!expected.empty()) {
      const std::string key = "algorithm." + setting->name;
      throw ConfigError(key, config.Raw(key), expected);
    }
  }
  so.worker_momentum = config.Double("algorithm.momentum");
  so.server_initial_accumulator = config.Double("algorithm.initial_accumulator");
  so.optimizer = BuildOptimizerOptions(config);
  so.schedule = BuildScheduleOptions(config);
  if (train_examples > 0) {
    so.epochs_per_batch = static_cast<double>(config.Int("algorithm.batch_size")) /
                          static_cast<double>(train_examples);
  }
  const std::vector<double> rates = config.DoubleList("algorithm.worker_learning_rates");
  if (!rates.empty() && static_cast<int>(rates.size()) != workers) {
    throw ConfigError("algorithm.worker_learning_rates",
                      config.Raw("algorithm.worker_learning_rates"),
                      internal::StrCat("one rate per worker (", workers, "), or empty"));
  }
  // The strategy's own checks (easgd's stability condition).
  const algorithms::Strategy* strategy =
      algorithms::TryFindStrategy(config.String("algorithm.name"));
  if (strategy != nullptr && strategy->check) strategy->check(so);
  return so;
}

algorithms::ScheduleOptions BuildScheduleOptions(const Config& config) {
  algorithms::ScheduleOptions o;
  o.decay = config.Double("algorithm.lr_decay");
  if (config.Bool("algorithm.linear_scaling")) {
    // Goyal et al.'s rule scales the rate by the mini-batches one update aggregates: only
    // synchronous rounds aggregate (N of them). An asynchronous update applies one
    // worker's gradient or window, so scaling it by the worker count is not the rule.
    // On a collective, allreduce_sgd's update is the mean of every worker's batch and
    // local_sgd's round averages every worker's steps (Lin et al. 2020 scale as Goyal et
    // al.): those read the key; dpsgd's gossip step applies one worker's gradient.
    const std::string name = config.String("algorithm.name");
    const algorithms::Strategy& strategy = algorithms::FindStrategy(name);
    const bool aggregates =
        strategy.rounds || (strategy.family == algorithms::Family::kGroup &&
                            std::find(strategy.keys.begin(), strategy.keys.end(),
                                      "algorithm.linear_scaling") != strategy.keys.end());
    if (!aggregates && strategy.family != algorithms::Family::kSequential) {
      throw ConfigError("algorithm.linear_scaling", "true",
                        "false with " + name +
                            ": the linear scaling rule is for updates that aggregate "
                            "mini-batches (sync_sgd, sagn, allreduce_sgd, local_sgd); an "
                            "asynchronous update applies one worker's");
    }
    const auto workers = static_cast<double>(config.Int("algorithm.workers"));
    const auto replicas = static_cast<double>(config.Int("algorithm.replicas_to_aggregate"));
    o.scale = strategy.rounds && replicas > 0 ? replicas : workers;
    o.warmup_epochs = config.Double("algorithm.warmup_epochs");
  }
  return o;
}

compression::CompressionOptions BuildCompressionOptions(const Config& config) {
  compression::CompressionOptions o;
  o.name = config.String("compression.name");
  o.ratio = config.Double("compression.ratio");
  o.levels = static_cast<int>(config.Int("compression.levels"));
  o.bucket = config.Int("compression.bucket");
  o.clip = config.Double("compression.clip");
  o.error_feedback = config.Bool("compression.error_feedback");
  compression::NewCompressor(o);  // its checks, naming the key
  if (o.name == "none") return o;
  const std::string algorithm = config.String("algorithm.name");
  const algorithms::Strategy& strategy = algorithms::FindStrategy(algorithm);
  const std::vector<std::string>& only = strategy.compressors;
  if (strategy.supports_compression && !only.empty() &&
      std::find(only.begin(), only.end(), o.name) == only.end()) {
    std::string names = "none";
    for (const std::string& n : only) names += " or " + n;
    throw ConfigError("compression.name", o.name,
                      internal::StrCat(names, " with algorithm.name = ", algorithm));
  }
  if (!strategy.supports_compression) {
    std::string compressible;
    for (const algorithms::Strategy* s : algorithms::Strategies()) {
      if (s->supports_compression) compressible += (compressible.empty() ? "" : ", ") + s->name;
    }
    throw ConfigError("compression.name", o.name,
                      internal::StrCat("none with algorithm.name = ", algorithm,
                                       ", whose workers push no update to compress (parameters, or "
                                       "nothing); compression works with ",
                                       compressible));
  }
  return o;
}

int64_t ChunkBytes(const Config& config) {
  const int64_t bytes = config.Int("cluster.chunk_bytes");
  if (bytes != 0 && bytes < kMinChunkBytes) {
    // Smaller chunks buy no overlap and multiply the messages: a push goes as at most the
    // client's send queue (10000 messages) of them.
    throw ConfigError("cluster.chunk_bytes", config.Raw("cluster.chunk_bytes"),
                      internal::StrCat("0 (never chunk) or at least ", kMinChunkBytes, " bytes"));
  }
  return bytes;
}

std::vector<std::string> IgnoredAlgorithmKeys(const Config& config) {
  const std::string name = config.String("algorithm.name");
  const std::vector<std::string>& reads = algorithms::FindStrategy(name).keys;
  std::vector<std::string> ignored;
  // Keys only a strategy reads.
  for (const std::string& key : algorithms::AllStrategyKeys()) {
    if (config.IsExplicit(key) && !std::binary_search(reads.begin(), reads.end(), key)) {
      ignored.push_back(key);
    }
  }
  return ignored;
}

double WorkerLearningRate(const Config& config, int worker) {
  const std::vector<double> rates = config.DoubleList("algorithm.worker_learning_rates");
  if (rates.empty()) return config.Double("algorithm.learning_rate");
  ASGD_CHECK(worker >= 0 && static_cast<std::size_t>(worker) < rates.size(), "worker ", worker);
  return rates[static_cast<std::size_t>(worker)];
}

namespace {

// The per-worker specs of model.device (one spec: every worker's).
std::vector<std::string> DeviceSpecs(const Config& config, int workers) {
  const std::string value = config.String("model.device");
  std::vector<std::string> specs;
  std::size_t from = 0;
  while (true) {
    const std::size_t comma = value.find(',', from);
    specs.push_back(
        value.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  if (specs.size() > 1 && specs.size() != static_cast<std::size_t>(workers)) {
    throw ConfigError("model.device", value,
                      internal::StrCat("one device for all workers or a list of ", workers,
                                       " (one per worker), not ", specs.size()));
  }
  for (const std::string& spec : specs) {
    try {
      (void)models::ParseDevice(spec);
    } catch (const ConfigError&) {
      throw ConfigError("model.device", value,
                        "cpu, cuda or cuda:N (N a CUDA device index), or a comma list of "
                        "those, one per worker");
    }
  }
  return specs;
}

}  // namespace

void CheckWorkerDevices(const Config& config, int workers) { (void)DeviceSpecs(config, workers); }

std::vector<std::string> WorkerDeviceSpecs(const Config& config, int workers) {
  return DeviceSpecs(config, workers);
}

models::Device ResolveWorkerDevice(const std::vector<std::string>& specs, int worker) {
  ASGD_CHECK(!specs.empty() && worker >= 0 &&
                 (specs.size() == 1 || static_cast<std::size_t>(worker) < specs.size()),
             "worker ", worker, " of ", specs.size(), " device specs");
  const std::string& spec = specs.size() == 1 ? specs[0] : specs[static_cast<std::size_t>(worker)];
  if (spec == "cuda") {
    (void)models::ResolveDevice(spec);  // ConfigError without a usable device
    return models::ResolveDevice(internal::StrCat("cuda:", worker % models::CudaDeviceCount()));
  }
  return models::ResolveDevice(spec);
}

std::string DescribeDevices(const std::vector<models::Device>& devices) {
  std::vector<std::string> distinct;
  for (const models::Device& d : devices) {
    const std::string s = d.ToString();
    if (std::find(distinct.begin(), distinct.end(), s) == distinct.end()) distinct.push_back(s);
  }
  if (distinct.empty()) return "cpu";
  std::string out = distinct[0];
  for (std::size_t i = 1; i < distinct.size(); ++i) {
    out += '+';
    out += distinct[i];
  }
  return out;
}

std::vector<std::string> DataSearchDirs(const std::string& config_dir) {
  std::vector<std::string> dirs;
  if (!config_dir.empty()) dirs.push_back(config_dir);
  const char* env = std::getenv("ASGD_DATA_DIR");
  if (env != nullptr && *env != '\0') dirs.emplace_back(env);
  dirs.emplace_back("data");
  dirs.emplace_back("/usr/share/datasets");
  return dirs;
}

namespace {

// The [delay], [network] and [sim] keys the config sets, in the table's order; a
// network.* key left at "(preset)" (its table default) is not set.
std::vector<std::pair<std::string, std::string>> SetSimKeys(const Config& config) {
  std::vector<std::pair<std::string, std::string>> set;
  for (const sim::OptionKey& k : sim::SimOptionKeys()) {
    const std::string key(k.key);
    if (!config.IsExplicit(key)) continue;
    const std::string& value = config.Raw(key);
    if (value == k.default_value && k.default_value.starts_with("(")) continue;
    set.emplace_back(key, value);
  }
  return set;
}

}  // namespace

sim::SimOptions BuildSimOptions(const Config& config) {
  std::map<std::string, std::string> values;
  for (auto& [key, value] : SetSimKeys(config)) values[key] = value;
  return sim::SimOptionsFromMap(values);
}

bool HasDelayModel(const Config& config) {
  const sim::DelayOptions d = BuildSimOptions(config).delay;
  const bool speeds =
      std::any_of(d.speeds.begin(), d.speeds.end(), [](double s) { return s != 1; });
  return d.compute != sim::ComputeKind::kMeasured || d.measured_scale != 1 || speeds ||
         (d.straggler_fraction > 0 && d.straggler_factor > 1) ||
         (d.pause_probability > 0 && d.pause_length > Duration::zero());
}

std::string DescribeTimeModel(const Config& config) {
  std::string out;
  auto add = [&](std::string_view key, const std::string& value) {
    if (!out.empty()) out += ' ';
    out += key;
    out += '=';
    out += value;
  };
  const auto set = SetSimKeys(config);
  for (std::string_view always : {sim::keys::kCompute, sim::keys::kPreset}) {
    add(always, config.Raw(always));
    for (const auto& [key, value] : set) {
      if (key.rfind(always.substr(0, always.find('.') + 1), 0) == 0 && key != always) {
        add(key, value);
      }
    }
  }
  for (const auto& [key, value] : set) {
    // sim.share_buffers changes the memory, not the times (config.ini still records it).
    if (key.rfind("sim.", 0) == 0 && key != sim::keys::kShareBuffers) add(key, value);
  }
  return out;
}

}  // namespace asgd::experiments
