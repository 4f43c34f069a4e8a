#include "datasets/loader.h"

#include <chrono>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "datasets/cifar.h"
#include "datasets/idx.h"
#include "datasets/known_files.h"
#include "datasets/libsvm.h"

namespace asgd::datasets {
namespace {

constexpr int64_t kA9aFeatures = 123;

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

ContentCheck CheckFor(const DataOptions& options, const KnownFile& file) {
  if (!options.verify) return {};
  return {file.content_sha256,
          "re-fetch with `asgd data fetch " + options.name + "`, or set [data] verify = false"};
}

// Path of a file FindDatasetDir has already seen.
std::string RequireFile(const std::string& dataset_dir, const std::string& name) {
  std::string path = FindDataFile(dataset_dir, name);
  if (path.empty()) throw DataError(JoinPath(dataset_dir, name), "no such file (or .gz)");
  return path;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void KeepFirst(Dataset* ds, int64_t max_examples) {
  if (max_examples < 0 || max_examples >= ds->num_examples) return;
  const auto n = static_cast<std::size_t>(max_examples);
  ds->num_examples = max_examples;
  ds->labels.resize(n);
  if (ds->sparse) {
    ds->indptr.resize(n + 1);
    ds->indices.resize(static_cast<std::size_t>(ds->indptr[n]));
    ds->values.resize(static_cast<std::size_t>(ds->indptr[n]));
  } else {
    ds->dense.resize(n * static_cast<std::size_t>(ds->num_features));
  }
}

Dataset LoadFileSplit(const DataOptions& options, Split split) {
  const std::string dir = JoinPath(FindDatasetDir(options.name, options.search_dirs), options.name);
  const bool train = split == Split::kTrain;
  const std::string split_name = options.name + (train ? "/train" : "/test");
  const int64_t max_examples = train ? options.max_train : options.max_test;
  const auto start = std::chrono::steady_clock::now();
  Dataset ds;
  std::string source;
  if (options.name == "a9a") {
    const KnownFile* file = FindKnownFile("a9a", train ? "a9a" : "a9a.t");
    ASGD_CHECK(file != nullptr, "known-file table lacks a9a");
    LibsvmOptions lo;
    lo.num_features = options.num_features > 0 ? options.num_features : kA9aFeatures;
    lo.num_classes = 2;
    lo.max_examples = max_examples;
    lo.check = CheckFor(options, *file);
    source = RequireFile(dir, file->name);
    ds = ReadLibsvm(split_name, source, lo);
  } else if (options.name == "cifar10") {
    std::vector<std::string> names;
    if (train) {
      for (int b = 1; b <= 5; ++b) names.push_back("data_batch_" + std::to_string(b) + ".bin");
    } else {
      names.push_back("test_batch.bin");
    }
    CifarLoadOptions co;
    co.read.records_per_file = options.cifar_records_per_file;
    co.max_examples = max_examples;
    std::vector<std::string> paths;
    for (const std::string& name : names) {
      const KnownFile* file = FindKnownFile("cifar10", name);
      ASGD_CHECK(file != nullptr, "known-file table lacks cifar10 ", name);
      co.checks.push_back(CheckFor(options, *file));
      paths.push_back(RequireFile(dir, name));
    }
    source = paths.front() + (paths.size() > 1 ? " ..." : "");
    ds = LoadCifarDataset(split_name, paths, co);
  } else {
    const std::string prefix = train ? "train" : "t10k";
    const KnownFile* images = FindKnownFile(options.name, prefix + "-images-idx3-ubyte");
    const KnownFile* labels = FindKnownFile(options.name, prefix + "-labels-idx1-ubyte");
    ASGD_CHECK(images != nullptr && labels != nullptr, "known-file table lacks ", options.name);
    IdxLoadOptions io;
    io.num_classes = 10;
    io.max_examples = max_examples;
    io.images_check = CheckFor(options, *images);
    io.labels_check = CheckFor(options, *labels);
    source = RequireFile(dir, images->name);
    ds = LoadIdxDataset(split_name, source, RequireFile(dir, labels->name), io);
  }
  ASGD_LOG(kInfo, "loaded ", ds.name, ": ", ds.num_examples, " examples, ", ds.num_features,
           " features", ds.sparse ? " (sparse)" : "", " from ", source, " in ", SecondsSince(start),
           " s");
  return ds;
}

}  // namespace

const std::vector<std::string>& DatasetNames() {
  static const std::vector<std::string> kNames = {"mnist", "fashion-mnist", "a9a", "cifar10",
                                                  "synthetic"};
  return kNames;
}

void ValidateDataOptions(const DataOptions& options) {
  bool known = false;
  for (const std::string& n : DatasetNames()) known = known || n == options.name;
  if (!known) {
    std::string expected = "one of " + Join(DatasetNames(), ", ");
    std::string guess = ClosestMatch(options.name, DatasetNames());
    if (!guess.empty()) expected += " (did you mean '" + guess + "'?)";
    throw ConfigError("data.dataset", options.name, expected);
  }
  if (options.num_features < 0) {
    throw ConfigError("data.num_features", std::to_string(options.num_features),
                      "0 (the dataset's own) or a positive feature count");
  }
  if (options.max_train < -1) {
    throw ConfigError("data.train_limit", std::to_string(options.max_train),
                      "-1 (all) or a number of examples >= 0");
  }
  if (options.max_test < -1) {
    throw ConfigError("data.test_limit", std::to_string(options.max_test),
                      "-1 (all) or a number of examples >= 0");
  }
  if (options.name == "synthetic") ValidateSyntheticOptions(options.synthetic);
}

namespace {

TrainTest LoadBoth(const DataOptions& options) {
  TrainTest out;
  if (options.name == "synthetic") {
    out = MakeSynthetic(options.synthetic);
    KeepFirst(&out.train, options.max_train);
    KeepFirst(&out.test, options.max_test);
    return out;
  }
  out.train = LoadFileSplit(options, Split::kTrain);
  out.test = LoadFileSplit(options, Split::kTest);
  return out;
}

}  // namespace

Dataset LoadSplit(const DataOptions& options, Split split) {
  ValidateDataOptions(options);
  // Normalisation computed from the training split needs that split, whichever is asked
  // for.
  const bool needs_train = options.normalize.per_channel && options.normalize.mean.empty() &&
                           options.normalize.std.empty();
  if (options.name == "synthetic" || needs_train) {
    TrainTest both = LoadDataset(options);
    return split == Split::kTrain ? std::move(both.train) : std::move(both.test);
  }
  TrainTest one;
  Dataset& ds = split == Split::kTrain ? one.train : one.test;
  ds = LoadFileSplit(options, split);
  // The other split stays empty, with the same shape so that the checks see an image.
  Dataset& other = split == Split::kTrain ? one.test : one.train;
  other.name = ds.name;
  other.num_features = ds.num_features;
  other.example_shape = ds.example_shape;
  other.sparse = ds.sparse;
  ApplyNormalization(options.normalize, &one);
  CheckAugmentOptions(options.augment, one.train);
  return std::move(ds);
}

TrainTest LoadDataset(const DataOptions& options) {
  ValidateDataOptions(options);
  TrainTest out = LoadBoth(options);
  ApplyNormalization(options.normalize, &out);
  CheckAugmentOptions(options.augment, out.train);
  if (!out.train.channel_mean.empty()) {
    std::vector<std::string> parts;
    for (std::size_t c = 0; c < out.train.channel_mean.size(); ++c) {
      parts.push_back(std::to_string(out.train.channel_mean[c]) + "/" +
                      std::to_string(out.train.channel_std[c]));
    }
    ASGD_LOG(kInfo, "normalised ", options.name, " per channel (mean/std): ", Join(parts, ", "));
  }
  return out;
}

}  // namespace asgd::datasets
