// Loading a dataset by name.
//
// The names are "mnist", "fashion-mnist", "a9a", "cifar10" (files on disk, found as
// datasets/locate.h describes) and "synthetic" (generated). Known files are checked
// against the digests of their decompressed content (datasets/known_files.h) unless
// verification is switched off.
//
// Errors: ConfigError for bad options (naming the config key, e.g. data.dataset),
// DataError for missing or bad files; both are one line that says what to do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/augment.h"
#include "datasets/dataset.h"
#include "datasets/locate.h"
#include "datasets/normalize.h"
#include "datasets/synthetic.h"

namespace asgd::datasets {

struct DataOptions {
  // "mnist", "fashion-mnist", "a9a", "cifar10" or "synthetic". Default: "mnist".
  std::string name = "mnist";
  // Directories searched in order for NAME/ (see FindDatasetDir in datasets/locate.h);
  // empty entries are skipped. Unused for "synthetic". Default: none.
  std::vector<std::string> search_dirs;
  // Check the SHA-256 of each known file's decompressed content. Switch off for a
  // modified copy of a known dataset. Default: true.
  bool verify = true;
  // Feature dimension of a LIBSVM dataset; 0 means the dataset's own (a9a: 123). Larger
  // values pad with features that are always zero. Unused by the IDX datasets and by
  // "synthetic" (see synthetic.num_features). Default: 0.
  int64_t num_features = 0;
  // Keep only the first max_train training / max_test test examples; -1 keeps all.
  // Handy for fast tests. The files are still read and checked in full. Default: -1.
  int64_t max_train = -1;
  int64_t max_test = -1;
  // Records each CIFAR-10 file must hold (datasets/cifar.h); 0 accepts any number.
  // Default: 10,000, as published. Tests use smaller files.
  int64_t cifar_records_per_file = 10000;
  // Per-channel normalisation of both splits (datasets/normalize.h). Default: none.
  NormalizeOptions normalize;
  // The augmentation the training batches will get (datasets/augment.h). The loader does
  // not apply it (the BatchSampler does), but checks it against the training split, so
  // that a dataset it does not fit is refused at load time. Default: none.
  AugmentOptions augment;
  // Parameters of "synthetic".
  SyntheticOptions synthetic;
};

enum class Split { kTrain, kTest };

// The dataset names LoadDataset accepts.
const std::vector<std::string>& DatasetNames();

// Loads (or generates) both splits: names "NAME/train" and "NAME/test".
TrainTest LoadDataset(const DataOptions& options);
// Loads one split only (an evaluator needs no training set).
Dataset LoadSplit(const DataOptions& options, Split split);

// Throws ConfigError naming the first invalid field.
void ValidateDataOptions(const DataOptions& options);

}  // namespace asgd::datasets
