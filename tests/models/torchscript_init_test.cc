// The TorchScript model's initialisation and training draws (models/torch/torchscript_model.h):
// model.init = seed is PyTorch's reset_parameters under the run's seed, refused where a
// module cannot be re-initialised, and dropout draws follow the training seed, also with
// other workers stepping at once. Every test skips, saying so, where /usr/bin/python3
// cannot import torch.
#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "models/device.h"
#include "models/factory.h"
#include "models/torch/torchscript_model.h"
#include "tests/models/test_data.h"
#include "tests/models/torchscript_testing.h"
#include "tests/support/test_util.h"

namespace asgd::models {
namespace {

using testing::DenseData;
using testing::MakeBlobs;
using torch_testing::ExpectContains;
using torch_testing::kMlp;
using torch_testing::kPython;
using torch_testing::Load;
using torch_testing::PythonHasTorch;
using torch_testing::Refusal;
using torch_testing::Script;
using torch_testing::Spec;

// ---- model.init = seed and the training draws ----

// A module of PyTorch's standard layers with parameters, and one of its own with an
// exported TorchScript reset_parameters: on 1x4x4 images, 3 classes. The layers after
// `rnn` are not in forward (their parameters get zero gradients) but are re-initialised
// all the same.
constexpr const char* kLayers = R"(
class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.s = torch.nn.Parameter(torch.ones(3))
    @torch.jit.export
    def reset_parameters(self):
        with torch.no_grad():
            self.s.uniform_(0.5, 1.5)
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(2)
        self.up = torch.nn.ConvTranspose2d(2, 1, 1)
        self.norm = torch.nn.LayerNorm(16)
        self.fc = torch.nn.Linear(16, 3)
        self.bil = torch.nn.Bilinear(3, 3, 3)
        self.gn = torch.nn.GroupNorm(1, 3)
        self.emb = torch.nn.Embedding(5, 3, padding_idx=1)
        self.rnn = torch.nn.GRU(3, 4)
        self.scale = Scale()
        self.lstm = torch.nn.LSTM(3, 2, num_layers=2)
        self.cell = torch.nn.LSTMCell(3, 2)
        self.elman = torch.nn.RNN(2, 3, bias=False)
        self.conv1 = torch.nn.Conv1d(2, 4, 3, groups=2)
        self.conv3 = torch.nn.Conv3d(1, 2, 2)
        self.bag = torch.nn.EmbeddingBag(4, 2, padding_idx=0)
        self.inorm = torch.nn.InstanceNorm1d(3, affine=True)
        self.plain = torch.nn.Linear(3, 2, bias=False)
    def forward(self, x):
        h = self.up(torch.relu(self.bn(self.conv(x)))).flatten(1)
        h = self.fc(self.norm(h))
        h = self.gn(self.bil(h, h))
        return h * self.scale.s + self.emb.weight.sum(0)
m = M()
)";

// The values PyTorch itself gives: torch.manual_seed(seed), then every module's own
// (Python) reset_parameters in modules() order; the parameters written as text.
std::vector<float> PyTorchReset(const std::string& module_body, uint64_t seed,
                                const ::asgd::testing::TempDir& dir) {
  const std::string out = dir.File("reset_" + std::to_string(seed) + ".txt");
  EXPECT_TRUE(::asgd::testing::WriteByPython(
      "import sys, torch\ntorch.manual_seed(0)\n" + module_body + "\ntorch.manual_seed(" +
          std::to_string(seed) +
          ")\nfor mod in m.modules():\n"
          "    if hasattr(mod, 'reset_parameters'):\n        mod.reset_parameters()\n"
          "open(sys.argv[1], 'w').write(' '.join(repr(float(v)) for p in m.parameters() "
          "for v in p.detach().flatten()))\n",
      out));
  std::ifstream in(out);
  std::vector<float> values;
  for (double v; in >> v;) values.push_back(static_cast<float>(v));
  return values;
}

// model.init = seed: θ₀ is every submodule's reset_parameters() under torch's generator
// seeded with the seed, equal to the values PyTorch gives for its own layers and the
// module's exported method; a function of the seed only (the same in a clone and in a
// second load, as in another worker or process), not the file's values.
TEST(TorchScriptModel, SeedInitIsPyTorchsResetParametersUnderTheSeed) {
  REQUIRE_TORCH_PYTHON();
  ::asgd::testing::TempDir dir;
  Script(kLayers, dir.File("layers.pt"));
  std::unique_ptr<Model> model = Load(dir.File("layers.pt"), Spec({1, 4, 4}, 3), "seed");
  const auto n = static_cast<std::size_t>(model->layout().size());
  std::vector<float> a(n), b(n), clone(n), again(n), other(n), file(n);
  model->Initialize(a, 1234567);
  EXPECT_EQ(a, PyTorchReset(kLayers, 1234567, dir));
  model->Clone()->Initialize(clone, 1234567);
  Load(dir.File("layers.pt"), Spec({1, 4, 4}, 3), "seed")->Initialize(again, 1234567);
  model->Initialize(b, 1234567);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, clone);
  EXPECT_EQ(a, again);
  model->Initialize(other, 7654321);
  EXPECT_NE(a, other);
  EXPECT_EQ(other, PyTorchReset(kLayers, 7654321, dir));
  Load(dir.File("layers.pt"), Spec({1, 4, 4}, 3))->Initialize(file, 1234567);
  EXPECT_NE(a, file);
  // The norms' weights are ones and biases zeros, the padding row of the embedding zero.
  const ParamLayout& layout = model->layout();
  EXPECT_EQ(a[static_cast<std::size_t>(layout.Get("bn.weight").offset)], 1.0f);
  EXPECT_EQ(a[static_cast<std::size_t>(layout.Get("gn.bias").offset)], 0.0f);
  EXPECT_EQ(a[static_cast<std::size_t>(layout.Get("emb.weight").offset + 3)], 0.0f);
}

