// The MNIST MLP on MNIST-shaped synthetic data, for the benchmarks that run training
// steps (sim_bench, step_bench): 784 features, 10 classes, 8,192 training examples (the
// values do not change the cost), and the default model (784-256-256-10).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "datasets/synthetic.h"
#include "models/factory.h"

namespace asgd::bench {

struct MlpProblem {
  datasets::TrainTest data;
  std::unique_ptr<models::Model> model;

  MlpProblem() {
    datasets::SyntheticOptions so;
    so.num_train = 8192;
    so.num_test = 16;
    so.num_features = 784;
    so.num_classes = 10;
    data = datasets::MakeSynthetic(so);
    models::InputSpec in;
    in.example_shape = {784};
    in.num_features = 784;
    in.num_classes = 10;
    model = models::NewModel(models::ModelOptions{}, in);
  }
  // Worker w's examples of `workers` (every workers-th).
  std::vector<int64_t> Part(int worker, int workers) const {
    std::vector<int64_t> part;
    for (int64_t i = worker; i < data.train.num_examples; i += workers) part.push_back(i);
    return part;
  }
};

// Built once per process.
inline const MlpProblem& Mlp() {
  static const MlpProblem* p = new MlpProblem();
  return *p;
}

}  // namespace asgd::bench
