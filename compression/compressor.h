// Gradient compression (issue 17): what a worker pushes can travel sparsified or
// quantized, and the shard decodes it before its rule applies it.
//
// A Compressor turns a float32 vector into an Encoded form: an Encoding id, the dense
// element count and a few byte frames whose layout the encoding defines (below). The
// decoder needs nothing but the encoding, the count and the frames -- every parameter
// (k's indices, qsgd's levels, a scale) travels in the frames -- so a server decodes any
// push without knowing the worker's configuration.
//
//   encoding  frames (little-endian)                          value of element i
//   topk      0: uint32 indices, k >= 1, strictly increasing   values[j] at indices[j],
//             1: float32 values, k of them                     0 elsewhere
//   randk     same as topk (values as sent: scaled by n / k   same
//             without error feedback, unscaled with it)
//   qsgd      0: float32 norm >= 0, uint32 s in [1, 2^15]      (-1)^sign * norm * level / s
//             (with error feedback the norm field is ||x|| / (1 + w), below)
//             1: codes of 1 + bit_width(s) bits (bit_pack.h):
//                bit 0 = sign, bits 1.. = level in [0, s];
//                a zero level has sign 0
//   sign      0: float32 scale >= 0                            bit ? -scale : +scale
//             1: codes of 1 bit (1 = negative)
//   terngrad  0: float32 scale >= 0                            {0, +scale, -scale}[code]
//             (with error feedback max|x_i| / (1 + w), below)
//             1: codes of 2 bits (0, 1 = +1, 2 = -1; 3 is refused)
//
// Decode validates every field before it writes: frame count and sizes, index order and
// range, levels, padding bits, finite non-negative scales. A refused encoding is a
// one-line reason, never an exception or a read past a frame.
//
// Error feedback (error_feedback.h) needs a contraction, E||C(x) - x||^2 <= (1 - delta)
// ||x||^2 with delta > 0 (Stich, Cordonnier & Jaggi 2018; Karimireddy, Rebjock, Stich &
// Jaggi 2019): otherwise the residual grows with every push. topk (delta = k / n) and sign
// (delta = ||x||_1^2 / (n ||x||^2) >= 1 / n) are contractions as they are. The unbiased
// ones are not: randk scaled by n / k leaves E||C(x) - x||^2 = (n / k - 1)||x||^2, and qsgd
// and terngrad leave their variance w(x)||x||^2, above ||x||^2 whenever w(x) > 1. So
// NewCompressor builds, for error_feedback = true:
//   randk     unscaled: the k coordinates as they are (Stich et al.'s rand-k with
//             memory), delta = k / n;
//   qsgd,     U(x) / (1 + w(x)) (Karimireddy et al. 2019's construction for an unbiased
//   terngrad  U of variance w), with w(x) = E||U(x) - x||^2 / ||x||^2 the variance of this
//             x's own draw, computed exactly from x before drawing (qsgd: (||x|| / s)^2 sum_i
//             f_i (1 - f_i), f_i the fractional part of |x_i| s / ||x||; terngrad: sum_i
//             |x_i| max|x| - x_i^2): E||C(x) - x||^2 = w / (1 + w) ||x||^2, delta(x) =
//             1 / (1 + w(x)), the scale that minimises E||C(x) - x||^2, and at least the
//             worst case's 1 / (1 + w_max) (qsgd: w_max = min(n / s^2, sqrt(n) / s),
//             Alistarh et al. 2017 Lemma 3.1; terngrad: (sqrt(n) - 1) / 2).
// These forms are biased (unbiased() false, contractive() true); the wire form is the same,
// only the scale or values differ. Without error feedback every compressor is the plain
// (unbiased where it says so) form.
//
// Randomness: stochastic compressors draw from the Rng they are given (seeded by the
// caller: the runner derives one per worker from the run's seed), so a run repeats.
//
// Thread safety: a Compressor is immutable after construction and may be shared; Encode
// and Decode may run concurrently on distinct buffers and Rngs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"

namespace asgd::compression {

// On the wire in the header's optional `encoding` field (ps/message.h). kDense is
// never sent: a dense push leaves the field out.
enum class Encoding : uint8_t {
  kDense = 0,
  kTopK = 1,
  kRandK = 2,
  kQsgd = 3,
  kSign = 4,
  kTernGrad = 5
};
// One past the largest Encoding value.
inline constexpr uint32_t kEncodingEnd = 6;
std::string_view EncodingName(Encoding encoding);

// Frames per encoding (every compressed encoding has two).
inline constexpr std::size_t kEncodedFrames = 2;
// qsgd's largest level count s.
inline constexpr uint32_t kMaxQsgdLevels = 1u << 15;

// An encoded vector. frames[i] are the encoding's frames in the order above.
struct Encoded {
  Encoding encoding = Encoding::kDense;
  int64_t count = 0;  // elements of the dense vector
  std::vector<std::vector<std::byte>> frames;
  // Bytes over all frames: what the push moves instead of count * 4.
  int64_t bytes() const;
};

// Decodes frames of `encoding` into out (out.size() elements, the dense count) and
// returns "", or a one-line reason naming what was wrong; every field is checked before
// the first write, so a refused encoding leaves out unchanged. kDense and unknown
// encodings are refused. topk and randk share one form: one decodes the other's frames.
std::string Decode(Encoding encoding, std::span<const std::span<const std::byte>> frames,
                   std::span<float> out);
// Decode of an Encoded (checks out.size() == e.count).
std::string Decode(const Encoded& e, std::span<float> out);

// The `[compression]` options. Validated by NewCompressor, which names the bad key.
struct CompressionOptions {
  // none | topk | randk | qsgd | sign | terngrad. Default none.
  std::string name = "none";
  // topk, randk: k as a fraction of the vector, in (0, 1]; k = max(1, round(ratio * n)).
  // Default 0.01.
  double ratio = 0.01;
  // qsgd: s, the quantization levels, in [1, kMaxQsgdLevels]. Default 15 (4 + 1 bits).
  int levels = 15;
  // The worker keeps what was not sent and adds it to its next update (error_feedback.h);
  // the compressor is then the contraction above (randk unscaled, qsgd and terngrad
  // scaled by 1 / (1 + w)). Default false.
  bool error_feedback = false;
};

class Compressor {
 public:
  virtual ~Compressor() = default;
  // Registry name ("topk"); the `compression` column in CSVs.
  virtual std::string_view Name() const = 0;
  virtual Encoding encoding() const = 0;
  // E[Decode(Encode(x))] = x over the Rng's draws (randk, qsgd, terngrad without error
  // feedback).
  virtual bool unbiased() const = 0;
  // A contraction, E||C(x) - x||^2 <= (1 - delta)||x||^2 with delta > 0 for every x (see
  // above): what ErrorFeedback requires of its compressor.
  virtual bool contractive() const = 0;
  // Encodes x into *out, reusing its buffers. Draws from rng if stochastic.
  // REQUIRES: x.size() >= 1 and, for the sparse forms, < 2^32 (checked).
  virtual void Encode(std::span<const float> x, Rng& rng, Encoded* out) const = 0;
};

// Throws ConfigError naming the key ("compression.name", "compression.ratio",
// "compression.levels") for a bad option. Returns nullptr for name = none.
std::unique_ptr<Compressor> NewCompressor(const CompressionOptions& options);
// Registered names, none included, sorted.
std::vector<std::string> CompressorNames();
// One line per compressor with its source, for --help-config.
std::string CompressorDescription(const std::string& name);

}  // namespace asgd::compression
