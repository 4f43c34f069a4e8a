// NewModel: names, defaults and the ConfigError for every kind of bad option.
#include "models/factory.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace asgd::models {
namespace {

InputSpec Mnist() { return {{1, 28, 28}, 784, 10, false}; }
InputSpec A9a() { return {{123}, 123, 2, true}; }
InputSpec Vectors() { return {{32}, 32, 4, false}; }

// Expects NewModel to throw a ConfigError about key with value.
void ExpectConfigError(const ModelOptions& options, const InputSpec& input,
                       const std::string& key, const std::string& value) {
  try {
    NewModel(options, input);
    ADD_FAILURE() << "no ConfigError for " << key << " = " << value;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), key) << e.what();
    EXPECT_EQ(e.value(), value) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected"), std::string::npos) << e.what();
  }
}

TEST(Factory, Names) {
  EXPECT_EQ(ModelNames(), (std::vector<std::string>{"softmax", "mlp", "cnn", "logreg"}));
}

TEST(Factory, DefaultsAreTheMnistMlp) {
  auto model = NewModel(ModelOptions{}, Mnist());
  EXPECT_EQ(model->Name(), "mlp");
  EXPECT_EQ(model->Describe(), "mlp 784-256-256-10 relu (269322 params)");
}

TEST(Factory, MakesEveryModel) {
  ModelOptions o;
  o.name = "softmax";
  EXPECT_EQ(NewModel(o, Mnist())->layout().size(), 7850);
  o.name = "mlp";
  o.hidden = {100};
  o.activation = "tanh";
  EXPECT_EQ(NewModel(o, Mnist())->Describe(), "mlp 784-100-10 tanh (79510 params)");
  o.name = "cnn";
  EXPECT_EQ(NewModel(o, Mnist())->layout().size(), 61706);
  // {H, W} images are one channel.
  EXPECT_EQ(NewModel(o, InputSpec{{28, 28}, 784, 10, false})->layout().size(), 61706);
  o.cnn_channels = {4};
  o.cnn_fc = {};
  o.cnn_kernel = 3;
  // 3x28x28 → 28x28 → 14x14, 4 channels → 784 → 10.
  EXPECT_EQ(NewModel(o, InputSpec{{3, 28, 28}, 3 * 784, 10, false})->layout().size(),
            4 * 3 * 9 + 4 + 784 * 10 + 10);
  o.name = "logreg";
  auto logreg = NewModel(o, A9a());
  EXPECT_EQ(logreg->Name(), "logreg");
  EXPECT_EQ(logreg->layout().size(), 124);
  for (const std::string& name : ModelNames()) {
    ModelOptions n;
    n.name = name;
    EXPECT_EQ(NewModel(n, name == "logreg" ? A9a() : Mnist())->Name(), name);
  }
}

TEST(Factory, BadOptionsNameTheKey) {
  ModelOptions o;
  o.name = "resnet";
  ExpectConfigError(o, Mnist(), "model.name", "resnet");

  o = ModelOptions{};
  o.hidden = {};
  ExpectConfigError(o, Mnist(), "model.hidden", "");
  o.hidden = {256, 0};
  ExpectConfigError(o, Mnist(), "model.hidden", "256,0");
  o.hidden = {-3};
  ExpectConfigError(o, Mnist(), "model.hidden", "-3");

  o = ModelOptions{};
  o.activation = "gelu";
  ExpectConfigError(o, Mnist(), "model.activation", "gelu");
  o.name = "cnn";
  ExpectConfigError(o, Mnist(), "model.activation", "gelu");

  // A CNN needs images.
  o = ModelOptions{};
  o.name = "cnn";
  ExpectConfigError(o, Vectors(), "model.name", "cnn");
  ExpectConfigError(o, A9a(), "model.name", "cnn");
  o.cnn_kernel = 4;
  ExpectConfigError(o, Mnist(), "model.cnn_kernel", "4");
  o.cnn_kernel = 0;
  ExpectConfigError(o, Mnist(), "model.cnn_kernel", "0");
  o.cnn_kernel = 5;
  o.cnn_channels = {};
  ExpectConfigError(o, Mnist(), "model.cnn_channels", "");
  o.cnn_channels = {6, 0};
  ExpectConfigError(o, Mnist(), "model.cnn_channels", "6,0");
  // 28 → 28 → 14 → 10 → 5 → 1 → 0: the third block leaves nothing.
  o.cnn_channels = {6, 16, 32};
  ExpectConfigError(o, Mnist(), "model.cnn_channels", "6,16,32");
  o.cnn_channels = {6, 16};
  o.cnn_fc = {120, 0};
  ExpectConfigError(o, Mnist(), "model.cnn_fc", "120,0");

  // Dense models refuse sparse data, logreg refuses dense or multiclass data.
  for (const char* name : {"softmax", "mlp"}) {
    o = ModelOptions{};
    o.name = name;
    ExpectConfigError(o, A9a(), "model.name", name);
  }
  o.name = "logreg";
  ExpectConfigError(o, Mnist(), "model.name", "logreg");
  ExpectConfigError(o, InputSpec{{1000}, 1000, 3, true}, "model.name", "logreg");
}

TEST(Factory, OnlyTheChosenModelsOptionsAreChecked) {
  ModelOptions o;
  o.name = "softmax";
  o.hidden = {};
  o.cnn_kernel = 4;
  EXPECT_NO_THROW(NewModel(o, Mnist()));
  o.name = "mlp";
  o.hidden = {8};
  EXPECT_NO_THROW(NewModel(o, Mnist()));
}

TEST(Factory, ImpossibleInputIsABug) {
  EXPECT_THROW(NewModel(ModelOptions{}, InputSpec{{0}, 0, 10, false}), InvariantError);
  EXPECT_THROW(NewModel(ModelOptions{}, InputSpec{{4}, 4, 1, false}), InvariantError);
}

}  // namespace
}  // namespace asgd::models
