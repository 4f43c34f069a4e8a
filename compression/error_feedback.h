// Error feedback (Seide et al. 2014; Stich, Cordonnier & Jaggi 2018; Karimireddy et al.
// 2019): the worker keeps the residual e of what compression left out and adds it to its
// next update:
//
//   p_t = x_t + e_{t-1};   c_t = C(p_t);   e_t = p_t - decode(c_t)      (e_0 = 0)
//
// so that, summed over the pushes in the worker's order, what was sent plus the residual
// is what the worker wanted to push: sum_t decode(c_t) + e_T = sum_t x_t.
//
// That identity holds for any C; the residual stays bounded only when C is a contraction,
// E||C(p) - p||^2 <= (1 - delta)||p||^2 (compressor.h): then E||e_t||^2 <= 4 (1 - delta) /
// delta^2 max_t E||x_t||^2 (Karimireddy et al. 2019, Lemma 3). Encode therefore requires
// compressor.contractive() (checked): NewCompressor with error_feedback = true builds
// those forms (randk unscaled, qsgd and terngrad scaled by 1 / (1 + w)).
//
// Precision: the residual and p_t are kept in double; the compressor sees p_t rounded to
// float (and a topk coordinate sends that float, its rounding error staying in e). Each
// step's two operations are exact, so the identity above holds exactly, whenever the
// values involved span fewer than 29 binary orders of magnitude (double's 53 bits over
// float's 24); otherwise it holds within one double rounding per step.
//
// Thread safety: one worker thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compression/compressor.h"
#include "core/rng.h"

namespace asgd::compression {

class ErrorFeedback {
 public:
  // A residual of `size` zeros, for a vector made of `pieces` (Compressor::Encode: the
  // tensor pieces of the part it stands for; empty for one piece). REQUIRES: pieces empty
  // or each >= 1 and summing to size (checked at each Encode).
  explicit ErrorFeedback(int64_t size, std::vector<int64_t> pieces = {});

  // Encodes update + residual with compressor (and the pieces) into *out and keeps the new
  // residual.
  // If sent is not empty it receives decode(*out) (size() elements), what the store will
  // apply. REQUIRES: update.size() == size() and compressor.contractive() (checked).
  void Encode(const Compressor& compressor, std::span<const float> update, Rng& rng, Encoded* out,
              std::span<float> sent = {});

  int64_t size() const { return static_cast<int64_t>(residual_.size()); }
  std::span<const double> residual() const { return residual_; }
  // ||e||_2 of the current residual.
  double ResidualNorm() const;

 private:
  std::vector<int64_t> pieces_;
  std::vector<double> residual_;
  std::vector<float> corrected_;  // p_t as the compressor sees it
  std::vector<float> decoded_;
};

}  // namespace asgd::compression
