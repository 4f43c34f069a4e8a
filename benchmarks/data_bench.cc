// Loading the reference datasets from $ASGD_DATA_DIR (issue 30: the speed the datasets
// tests no longer assert). BM_LoadA9aTrain reads and checks a9a's training file (32,561
// examples in LIBSVM text, 451,592 non-zeros; its SHA-256 verified as every run does).
// Skipped, saying so, when ASGD_DATA_DIR is unset.
//
//   data_bench --benchmark_min_time=1
#include <cstdlib>
#include <string>

#include <benchmark/benchmark.h>

#include "datasets/known_files.h"
#include "datasets/libsvm.h"

namespace asgd::datasets {
namespace {

void BM_LoadA9aTrain(benchmark::State& state) {
  const char* root = std::getenv("ASGD_DATA_DIR");
  if (root == nullptr || *root == '\0') {
    state.SkipWithError("ASGD_DATA_DIR is not set: no reference data to load");
    return;
  }
  LibsvmOptions o;
  o.num_features = 123;
  o.check.sha256 = FindKnownFile("a9a", "a9a")->content_sha256;
  const std::string path = std::string(root) + "/a9a/a9a";
  int64_t examples = 0;
  for (auto _ : state) {
    const Dataset train = ReadLibsvm("a9a/train", path, o);
    examples += train.num_examples;
    benchmark::DoNotOptimize(train.values.data());
  }
  state.counters["examples_per_s"] =
      benchmark::Counter(static_cast<double>(examples), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LoadA9aTrain)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace asgd::datasets

BENCHMARK_MAIN();
