// In-memory datasets and mini-batches.
//
// A Dataset holds every example of one split (train or test) in memory: dense features
// as a row-major float32 matrix (images scaled to [0, 1]) or sparse features in CSR form
// (LIBSVM), plus integer class labels in [0, num_classes).
//
// A BatchView is what a model consumes: `size` examples, either dense (x, row-major
// size × num_features) or sparse (CSR slices), with labels. It does not own memory;
// a BatchSampler (datasets/sampler.h) gathers examples into its own buffers.
//
// Thread safety: a Dataset is immutable after loading and may be read by many threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/aligned.h"

namespace asgd::datasets {

struct Dataset {
  std::string name;                  // "mnist/train", "a9a/test", "synthetic/train"
  int64_t num_examples = 0;
  int64_t num_features = 0;          // dense columns, or the sparse feature dimension
  int num_classes = 0;
  std::vector<int64_t> example_shape;  // e.g. {1, 28, 28} for images; {num_features} else
  bool sparse = false;

  // Dense: num_examples × num_features, row-major. Empty when sparse.
  AlignedVector<float> dense;
  // Sparse (CSR): row r's entries are [indptr[r], indptr[r+1]). Indices are 0-based,
  // strictly increasing within a row, and < num_features. Empty when dense.
  std::vector<int64_t> indptr;
  std::vector<int32_t> indices;
  std::vector<float> values;

  std::vector<int32_t> labels;       // num_examples entries in [0, num_classes)

  // The per-channel normalisation applied when the dataset was loaded
  // (datasets/normalize.h): each value of channel c is (pixel - channel_mean[c]) /
  // channel_std[c], pixel in [0, 1]. Both empty when the values are the pixels as loaded.
  std::vector<double> channel_mean;
  std::vector<double> channel_std;

  const float* Row(int64_t i) const { return dense.data() + i * num_features; }
};

// The two splits of a dataset, as the loaders return them.
struct TrainTest {
  Dataset train;
  Dataset test;
};

struct BatchView {
  int64_t size = 0;
  int64_t num_features = 0;
  // Dense input: size × num_features, row-major. nullptr for sparse batches.
  const float* x = nullptr;
  // Sparse input (CSR): row r's entries are indices[k], values[k] for k in
  // [indptr[r], indptr[r+1]). indptr has size + 1 entries; indptr[0] need not be 0 (a
  // view into a whole dataset keeps the dataset's offsets).
  const int64_t* indptr = nullptr;
  const int32_t* indices = nullptr;
  const float* values = nullptr;
  const int32_t* labels = nullptr;

  bool sparse() const { return x == nullptr; }
};

// A view of examples [begin, begin + count) of a dataset, without copying (dense or
// sparse). REQUIRES: 0 <= begin, 0 <= count, begin + count <= ds.num_examples (checked).
// A sparse view points into the dataset's own arrays: indptr[0] is ds.indptr[begin].
// Valid as long as ds is alive and unchanged.
BatchView ContiguousBatch(const Dataset& ds, int64_t begin, int64_t count);

// The examples at `indices`, in that order, as a dataset of their own (a copy): the same
// features, classes, shape and normalisation, named "<name> (N of M)". REQUIRES: every
// index in [0, ds.num_examples) (checked).
Dataset Subset(const Dataset& ds, std::span<const int64_t> indices);

// Checks every invariant stated above (sizes, CSR structure, index and label ranges);
// throws InvariantError naming the first broken one. O(size of the dataset). The loaders
// in datasets/ produce valid datasets; this is for code that builds or edits one.
void CheckDataset(const Dataset& ds);

}  // namespace asgd::datasets
