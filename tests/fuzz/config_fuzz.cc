// libFuzzer target over the experiment config (experiments/config/config.h): the INI parse
// (Config::FromString, Boost.Program_options underneath), the validation of every value
// against the schema (experiments/config/config_keys.cc), --set overrides, and the checks that
// turn a parsed config into the libraries' options (experiments/config/setup.h), which involve
// several keys. Bad input may only ever throw ConfigError with a one-line message; never
// crash, hang, read out of bounds or throw anything else.
//
// Input framing: the text up to the first NUL byte is the INI file; every NUL-separated
// piece after it is one override ("section.key=value", as `--set` passes it).
//
// A config that parses must keep what config.h promises: every value valid for its key,
// every typed getter working (they check with ASGD_CHECK, an InvariantError, which would
// be a finding), and ResolvedIni() parsing back to the same values.
//
// Seeds: `config_fuzz --write-seeds=DIR` writes INI files covering every section, with
// and without overrides, valid and slightly broken, to DIR (the committed corpus in
// tests/fuzz/corpus/config, which also holds copies of a few experiments/configs/*.ini).
// See README.md.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "experiments/config/config.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/setup.h"
#include "tests/fuzz/fuzz_util.h"

namespace asgd::experiments {
namespace {

constexpr std::string_view kSource = "fuzz/config.ini";

void CheckConfigError(const ConfigError& e) { fuzz::CheckErrorMessage(e, "config: ", ""); }

// Every getter of every key, by its type. ASGD_CHECK inside them fails (InvariantError)
// if validation let a value through that the getter cannot read.
void CheckValues(const Config& c) {
  for (const KeySpec& k : c.schema().keys()) {
    ASGD_FUZZ_CHECK(ValidateValue(k, c.Raw(k.name)).empty());
    (void)c.IsExplicit(k.name);
    switch (k.type) {
      case KeyType::kString:
        (void)c.String(k.name);
        break;
      case KeyType::kInt:
        (void)c.Int(k.name);
        break;
      case KeyType::kDouble:
        (void)c.Double(k.name);
        break;
      case KeyType::kBool:
        (void)c.Bool(k.name);
        break;
      case KeyType::kChoice:
        ASGD_FUZZ_CHECK(std::find(k.choices.begin(), k.choices.end(), c.Raw(k.name)) !=
                        k.choices.end());
        break;
      case KeyType::kIntList:
        (void)c.IntList(k.name);
        break;
      case KeyType::kDoubleList:
        (void)c.DoubleList(k.name);
        break;
    }
  }
}

// The checks of experiments/config/setup.cc that involve several keys: ConfigError or success.
void CheckSetup(const Config& c) {
  (void)BuildDataOptions(c, {});
  (void)BuildModelOptions(c);
  (void)BuildOptimizerOptions(c);
  (void)BuildScheduleOptions(c);
  const int workers = static_cast<int>(c.Int("algorithm.workers"));
  try {
    (void)BuildStrategyOptions(c, 0);
    for (int w = 0; w < workers; ++w) (void)WorkerLearningRate(c, w);
  } catch (const ConfigError& e) {
    CheckConfigError(e);
  }
  try {
    CheckWorkerDevices(c, workers);
  } catch (const ConfigError& e) {
    CheckConfigError(e);
  }
}

void FuzzOne(const uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string_view ini = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string_view::npos) {
    std::string_view rest = input.substr(nul + 1);
    for (;;) {
      const std::size_t next = rest.find('\0');
      overrides.emplace_back(rest.substr(0, next));
      if (next == std::string_view::npos) break;
      rest.remove_prefix(next + 1);
    }
  }

  const Schema& schema = ExperimentSchema();
  std::optional<Config> config;
  try {
    config.emplace(Config::FromString(ini, overrides, schema, std::string(kSource)));
  } catch (const ConfigError& e) {
    CheckConfigError(e);
    return;
  }
  const Config& c = *config;
  ASGD_FUZZ_CHECK(c.source() == kSource);
  CheckValues(c);

