// What the TorchScript model tests share: skipping where /usr/bin/python3 cannot import
// torch, scripting a small module by Python, an MLP module, an input spec, loading a file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "models/model.h"
#include "models/torch/torchscript_model.h"
#include "tests/support/python_torch.h"
#include "tests/support/test_util.h"

namespace asgd::models::torch_testing {

using ::asgd::testing::kPython;
using ::asgd::testing::PythonHasTorch;

#define REQUIRE_TORCH_PYTHON()                                                   \
  do {                                                                           \
    if (!PythonHasTorch()) {                                                     \
      GTEST_SKIP() << kPython                                                    \
                   << " cannot import torch (Debian: python3-torch): no module " \
                      "to load";                                                 \
    }                                                                            \
  } while (0)

// Writes to `out` torch.jit.script(m) of a Python program that defines `m` (a
// torch.nn.Module) after `import torch` and torch.manual_seed(0).
inline void Script(const std::string& body, const std::string& out) {
  ASSERT_TRUE(
      ::asgd::testing::WriteByPython("import sys, torch\ntorch.manual_seed(0)\n" + body +
                                         "\ntorch.jit.save(torch.jit.script(m), sys.argv[1])\n",
                                     out))
      << body;
}

// The module of asgd's Mlp(12, {8, 6}, relu, 3), in PyTorch's terms.
inline constexpr const char* kMlp = R"(
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 8)
        self.fc2 = torch.nn.Linear(8, 6)
        self.fc3 = torch.nn.Linear(6, 3)
    def forward(self, x):
        x = x.flatten(1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))
m = M()
)";

inline InputSpec Spec(std::vector<int64_t> shape, int classes) {
  InputSpec in;
  in.num_features = 1;
  for (int64_t d : shape) in.num_features *= d;
  in.example_shape = std::move(shape);
  in.num_classes = classes;
  return in;
}

inline std::unique_ptr<Model> Load(const std::string& file, const InputSpec& in,
                                   const std::string& init = "file") {
  TorchScriptOptions options;
  options.file = file;
  options.init = init;
  return NewTorchScriptModel(options, in);
}

inline void ExpectContains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

inline std::string Refusal(const std::string& file, const InputSpec& in,
                           std::vector<int64_t> input_shape = {},
                           const std::string& init = "file") {
  TorchScriptOptions options;
  options.file = file;
  options.input_shape = std::move(input_shape);
  options.init = init;
  try {
    NewTorchScriptModel(options, in);
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
  ADD_FAILURE() << file << " was accepted";
  return "";
}

}  // namespace asgd::models::torch_testing
