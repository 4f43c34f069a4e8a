#include "compression/error_feedback.h"

#include <cmath>
#include <utility>

#include "core/check.h"

namespace asgd::compression {

ErrorFeedback::ErrorFeedback(int64_t size, std::vector<int64_t> pieces)
    : pieces_(std::move(pieces)),
      residual_(static_cast<std::size_t>(size), 0.0),
      corrected_(static_cast<std::size_t>(size)),
      decoded_(static_cast<std::size_t>(size)) {}

void ErrorFeedback::Encode(const Compressor& compressor, std::span<const float> update, Rng& rng,
                           Encoded* out, std::span<float> sent) {
  ASGD_CHECK_EQ(update.size(), residual_.size(), "error feedback update size");
  ASGD_CHECK(compressor.contractive(), compressor.Name(),
             " is not a contraction: error feedback would grow its residual (build it with "
             "CompressionOptions::error_feedback = true)");
  for (std::size_t i = 0; i < update.size(); ++i) {
    residual_[i] += update[i];  // now p_t
    corrected_[i] = static_cast<float>(residual_[i]);
  }
  compressor.Encode(corrected_, rng, out, pieces_);
  // Our own encoding: refusing it would be a bug in the compressor.
  const std::string problem = Decode(*out, decoded_);
  ASGD_CHECK(problem.empty(), compressor.Name(), " refused its own encoding: ", problem);
  for (std::size_t i = 0; i < update.size(); ++i) residual_[i] -= decoded_[i];
  if (!sent.empty()) {
    ASGD_CHECK_EQ(sent.size(), decoded_.size());
    std::copy(decoded_.begin(), decoded_.end(), sent.begin());
  }
}

double ErrorFeedback::ResidualNorm() const {
  double sq = 0;
  for (double e : residual_) sq += e * e;
  return std::sqrt(sq);
}

}  // namespace asgd::compression