TEST(TorchScriptModel, SeedInitRefusesParametersNoResetParametersReinitialises) {
  REQUIRE_TORCH_PYTHON();
  ::asgd::testing::TempDir dir;
  // A parameter of the module itself, which has no reset_parameters.
  Script(
      "class M(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.fc = torch.nn.Linear(12, 3)\n"
      "        self.temperature = torch.nn.Parameter(torch.ones(1))\n"
      "    def forward(self, x):\n"
      "        return self.fc(x) / self.temperature\n"
      "m = M()",
      dir.File("bare.pt"));
  const std::string bare = Refusal(dir.File("bare.pt"), Spec({12}, 3), {}, "seed");
  ExpectContains(bare, "model.init");
  ExpectContains(bare, "parameter 'temperature'");
  ExpectContains(bare, "bare.pt");
  ExpectContains(bare, "@torch.jit.export");
  // With model.init = file it loads.
  EXPECT_EQ(Load(dir.File("bare.pt"), Spec({12}, 3))->num_classes(), 3);
  // An exported reset_parameters that fails.
  Script(
      "class Bad(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.w = torch.nn.Parameter(torch.zeros(12, 3))\n"
      "    @torch.jit.export\n"
      "    def reset_parameters(self):\n"
      "        raise RuntimeError('cannot reset')\n"
      "    def forward(self, x):\n"
      "        return x @ self.w\n"
      "m = torch.nn.Sequential(Bad())",
      dir.File("bad.pt"));
  const std::string bad = Refusal(dir.File("bad.pt"), Spec({12}, 3), {}, "seed");
  ExpectContains(bad, "model.init");
  ExpectContains(bad, "reset_parameters() of '0' fails");
  // An init that is neither.
  ExpectContains(Refusal(dir.File("bare.pt"), Spec({12}, 3), {}, "random"), "model.init");
}

