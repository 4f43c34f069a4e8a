#include "experiments/setup.h"

#include "core/rng.h"

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
  return d;
}

models::ModelOptions BuildModelOptions(const Config& config) {
  models::ModelOptions m;
  m.name = config.String("model.name");
  m.hidden = config.IntList("model.hidden");
  m.activation = config.String("model.activation");
  m.cnn_channels = config.IntList("model.cnn_channels");
  m.cnn_fc = config.IntList("model.cnn_fc");
  m.cnn_kernel = config.Int("model.cnn_kernel");
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

}  // namespace asgd::experiments
