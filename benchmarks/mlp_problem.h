// The MNIST MLP on MNIST-shaped synthetic data, for the benchmarks that run training
// steps (sim_bench, step_bench): 784 features, 10 classes, 8,192 training examples (or as
// many as asked: the values do not change the cost), and the default model (784-256-256-10).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "datasets/synthetic.h"
#include "models/factory.h"

namespace asgd::bench {

struct MlpProblem {
  datasets::TrainTest data;
  std::unique_ptr<models::Model> model;

  explicit MlpProblem(int64_t num_train = 8192) {
    datasets::SyntheticOptions so;
    so.num_train = num_train;
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

// Built once per process (per size).
inline const MlpProblem& Mlp(int64_t num_train = 8192) {
  static auto* problems = new std::map<int64_t, std::unique_ptr<MlpProblem>>();
  std::unique_ptr<MlpProblem>& p = (*problems)[num_train];
  if (p == nullptr) p = std::make_unique<MlpProblem>(num_train);
  return *p;
}

}  // namespace asgd::bench
