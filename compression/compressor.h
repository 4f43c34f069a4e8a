// Gradient compression (issue 17): what a worker pushes can travel sparsified or
// quantized, and the shard decodes it before its rule applies it.
//
// A Compressor turns a float32 vector into an Encoded form: an Encoding id, the dense
// element count and a few byte frames whose layout the encoding defines (below). The
// decoder needs nothing but the encoding, the count and the frames -- every parameter
// (k's indices, qsgd's levels, bucket and norms, the scales) travels in the frames -- so a
// server decodes any push without knowing the worker's configuration.
//
//   encoding  frames (little-endian)                          value of element i
//   topk      0: uint32 indices, k >= 1, strictly increasing   values[j] at indices[j],
//             1: float32 values, k of them                     0 elsewhere
//   randk     same as topk (values as sent: scaled by n / k   same
//             without error feedback, unscaled with it)
//   qsgd      0: uint32 s in [1, 2^15], uint32 d >= 1 (the      (-1)^sign * norm_b * level / s,
//                bucket), then B = ceil(n / d) float32 norms     b = i / d (element i's bucket)
//                norm_b >= 0, norm_b = ||x_b|| of bucket b's
//                elements [b d, min((b + 1) d, n)) (with error
//                feedback ||x_b|| / (1 + w_b), below)
//             1: codes of 1 + bit_width(s) bits (bit_pack.h):
//                bit 0 = sign, bits 1.. = level in [0, s];
//                a zero level has sign 0
//   sign      0: float32 scale >= 0                            bit ? -scale : +scale
//             1: codes of 1 bit (1 = negative)
//   terngrad  0: uint32 m >= 1 (the pieces), then m uint32       {0, +scale_j, -scale_j}[code],
//                counts c_j >= 1 summing to n, then m float32    j the piece holding element i
//                scales scale_j >= 0 (pieces are consecutive:    (pieces: the first c_0
//                the tensors of the model's layout, or their     elements, the next c_1, ...)
//                pieces, in the part; terngrad.cc)
//             1: codes of 2 bits (0, 1 = +1, 2 = -1; 3 is refused)
//
// Decode validates every field before it writes: frame count and sizes, index order and
// range, levels, padding bits, finite non-negative scales. A refused encoding is a
// one-line reason, never an exception or a read past a frame.
//
// Error feedback (error_feedback.h) needs a contraction, E||C(x) - x||^2 <= (1 - delta)
// ||x||^2 with delta > 0 (Stich, Cordonnier & Jaggi 2018; Karimireddy, Rebjock, Stich &
// Jaggi 2019): otherwise the residual grows with every push. topk (delta = k / n) and sign
// (delta = ||x||_1^2 / (n ||x||^2) >= 1 / n) are contractions as they are. The others are
// not: randk scaled by n / k leaves E||C(x) - x||^2 = (n / k - 1)||x||^2, qsgd leaves its
// variance w(x)||x||^2, above ||x||^2 whenever w(x) > 1, and terngrad its variance (and its
// clipping's bias). So NewCompressor builds, for error_feedback = true:
//   randk     unscaled: the k coordinates as they are (Stich et al.'s rand-k with
//             memory), delta = k / n;
//   qsgd      each bucket's U(x_b) / (1 + w_b) (Karimireddy et al. 2019's construction for
//             an unbiased U of variance w), with w_b = E||U(x_b) - x_b||^2 / ||x_b||^2 =
//             (||x_b|| / s)^2 sum_i f_i (1 - f_i) / ||x_b||^2 the variance of this bucket's
//             own draw, computed exactly before drawing (f_i the fractional part of |x_i| s /
//             ||x_b||): E||C(x_b) - x_b||^2 = w_b / (1 + w_b) ||x_b||^2, the scale that
//             minimises it, so delta >= min_b 1 / (1 + w_b) >= 1 / (1 + min(d / s^2,
//             sqrt(d) / s)) (Alistarh et al. 2017, Lemma 3.1, for a bucket of d elements);
//   terngrad  each piece's alpha_j U(y_j), y_j the clipped piece and U its ternarization,
//             with alpha_j = <y_j, x_j> / (scale_j ||y_j||_1), the factor that minimises
//             E||alpha U(y_j) - x_j||^2, leaving ||x_j||^2 - <y_j, x_j>^2 / (scale_j
//             ||y_j||_1): the scale sent is <y_j, x_j> / ||y_j||_1 (without clipping
//             ||x_j||^2 / ||x_j||_1 = scale_j / (1 + w_j), Karimireddy et al.'s form again),
//             and delta >= min(1, c^2 / m) * 2 / (1 + sqrt(m)) for a piece of m elements
//             (without clipping the first factor is 1; terngrad.cc).
// These forms are biased (unbiased() false, contractive() true); the wire form is the same,
// only the scales or values differ. Without error feedback every compressor is the plain
// form: unbiased for randk, qsgd, and terngrad without clipping (clip = 0); terngrad's
// clipping (the default, as Wen et al. run it) makes it biased.
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
// qsgd's largest bucket: any bucket at least a part's size is one norm for the whole part.
inline constexpr int64_t kMaxQsgdBucket = int64_t{1} << 30;

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
  // qsgd: d, the elements per bucket, each bucket quantized with its own 2-norm, in [1,
  // kMaxQsgdBucket]. Default 512, the bucket size of Alistarh et al. 2017's experiments
  // (section 5). A bucket at least a part's size gives one norm per part (kMaxQsgdBucket
  // does for any part).
  int64_t bucket = 512;
  // terngrad: c, each element is clipped to [-c sigma, c sigma] before ternarizing, sigma
  // the root mean square of its tensor piece (terngrad.cc); >= 0, 0 = no clipping. Default
  // 2.5 (Wen et al. 2017, section 3.3).
  double clip = 2.5;
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
  // E[Decode(Encode(x))] = x over the Rng's draws (randk, qsgd without error feedback,
  // terngrad without error feedback and clipping).
  virtual bool unbiased() const = 0;
  // A contraction, E||C(x) - x||^2 <= (1 - delta)||x||^2 with delta > 0 for every x (see
  // above): what ErrorFeedback requires of its compressor.
  virtual bool contractive() const = 0;
  // Encodes x into *out, reusing its buffers. Draws from rng if stochastic. pieces: the
  // lengths of the consecutive tensor pieces x is made of, in order (the model's tensors
  // as they fall in the pushed part: ps/compressing_client.h), or empty for one
  // piece; terngrad takes a scale and a clipping bound per piece, the others ignore them.
  // REQUIRES: x.size() >= 1 and, for the sparse forms, < 2^32; pieces empty or each >= 1,
  // summing to x.size() (checked).
  void Encode(std::span<const float> x, Rng& rng, Encoded* out,
              std::span<const int64_t> pieces = {}) const;

 protected:
  // Encode after its checks.
  virtual void DoEncode(std::span<const float> x, std::span<const int64_t> pieces, Rng& rng,
                        Encoded* out) const = 0;
};

// Throws ConfigError naming the key ("compression.name", "compression.ratio",
// "compression.levels", "compression.bucket", "compression.clip") for a bad option.
// Returns nullptr for name = none.
std::unique_ptr<Compressor> NewCompressor(const CompressionOptions& options);
// Registered names, none included, sorted.
std::vector<std::string> CompressorNames();
// One line per compressor with its source, for --help-config.
std::string CompressorDescription(const std::string& name);

}  // namespace asgd::compression
