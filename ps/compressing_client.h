// CompressingClient: the ParamClientWrapper that compresses every push (issue 17).
//
// Push and PushPull of a dense update become a compressed push (ParamClient::PushEncoded)
// of the client below: the update is split into the store's PushParts() (one per shard),
// each part gathered from its ranges and encoded on its own (so topk keeps the k largest
// of each shard's elements, and each shard decodes exactly its part), with error feedback
// per part when on. Pulls, clocks and sparse pushes pass through unchanged.
//
// Tensor pieces: given the model's tensors (ParamLayout::tensors()), each part is encoded
// with its tensor pieces (Compressor::Encode), the pieces of each tensor that fall in the
// part, in the part's order (TensorPieces): terngrad takes a scale per piece, as Wen et
// al. take one per layer. Without them each part is one piece.
//
// Accounting: this layer's traffic() counts the dense updates it was given; the client
// below counts the encoded bytes (bytes_pushed) and their dense equivalent
// (dense_bytes_pushed). wire_traffic() is the latter.
//
// Error feedback: what compression left out of a push stays in the residual and is added
// to the next update (compression/error_feedback.h); the compressor must then be a
// contraction (contractive(), checked: NewCompressor's form for error_feedback = true);
// a push that failed (timeout, error
// reply) is lost as a dense one would be: its residual is not restored.
//
// Non-finite updates: an update holding NaN or Inf is pushed dense (the shard refuses it
// as kNonFinite, naming the element, as it does any dense one) and changes no residual.
//
// Randomness: the stochastic compressors draw from an Rng seeded with `seed` (a worker's
// chain derives it from the run's seed and the worker id: client_chain.h).
//
// Thread safety: one worker thread, as every ParamClient.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "compression/compressor.h"
#include "compression/error_feedback.h"
#include "core/param_layout.h"
#include "core/rng.h"
#include "ps/param_client_wrapper.h"

namespace asgd::ps {

// The lengths of the tensor pieces of the elements of `ranges` taken in order (a push
// part): each range split where a tensor ends, and consecutive pieces of one tensor (two
// ranges meeting inside it) joined. Empty when tensors is. REQUIRES: tensors empty or
// packed from 0 without gaps (ParamLayout), covering every range (checked).
std::vector<int64_t> TensorPieces(std::span<const Range> ranges,
                                  std::span<const TensorSpec> tensors);

class CompressingClient final : public ParamClientWrapper {
 public:
  // REQUIRES: target->TakesEncodedPushes() and compressor not null; tensors empty or the
  // tensors of a layout of size() elements (checked).
  CompressingClient(std::unique_ptr<ParamClient> target,
                    std::shared_ptr<const compression::Compressor> compressor, bool error_feedback,
                    uint64_t seed, std::span<const TensorSpec> tensors = {});
  // Borrows target, which must outlive the wrapper.
  CompressingClient(ParamClient* target, std::shared_ptr<const compression::Compressor> compressor,
                    bool error_feedback, uint64_t seed, std::span<const TensorSpec> tensors = {});

  const compression::Compressor& compressor() const { return *compressor_; }
  bool error_feedback() const { return !feedback_.empty(); }
  // ||e||_2 of the residual over all parts as of the last push (0 without error feedback
  // or before the first). The one call any thread may make (the runner's evaluator).
  double ResidualNorm() const { return residual_norm_.load(std::memory_order_relaxed); }
  // The residual of PushParts()[part]. REQUIRES: error_feedback().
  std::span<const double> residual(std::size_t part) const { return feedback_.at(part).residual(); }
  // The tensor pieces PushParts()[part] is encoded with (empty: one piece).
  std::span<const int64_t> pieces(std::size_t part) const { return pieces_.at(part); }

 protected:
  Status DoPush(std::span<const float> update, int64_t step) override {
    return Send(update, {}, step);
  }
  Status DoPushPull(std::span<const float> update, std::span<float> out, int64_t step) override {
    return Send(update, out, step);
  }

 private:
  void Init(bool error_feedback, std::span<const TensorSpec> tensors);
  Status Send(std::span<const float> update, std::span<float> out, int64_t step);

  std::shared_ptr<const compression::Compressor> compressor_;
  std::vector<PushPart> parts_;
  std::vector<std::vector<int64_t>> pieces_;          // one per part
  std::vector<compression::ErrorFeedback> feedback_;  // one per part, or none
  std::vector<compression::Encoded> encoded_;         // one per part, reused
  std::vector<float> gathered_;
  Rng rng_;
  std::atomic<double> residual_norm_{0.0};
};

}  // namespace asgd::ps
