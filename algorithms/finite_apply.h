// All-or-nothing element-wise server updates for rules that compute their own results
// (dc_asgd, downpour's server Adagrad, the elastic centre, adag_distance) rather than
// adding through transport's AddTo helpers.
//
// Contract (issue 22 item 4, the same as AddTo's): a push whose result would be NaN or Inf
// anywhere is refused with ps::NonFiniteResultError (which the shard core answers
// as `non_finite`, counted in its stats), and then neither the shard's values nor the
// rule's state have changed. The check is made inside the apply loop: the results are
// computed once into the caller's scratch buffer while their largest magnitude is kept
// (a vectorisable max over the float bits), and copied into the shard only when every
// one is finite.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "ps/server_rule.h"

namespace asgd::algorithms {

// Throws NonFiniteResultError naming `rule` and the first NaN or Inf in results (whose
// element i is shard-local element pieces' i-th, in piece order), if there is one.
// `max_bits` is the largest magnitude of results as float bits, sign cleared.
inline void RequireFiniteResults(std::string_view rule, std::span<const ps::Payload::Piece> pieces,
                                 std::span<const float> results, uint32_t max_bits) {
  constexpr uint32_t kInfBits = 0x7f800000u;
  if (max_bits < kInfBits) return;
  std::size_t k = 0;
  for (const ps::Payload::Piece& piece : pieces) {
    for (std::size_t i = 0; i < piece.values.size(); ++i, ++k) {
      if ((std::bit_cast<uint32_t>(results[k]) & kInfBits) == kInfBits) {
        throw ps::NonFiniteResultError(::asgd::internal::StrCat(
            rule, ": the result at shard-local element ", piece.offset + static_cast<int64_t>(i),
            " would be ", results[k] != results[k] ? "NaN" : "Inf", "; the shard is unchanged"));
      }
    }
  }
}

// The largest magnitude of out[0, n) as float bits (NaN above Inf). No early exit.
inline uint32_t MaxMagnitudeBits(const float* out, std::size_t n) {
  uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i)
    m = std::max(m, std::bit_cast<uint32_t>(out[i]) & 0x7fffffffu);
  return m;
}

// values[at] = result(at, g) for every element g of every piece (at its shard-local index
// at), all or nothing (see above). `result` must not write the shard; it may write
// elsewhere (a reply). `scratch` is reused across calls.
template <typename Result>
void ApplyFiniteOrRefuse(std::string_view rule, std::span<float> values,
                         std::span<const ps::Payload::Piece> pieces, std::vector<float>& scratch,
                         Result&& result) {
  std::size_t total = 0;
  for (const ps::Payload::Piece& piece : pieces) total += piece.values.size();
  scratch.resize(total);
  uint32_t max_bits = 0;
  std::size_t k = 0;
  for (const ps::Payload::Piece& piece : pieces) {
    const auto base = static_cast<std::size_t>(piece.offset);
    float* out = scratch.data() + k;
    for (std::size_t i = 0; i < piece.values.size(); ++i)
      out[i] = result(base + i, piece.values[i]);
    max_bits = std::max(max_bits, MaxMagnitudeBits(out, piece.values.size()));
    k += piece.values.size();
  }
  RequireFiniteResults(rule, pieces, scratch, max_bits);
  k = 0;
  for (const ps::Payload::Piece& piece : pieces) {
    if (!piece.values.empty()) {
      std::memcpy(values.data() + piece.offset, scratch.data() + k,
                  piece.values.size() * sizeof(float));
    }
    k += piece.values.size();
  }
}

}  // namespace asgd::algorithms
