#include "models/cpu_model.h"

namespace asgd::models {

void CheckBatch(const datasets::BatchView& batch, const CpuModelInfo& info, bool allow_empty) {
  ASGD_CHECK(allow_empty ? batch.size >= 0 : batch.size > 0, "batch size ", batch.size,
             " for model ", info.name);
  ASGD_CHECK_EQ(batch.num_features, info.features, "batch features vs model ", info.name);
  if (batch.size == 0) return;
  ASGD_CHECK(batch.labels != nullptr, "batch without labels");
  if (info.sparse) {
    ASGD_CHECK(batch.sparse() && batch.indptr != nullptr,
               "model ", info.name, " needs a sparse (CSR) batch");
    ASGD_CHECK(batch.indptr[batch.size] == batch.indptr[0] ||
                   (batch.indices != nullptr && batch.values != nullptr),
               "sparse batch without indices or values");
  } else {
    ASGD_CHECK(!batch.sparse(), "model ", info.name, " needs a dense batch");
  }
}

datasets::BatchView SliceBatch(const datasets::BatchView& batch, int64_t begin, int64_t count) {
  datasets::BatchView v = batch;
  v.size = count;
  v.labels = batch.labels + begin;
  if (batch.sparse()) {
    // indptr holds absolute offsets into indices/values, so those stay as they are.
    v.indptr = batch.indptr + begin;
  } else {
    v.x = batch.x + begin * batch.num_features;
  }
  return v;
}

}  // namespace asgd::models
