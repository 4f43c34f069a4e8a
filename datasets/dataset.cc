#include "datasets/dataset.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace asgd::datasets {

BatchView ContiguousBatch(const Dataset& ds, int64_t begin, int64_t count) {
  ASGD_CHECK(begin >= 0 && count >= 0 && begin + count <= ds.num_examples, "examples [", begin,
             ", ", begin + count, ") of ", ds.name, " with ", ds.num_examples, " examples");
  BatchView b;
  b.size = count;
  b.num_features = ds.num_features;
  b.labels = ds.labels.data() + begin;
  if (ds.sparse) {
    b.indptr = ds.indptr.data() + begin;
    b.indices = ds.indices.data();
    b.values = ds.values.data();
  } else {
    // An empty dataset has no storage, but a dense view must keep a non-null x so that
    // sparse() stays false.
    static const float kNoRows = 0.0f;
    b.x = ds.dense.empty() ? &kNoRows : ds.Row(begin);
  }
  return b;
}

Dataset Subset(const Dataset& ds, std::span<const int64_t> indices) {
  Dataset out;
  out.name = ds.name + " (" + std::to_string(indices.size()) + " of " +
             std::to_string(ds.num_examples) + ")";
  out.num_examples = static_cast<int64_t>(indices.size());
  out.num_features = ds.num_features;
  out.num_classes = ds.num_classes;
  out.example_shape = ds.example_shape;
  out.sparse = ds.sparse;
  out.channel_mean = ds.channel_mean;
  out.channel_std = ds.channel_std;
  out.labels.reserve(indices.size());
  if (ds.sparse) out.indptr.push_back(0);
  const auto row = static_cast<std::size_t>(ds.num_features);
  if (!ds.sparse) out.dense.resize(indices.size() * row);
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    ASGD_CHECK(i >= 0 && i < ds.num_examples, "example ", i, " of ", ds.name, " with ",
               ds.num_examples, " examples");
    const auto at = static_cast<std::size_t>(i);
    out.labels.push_back(ds.labels[at]);
    if (ds.sparse) {
      const auto begin = static_cast<std::size_t>(ds.indptr[at]);
      const auto end = static_cast<std::size_t>(ds.indptr[at + 1]);
      out.indices.insert(out.indices.end(), ds.indices.begin() + begin, ds.indices.begin() + end);
      out.values.insert(out.values.end(), ds.values.begin() + begin, ds.values.begin() + end);
      out.indptr.push_back(static_cast<int64_t>(out.indices.size()));
    } else {
      std::copy_n(ds.Row(i), row, out.dense.data() + k * row);
    }
  }
  return out;
}

void CheckDataset(const Dataset& ds) {
  const auto n = static_cast<std::size_t>(ds.num_examples);
  ASGD_CHECK_GE(ds.num_examples, 0, ds.name);
  ASGD_CHECK_GE(ds.num_features, 0, ds.name);
  ASGD_CHECK_GE(ds.num_classes, 1, ds.name);
  ASGD_CHECK_EQ(ds.labels.size(), n, ds.name, ": one label per example");
  for (std::size_t i = 0; i < n; ++i) {
    ASGD_CHECK(ds.labels[i] >= 0 && ds.labels[i] < ds.num_classes, ds.name, ": label ",
               ds.labels[i], " of example ", i, " outside [0, ", ds.num_classes, ")");
  }
  int64_t shape_size = 1;
  for (int64_t d : ds.example_shape) shape_size *= d;
  ASGD_CHECK(!ds.example_shape.empty() && shape_size == ds.num_features, ds.name,
             ": example_shape does not multiply to num_features ", ds.num_features);
  if (!ds.sparse) {
    ASGD_CHECK_EQ(ds.dense.size(), n * static_cast<std::size_t>(ds.num_features), ds.name);
    ASGD_CHECK(ds.indptr.empty() && ds.indices.empty() && ds.values.empty(), ds.name,
               ": a dense dataset with sparse arrays");
    return;
  }
  ASGD_CHECK(ds.dense.empty(), ds.name, ": a sparse dataset with dense values");
  ASGD_CHECK_EQ(ds.indptr.size(), n + 1, ds.name);
  ASGD_CHECK_EQ(ds.indptr[0], 0, ds.name);
  ASGD_CHECK_EQ(ds.indices.size(), ds.values.size(), ds.name);
  ASGD_CHECK_EQ(static_cast<std::size_t>(ds.indptr[n]), ds.indices.size(), ds.name);
  for (std::size_t r = 0; r < n; ++r) {
    ASGD_CHECK_LE(ds.indptr[r], ds.indptr[r + 1], ds.name, ": indptr of row ", r);
    for (int64_t k = ds.indptr[r]; k < ds.indptr[r + 1]; ++k) {
      const int32_t j = ds.indices[static_cast<std::size_t>(k)];
      ASGD_CHECK(j >= 0 && j < ds.num_features, ds.name, ": index ", j, " in row ", r);
      if (k > ds.indptr[r]) {
        ASGD_CHECK_LT(ds.indices[static_cast<std::size_t>(k - 1)], j, ds.name, ": indices of row ",
                      r, " not strictly increasing");
      }
    }
  }
}

}  // namespace asgd::datasets
