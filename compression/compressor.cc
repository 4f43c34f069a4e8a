#include "compression/compressor.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "compression/builtin_compressors.h"
#include "core/check.h"
#include "core/error.h"

namespace asgd::compression {

std::string_view EncodingName(Encoding encoding) {
  switch (encoding) {
    case Encoding::kDense:
      return "dense";
    case Encoding::kTopK:
      return "topk";
    case Encoding::kRandK:
      return "randk";
    case Encoding::kQsgd:
      return "qsgd";
    case Encoding::kSign:
      return "sign";
    case Encoding::kTernGrad:
      return "terngrad";
  }
  return "unknown";
}

int64_t Encoded::bytes() const {
  int64_t n = 0;
  for (const auto& f : frames) n += static_cast<int64_t>(f.size());
  return n;
}

void Compressor::Encode(std::span<const float> x, Rng& rng, Encoded* out,
                        std::span<const int64_t> pieces) const {
  ASGD_CHECK(!x.empty(), Name(), " of an empty vector");
  if (!pieces.empty()) {
    int64_t sum = 0;
    for (int64_t c : pieces) {
      ASGD_CHECK(c >= 1, Name(), " piece of ", c, " elements");
      sum += c;
    }
    ASGD_CHECK_EQ(sum, static_cast<int64_t>(x.size()), Name(), " pieces cover the vector");
  }
  DoEncode(x, pieces, rng, out);
}

std::string Decode(Encoding encoding, std::span<const std::span<const std::byte>> frames,
                   std::span<float> out) {
  switch (encoding) {
    case Encoding::kTopK:
    case Encoding::kRandK:
      return internal::DecodeSparse(frames, out);
    case Encoding::kQsgd:
      return internal::DecodeQsgd(frames, out);
    case Encoding::kSign:
      return internal::DecodeSign(frames, out);
    case Encoding::kTernGrad:
      return internal::DecodeTernGrad(frames, out);
    case Encoding::kDense:
      break;
  }
  return ::asgd::internal::StrCat("encoding ", static_cast<unsigned>(encoding),
                                  " is not a compressed encoding");
}

std::string Decode(const Encoded& e, std::span<float> out) {
  ASGD_CHECK_EQ(static_cast<int64_t>(out.size()), e.count, "decode size");
  std::vector<std::span<const std::byte>> frames(e.frames.begin(), e.frames.end());
  return Decode(e.encoding, frames, out);
}

namespace {

struct Entry {
  const char* name;
  const char* description;
  std::function<std::unique_ptr<Compressor>(const CompressionOptions&)> make;
};

const std::vector<Entry>& Registry() {
  static const std::vector<Entry> kEntries = {
      {"none", "dense float32 pushes (no compression)", nullptr},
      {"qsgd",
       "s-level stochastic quantization with a 2-norm per bucket of elements, 1 + bit_width(s) "
       "bits per element (Alistarh et al. 2017); with error feedback each bucket scaled by "
       "1/(1 + w), w its variance (Karimireddy et al. 2019)",
       [](const CompressionOptions& o) {
         return internal::NewQsgd(o.levels, o.bucket, o.error_feedback);
       }},
      {"randk",
       "k random coordinates, scaled by n/k (unbiased) without error feedback and unscaled "
       "with it (Stich et al. 2018)",
       [](const CompressionOptions& o) {
         return internal::NewRandK(o.ratio, /*scaled=*/!o.error_feedback);
       }},
      {"sign", "1 bit per element times ||x||_1/d (Seide et al. 2014; Karimireddy et al. 2019)",
       [](const CompressionOptions&) { return internal::NewSign(); }},
      {"terngrad",
       "stochastic ternary {-1,0,1} times max|x| per tensor, clipped to c sigma, 2 bits per "
       "element (Wen et al. 2017); with error feedback each tensor's scale chosen to minimise "
       "the error (Karimireddy et al. 2019)",
       [](const CompressionOptions& o) { return internal::NewTernGrad(o.clip, o.error_feedback); }},
      {"topk",
       "the k largest magnitudes as index/value pairs (Aji & Heafield 2017; Lin et al. 2018)",
       [](const CompressionOptions& o) { return internal::NewTopK(o.ratio); }},
  };
  return kEntries;
}

const Entry* Find(const std::string& name) {
  for (const Entry& e : Registry()) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

std::string NamesList() {
  std::string s;
  for (const std::string& n : CompressorNames()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

std::unique_ptr<Compressor> NewCompressor(const CompressionOptions& o) {
  const Entry* e = Find(o.name);
  if (e == nullptr) throw ConfigError("compression.name", o.name, "one of " + NamesList());
  if (!(o.ratio > 0 && o.ratio <= 1)) {
    throw ConfigError("compression.ratio", ::asgd::internal::StrCat(o.ratio),
                      "a fraction of the vector in (0, 1]");
  }
  if (o.levels < 1 || static_cast<uint32_t>(o.levels) > kMaxQsgdLevels) {
    throw ConfigError("compression.levels", ::asgd::internal::StrCat(o.levels),
                      ::asgd::internal::StrCat("an integer from 1 to ", kMaxQsgdLevels));
  }
  if (o.bucket < 1 || o.bucket > kMaxQsgdBucket) {
    throw ConfigError("compression.bucket", ::asgd::internal::StrCat(o.bucket),
                      ::asgd::internal::StrCat("an integer from 1 to ", kMaxQsgdBucket));
  }
  if (!(std::isfinite(o.clip) && o.clip >= 0)) {
    throw ConfigError("compression.clip", ::asgd::internal::StrCat(o.clip),
                      "a finite number >= 0 (0 = no clipping)");
  }
  if (e->make == nullptr) {
    if (o.error_feedback) {
      throw ConfigError("compression.error_feedback", "true",
                        "false with compression.name = none (nothing is left out to feed back)");
    }
    return nullptr;
  }
  return e->make(o);
}

std::vector<std::string> CompressorNames() {
  std::vector<std::string> names;
  for (const Entry& e : Registry()) names.emplace_back(e.name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string CompressorDescription(const std::string& name) {
  const Entry* e = Find(name);
  return e == nullptr ? std::string() : std::string(e->description);
}

}  // namespace asgd::compression