  // What ResolvedIni writes parses back to the same values (config.h).
  const Config back = Config::FromString(c.ResolvedIni(), {}, schema);
  for (const KeySpec& k : schema.keys()) ASGD_FUZZ_CHECK(back.Raw(k.name) == c.Raw(k.name));

  CheckSetup(c);
}

// ---- Seeds ----------------------------------------------------------------------------

fuzz::Seeds MakeSeeds() {
  using namespace std::string_literals;  // "...\0..."s keeps the NUL separators
  fuzz::Seeds seeds;
  seeds.emplace_back("empty", "");
  seeds.emplace_back("every_section",
                     "[experiment]\nname = every\nseed = 3\nepochs = 2.5\nmax_steps = 100\n"
                     "max_time_s = 30\ntarget_accuracy = 0.9\nstop_at_target = yes\n"
                     "log_level = warning\nprogress = off\n"
                     "[data]\ndataset = synthetic\nverify = off\nnum_features = 0\n"
                     "train_limit = 500\nsynthetic_train = 1000\nsynthetic_features = 16\n"
                     "synthetic_classes = 4\nsynthetic_noise = 0.5\nsynthetic_nonzeros = 3\n"
                     "[model]\nname = cnn\nactivation = tanh\ncnn_channels = 4,8\ncnn_fc =\n"
                     "cnn_kernel = 3\ndevice = cuda:0,cpu\n"
                     "[algorithm]\nname = sync_sgd\noptimizer = adam\nlearning_rate = 1e-3\n"
                     "worker_learning_rates = 0.1, 0.2\nlinear_scaling = true\n"
                     "warmup_epochs = 1\nbatch_size = 32\nworkers = 2\nwindow = 4\n"
                     "replicas_to_aggregate = 2\naggregation = sum\n"
                     "[cluster]\nps = localhost:2222,ipc:///tmp/ps1\nworker = h1:1,h2:2\n"
                     "report_interval_s = 0.5\nbase_port = 30000\nplacement = greedy\n"
                     "shards = 2\nstop_servers = 0\n"
                     "[metrics]\neval_every_epochs = 0.25\nstaleness_rows = 10\n");
  seeds.emplace_back("downpour_with_overrides",
                     "[algorithm]\nname = downpour\nworkers = 4\nwindow = 5\n"
                     "server_optimizer = adagrad\n\0algorithm.workers=8\0model.hidden=64"s);
  seeds.emplace_back("overrides_only", "\0experiment.seed=9\0data.dataset=a9a\0model.name=logreg"s);
  seeds.emplace_back("comments_and_blanks",
                     "# a comment\n\n[model]\n  name = softmax   # trailing comment\n"
                     "[algorithm]\nmomentum=0.5\n");
  // Slightly broken: each fails on one rule.
  seeds.emplace_back("unknown_key", "[algorithm]\nlearning_rat = 0.1\n");
  seeds.emplace_back("wrong_type", "[algorithm]\nbatch_size = many\n");
  seeds.emplace_back("out_of_range", "[algorithm]\nmomentum = 1\n");
  seeds.emplace_back("duplicate_key", "[model]\nname = mlp\nname = cnn\n");
  seeds.emplace_back("no_equals", "[model]\nhidden\n");
  seeds.emplace_back("bad_override", "[model]\nname = mlp\n\0model.hidden"s);
  seeds.emplace_back("replicas_above_workers",
                     "[algorithm]\nname = sync_sgd\nworkers = 2\nreplicas_to_aggregate = 3\n");
  seeds.emplace_back("device_list_length",
                     "[model]\ndevice = cpu,cpu,cpu\n[algorithm]\nworkers = 2\n");
  return seeds;
}

}  // namespace
}  // namespace asgd::experiments

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  asgd::fuzz::HandleWriteSeeds("config_fuzz", *argc, *argv, asgd::experiments::MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  asgd::fuzz::RunOne("config_fuzz", [&] { asgd::experiments::FuzzOne(data, size); });
  return 0;
}
