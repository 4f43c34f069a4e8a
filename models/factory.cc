#include "models/factory.h"

#include <string>

#include "core/check.h"
#include "core/error.h"
#include "models/architecture.h"
#include "models/cnn.h"
#include "models/logreg.h"
#include "models/mlp.h"

namespace asgd::models {
namespace {

std::string JoinInts(const std::vector<int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

// Every entry > 0; empty only if allowed.
void CheckSizes(const std::string& key, const std::vector<int64_t>& sizes, bool allow_empty) {
  bool ok = allow_empty || !sizes.empty();
  for (int64_t s : sizes) ok = ok && s > 0;
  if (!ok) {
    throw ConfigError(key, JoinInts(sizes),
                      allow_empty ? "a comma-separated list of positive sizes"
                                  : "a non-empty comma-separated list of positive sizes");
  }
}

Activation CheckActivation(const std::string& name) {
  const std::optional<Activation> a = ParseActivation(name);
  if (!a) throw ConfigError("model.activation", name, "one of relu, tanh, sigmoid");
  return *a;
}

void RefuseSparse(const ModelOptions& options, const InputSpec& input) {
  if (input.sparse) {
    throw ConfigError("model.name", options.name,
                      "logreg for sparse (LIBSVM) data; " + options.name +
                          " needs dense input");
  }
}

CnnArchitecture ResolveCnn(const ModelOptions& options, const InputSpec& input) {
  RefuseSparse(options, input);
  CnnArchitecture arch;
  const std::vector<int64_t>& shape = input.example_shape;
  if (shape.size() == 3) {
    arch.in_channels = shape[0];
    arch.height = shape[1];
    arch.width = shape[2];
  } else if (shape.size() == 2) {
    arch.in_channels = 1;
    arch.height = shape[0];
    arch.width = shape[1];
  } else {
    throw ConfigError("model.name", options.name,
                      "image data (examples of shape CxHxW) for a cnn; these examples have "
                      "shape " + (shape.empty() ? std::string("{}") : ShapeToString(shape)) +
                          ": use softmax or mlp");
  }
  ASGD_CHECK_EQ(arch.in_channels * arch.height * arch.width, input.num_features,
                "example shape ", ShapeToString(shape), " vs num_features");
  CheckSizes("model.cnn_channels", options.cnn_channels, false);
  CheckSizes("model.cnn_fc", options.cnn_fc, true);
  if (options.cnn_kernel <= 0 || options.cnn_kernel % 2 == 0) {
    throw ConfigError("model.cnn_kernel", std::to_string(options.cnn_kernel),
                      "an odd positive kernel size such as 3 or 5");
  }
  arch.channels = options.cnn_channels;
  arch.fc = options.cnn_fc;
  arch.kernel = options.cnn_kernel;
  arch.activation = CheckActivation(options.activation);
  arch.classes = input.num_classes;
  const std::string problem = CnnArchitectureProblem(arch);
  if (!problem.empty()) {
    throw ConfigError("model.cnn_channels", JoinInts(options.cnn_channels),
                      "fewer convolution blocks or a smaller model.cnn_kernel for " +
                          ShapeToString(shape) + " images (" + problem + ")");
  }
  return arch;
}

}  // namespace

std::vector<std::string> ModelNames() { return {"softmax", "mlp", "cnn", "logreg"}; }

Architecture ResolveArchitecture(const ModelOptions& options, const InputSpec& input) {
  ASGD_CHECK_GT(input.num_features, 0, "input features");
  ASGD_CHECK_GE(input.num_classes, 2, "input classes");
  if (options.name == "softmax" || options.name == "mlp") {
    RefuseSparse(options, input);
    MlpArchitecture arch;
    arch.inputs = input.num_features;
    arch.classes = input.num_classes;
    if (options.name == "mlp") {
      if (options.hidden.empty()) {
        throw ConfigError("model.hidden", "",
                          "a non-empty comma-separated list of positive sizes (model.name = "
                          "softmax has no hidden layer)");
      }
      CheckSizes("model.hidden", options.hidden, false);
      arch.hidden = options.hidden;
      arch.activation = CheckActivation(options.activation);
    }
    return arch;
  }
  if (options.name == "cnn") return ResolveCnn(options, input);
  if (options.name == "logreg") {
    if (!input.sparse) {
      throw ConfigError("model.name", options.name,
                        "sparse (LIBSVM) data for logreg; use softmax or mlp for dense data");
    }
    if (input.num_classes > 2) {
      throw ConfigError("model.name", options.name,
                        "binary data for logreg; this data has " +
                            std::to_string(input.num_classes) + " classes: use softmax");
    }
    return LogRegArchitecture{input.num_features};
  }
  std::string names;
  for (const std::string& n : ModelNames()) names += (names.empty() ? "" : ", ") + n;
  throw ConfigError("model.name", options.name, "one of " + names);
}

std::unique_ptr<Model> NewCpuModel(const Architecture& architecture) {
  // std::visit over an overload set: a new architecture that has no CPU model is a
  // compile error here, not a std::bad_variant_access at run time.
  struct Make {
    std::unique_ptr<Model> operator()(const MlpArchitecture& a) const { return NewCpuMlpModel(a); }
    std::unique_ptr<Model> operator()(const CnnArchitecture& a) const { return NewCpuCnnModel(a); }
    std::unique_ptr<Model> operator()(const LogRegArchitecture& a) const {
      return NewCpuLogRegModel(a);
    }
  };
  return std::visit(Make{}, architecture);
}

std::unique_ptr<Model> NewModel(const ModelOptions& options, const InputSpec& input) {
  return NewCpuModel(ResolveArchitecture(options, input));
}

}  // namespace asgd::models
