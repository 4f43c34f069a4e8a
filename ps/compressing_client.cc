#include "ps/compressing_client.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"

namespace asgd::ps {

CompressingClient::CompressingClient(std::unique_ptr<ParamClient> target,
                                     std::shared_ptr<const compression::Compressor> compressor,
                                     bool error_feedback, uint64_t seed,
                                     std::span<const TensorSpec> tensors)
    : ParamClientWrapper(std::move(target)), compressor_(std::move(compressor)), rng_(seed) {
  Init(error_feedback, tensors);
}

CompressingClient::CompressingClient(ParamClient* target,
                                     std::shared_ptr<const compression::Compressor> compressor,
                                     bool error_feedback, uint64_t seed,
                                     std::span<const TensorSpec> tensors)
    : ParamClientWrapper(target), compressor_(std::move(compressor)), rng_(seed) {
  Init(error_feedback, tensors);
}

std::vector<int64_t> TensorPieces(std::span<const Range> ranges,
                                  std::span<const TensorSpec> tensors) {
  std::vector<int64_t> pieces;
  if (tensors.empty()) return pieces;
  int last = -1;  // the tensor of pieces.back()
  for (const Range& r : ranges) {
    int64_t at = r.begin;
    while (at < r.end()) {
      // The tensor holding element `at`: the last one starting at or before it.
      const auto it = std::upper_bound(tensors.begin(), tensors.end(), at,
                                       [](int64_t i, const TensorSpec& t) { return i < t.offset; });
      ASGD_CHECK(it != tensors.begin(), "element ", at, " lies before the first tensor");
      const auto t = static_cast<int>(it - tensors.begin()) - 1;
      const TensorSpec& spec = tensors[static_cast<std::size_t>(t)];
      ASGD_CHECK(at < spec.offset + spec.size, "element ", at, " lies in no tensor");
      const int64_t end = std::min(r.end(), spec.offset + spec.size);
      if (t == last) {
        pieces.back() += end - at;
      } else {
        pieces.push_back(end - at);
        last = t;
      }
      at = end;
    }
  }
  return pieces;
}

void CompressingClient::Init(bool error_feedback, std::span<const TensorSpec> tensors) {
  ASGD_CHECK(compressor_ != nullptr, "CompressingClient needs a compressor");
  ASGD_CHECK(this->target()->TakesEncodedPushes(),
             "the client below does not take compressed pushes");
  parts_ = this->target()->PushParts();
  if (!tensors.empty()) {
    const TensorSpec& last = tensors.back();
    ASGD_CHECK_EQ(last.offset + last.size, size(), "the tensors cover the vector");
  }
  for (const PushPart& p : parts_) pieces_.push_back(TensorPieces(p.ranges, tensors));
  encoded_.resize(parts_.size());
  int64_t largest = 0;
  for (const PushPart& p : parts_) largest = std::max(largest, p.count);
  gathered_.resize(static_cast<std::size_t>(largest));
  if (error_feedback) {
    ASGD_CHECK(compressor_->contractive(), compressor_->Name(),
               " is not a contraction: error feedback needs the form NewCompressor builds with "
               "error_feedback = true");
    feedback_.reserve(parts_.size());
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      feedback_.emplace_back(parts_[i].count, pieces_[i]);
    }
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
      compressor_->Encode(x, rng_, &e, pieces_[i]);
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

}  // namespace asgd::ps
