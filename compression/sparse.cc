// The index/value form shared by topk and randk.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "compression/builtin_compressors.h"
#include "core/check.h"

namespace asgd::compression::internal {

int64_t SparseK(double ratio, int64_t n) {
  const auto k = static_cast<int64_t>(std::llround(ratio * static_cast<double>(n)));
  return std::clamp<int64_t>(k, 1, n);
}

void ShapeFrames(Encoded* out, Encoding encoding, int64_t count,
                 std::initializer_list<std::size_t> sizes) {
  out->encoding = encoding;
  out->count = count;
  out->frames.resize(sizes.size());
  std::size_t i = 0;
  for (std::size_t n : sizes) out->frames[i++].resize(n);
}

std::string CheckShape(const char* name, Frames frames, std::size_t scalar_bytes) {
  if (frames.size() != kEncodedFrames) {
    return ::asgd::internal::StrCat(name, " encoding has ", frames.size(), " frames, expected ",
                                    kEncodedFrames);
  }
  if (scalar_bytes > 0 && frames[0].size() != scalar_bytes) {
    return ::asgd::internal::StrCat(name, " scale frame has ", frames[0].size(),
                                    " bytes, expected ", scalar_bytes);
  }
  return {};
}

std::string CheckScale(const char* name, const char* what, float scale) {
  if (std::isfinite(scale) && scale >= 0) return {};
  return ::asgd::internal::StrCat(name, " ", what, " = ", scale, ", expected a finite value >= 0");
}

std::string DecodeSparse(Frames frames, std::span<float> out) {
  using ::asgd::internal::StrCat;
  if (std::string e = CheckShape("sparse", frames, 0); !e.empty()) return e;
  const std::size_t index_bytes = frames[0].size(), value_bytes = frames[1].size();
  if (index_bytes % 4 != 0 || value_bytes % 4 != 0 || index_bytes != value_bytes) {
    return StrCat("sparse encoding has ", index_bytes, " index bytes and ", value_bytes,
                  " value bytes, expected equal multiples of 4");
  }
  const std::size_t k = index_bytes / 4;
  if (k == 0 || k > out.size()) {
    return StrCat("sparse encoding holds ", k, " pairs for ", out.size(),
                  " elements, expected 1 to ", out.size());
  }
  // Every index is checked before the first write, so a refused push leaves out as it was.
  int64_t last = -1;
  for (std::size_t j = 0; j < k; ++j) {
    const auto i = Load<uint32_t>(frames[0], 4 * j);
    if (static_cast<int64_t>(i) <= last || i >= out.size()) {
      return StrCat("sparse index ", j, " = ", i, " after ", last, ", expected increasing and < ",
                    out.size());
    }
    last = i;
  }
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t j = 0; j < k; ++j) {
    out[Load<uint32_t>(frames[0], 4 * j)] = Load<float>(frames[1], 4 * j);
  }
  return {};
}

}  // namespace asgd::compression::internal