// Dropout: a step's masks are a function of SeedTraining's seed and step, whichever
// instance computes it; the next step draws anew; another seed draws otherwise.
TEST(TorchScriptModel, DropoutDrawsFollowTheTrainingSeed) {
  REQUIRE_TORCH_PYTHON();
  ::asgd::testing::TempDir dir;
  Script(
      "m = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Dropout(0.5), "
      "torch.nn.Linear(32, 3))",
      dir.File("dropout.pt"));
  std::unique_ptr<Model> a = Load(dir.File("dropout.pt"), Spec({12}, 3));
  std::unique_ptr<Model> b = a->Clone();
  const DenseData data = MakeBlobs(16, 12, 3, 3);
  const auto n = static_cast<std::size_t>(a->layout().size());
  std::vector<float> p(n);
  a->Initialize(p, 0);
  auto step = [&](Model& m) {
    std::vector<float> g(n);
    m.LossAndGradient(p, data.All(), g);
    return g;
  };
  a->SeedTraining(42, 0);
  const std::vector<float> a0 = step(*a), a1 = step(*a);
  EXPECT_NE(a0, a1);  // step 1 draws other masks than step 0
  b->SeedTraining(42, 1);
  EXPECT_EQ(step(*b), a1);  // another instance at the same seed and step: the same masks
  b->SeedTraining(42, 0);
  EXPECT_EQ(step(*b), a0);
  b->SeedTraining(43, 0);
  EXPECT_NE(step(*b), a0);
  // In between, something else draws from torch's generator (here another module's
  // check at load): the seeded steps do not depend on it.
  Load(dir.File("dropout.pt"), Spec({12}, 3));
  a->SeedTraining(42, 0);
  EXPECT_EQ(step(*a), a0);
  // A module without random draws computes the same whatever the seed.
  Script(kMlp, dir.File("mlp.pt"));
  std::unique_ptr<Model> mlp = Load(dir.File("mlp.pt"), Spec({12}, 3));
  std::vector<float> q(static_cast<std::size_t>(mlp->layout().size())), g1(q.size()), g2(q.size());
  mlp->Initialize(q, 0);
  mlp->SeedTraining(1, 0);
  mlp->LossAndGradient(q, data.All(), g1);
  mlp->SeedTraining(2, 5);
  mlp->LossAndGradient(q, data.All(), g2);
  EXPECT_EQ(g1, g2);
}

// Threads taking small dropout steps at once (each its own clone, reseeding the generator
// every step) while another thread initialises a deep module by seed: the initialisation
// has torch's generator to itself, so θ₀ is the same as with nothing else running.
TEST(TorchScriptModel, SeedInitIsUnaffectedByConcurrentDropoutSteps) {
  REQUIRE_TORCH_PYTHON();
  ::asgd::testing::TempDir dir;
  Script(
      "m = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.Dropout(0.5), "
      "torch.nn.Linear(8, 3))",
      dir.File("dropout.pt"));
  // Many layers: many draws, with room between them for another thread's reseeding.
  Script(
      "m = torch.nn.Sequential(*[torch.nn.Linear(12, 12) for _ in range(200)], "
      "torch.nn.Linear(12, 3))",
      dir.File("big.pt"));
  std::unique_ptr<Model> big = Load(dir.File("big.pt"), Spec({12}, 3), "seed");
  std::vector<float> expected(static_cast<std::size_t>(big->layout().size()));
  big->Initialize(expected, 99);
  std::unique_ptr<Model> small = Load(dir.File("dropout.pt"), Spec({12}, 3));
  const DenseData data = MakeBlobs(2, 12, 3, 3);
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      std::unique_ptr<Model> mine = small->Clone();
      std::vector<float> p(static_cast<std::size_t>(mine->layout().size())), g(p.size());
      mine->Initialize(p, 1);
      for (int64_t step = 0; !stop.load(); ++step) {
        mine->SeedTraining(static_cast<uint64_t>(w), step);
        mine->LossAndGradient(p, data.All(), g);
      }
    });
  }
  for (int i = 0; i < 10; ++i) {
    std::vector<float> got(expected.size());
    big->Initialize(got, 99);
    EXPECT_EQ(got, expected) << i;
  }
  stop.store(true);
  for (std::thread& t : workers) t.join();
}

TEST(TorchScriptModel, NewModelOnBuildsItOnTheCpuOnly) {
  REQUIRE_TORCH_PYTHON();
  ::asgd::testing::TempDir dir;
  Script(kMlp, dir.File("mlp.pt"));
  ModelOptions options;
  options.name = "torchscript";
  options.file = dir.File("mlp.pt");
  EXPECT_EQ(NewModelOn(options, Spec({12}, 3), Device{})->Name(), "torchscript");
  EXPECT_THROW(NewModelOn(options, Spec({12}, 3), "cuda:0"), ConfigError);
  // model.init reaches the model: by seed, θ₀ follows the seed.
  options.init = "seed";
  std::unique_ptr<Model> seeded = NewModelOn(options, Spec({12}, 3), Device{});
  std::vector<float> a(static_cast<std::size_t>(seeded->layout().size())), b(a.size());
  seeded->Initialize(a, 1);
  seeded->Initialize(b, 2);
  EXPECT_NE(a, b);
  EXPECT_EQ(seeded->Source(), "model.file = " + options.file);
}

}  // namespace
}  // namespace asgd::models
