#include "algorithms/compressing_client.h"

#include <cmath>
#include <cstring>

#include "core/check.h"

namespace asgd::algorithms {

CompressingClient::CompressingClient(std::unique_ptr<ParamClient> target,
                                     std::shared_ptr<const compression::Compressor> compressor,
                                     bool error_feedback, uint64_t seed)
    : ParamClientWrapper(std::move(target)), compressor_(std::move(compressor)), rng_(seed) {
  Init(error_feedback);
}

CompressingClient::CompressingClient(ParamClient* target,
                                     std::shared_ptr<const compression::Compressor> compressor,
                                     bool error_feedback, uint64_t seed)
    : ParamClientWrapper(target), compressor_(std::move(compressor)), rng_(seed) {
  Init(error_feedback);
}

void CompressingClient::Init(bool error_feedback) {
  ASGD_CHECK(compressor_ != nullptr, "CompressingClient needs a compressor");
  ASGD_CHECK(this->target()->TakesEncodedPushes(),
             "the client below does not take compressed pushes");
  parts_ = this->target()->PushParts();
  encoded_.resize(parts_.size());
  int64_t largest = 0;
  for (const PushPart& p : parts_) largest = std::max(largest, p.count);
  gathered_.resize(static_cast<std::size_t>(largest));
  if (error_feedback) {
    ASGD_CHECK(compressor_->contractive(), compressor_->Name(),
               " is not a contraction: error feedback needs the form NewCompressor builds with "
               "error_feedback = true");
    feedback_.reserve(parts_.size());
    for (const PushPart& p : parts_) feedback_.emplace_back(p.count);
  }
}

Status CompressingClient::Send(std::span<const float> update, std::span<float> out, int64_t step) {
  ASGD_CHECK_EQ(static_cast<int64_t>(update.size()), size(), "compressed push size");
  // A diverged worker's NaN or Inf goes out dense, before any residual changes: the shard
  // refuses it as kNonFinite, naming the element, as it refuses any dense one (a
  // compressor would turn it into a scale or norm that tells nothing).
  for (float v : update) {
    if (!std::isfinite(v)) {
      return out.empty() ? target()->Push(update, step) : target()->PushPull(update, out, step);
    }
  }
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const PushPart& part = parts_[i];
    compression::Encoded& e = encoded_[i];
    if (part.count == 0) {  // a shard that owns nothing: skipped by the store
      e = compression::Encoded{compressor_->encoding(), 0, {}};
      continue;
    }
    // A part with one range is encoded in place; several are gathered first.
    std::span<const float> x;
    if (part.ranges.size() == 1) {
      x = update.subspan(static_cast<std::size_t>(part.ranges[0].begin),
                         static_cast<std::size_t>(part.ranges[0].count));
    } else {
      std::size_t at = 0;
      for (const Range& r : part.ranges) {
        std::memcpy(gathered_.data() + at, update.data() + r.begin,
                    static_cast<std::size_t>(r.count) * sizeof(float));
        at += static_cast<std::size_t>(r.count);
      }
      x = std::span<const float>(gathered_.data(), at);
    }
    if (feedback_.empty()) {
      compressor_->Encode(x, rng_, &e);
    } else {
      feedback_[i].Encode(*compressor_, x, rng_, &e);
    }
  }
  if (!feedback_.empty()) {
    double sq = 0;
    for (const compression::ErrorFeedback& f : feedback_) {
      const double n = f.ResidualNorm();
      sq += n * n;
    }
    residual_norm_.store(std::sqrt(sq), std::memory_order_relaxed);
  }
  return target()->PushEncoded(encoded_, out, step);
}

}  // namespace asgd::algorithms
