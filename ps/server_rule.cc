#include "ps/server_rule.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <new>

#include "core/aligned.h"
#include "core/check.h"
#include "core/error.h"

namespace asgd::ps {

Payload::Payload(int64_t offset, std::vector<Piece> pieces)
    : offset_(offset), pieces_(std::move(pieces)) {
  int64_t at = offset;
  for (const Piece& p : pieces_) {
    ASGD_CHECK_EQ(p.offset, at, "payload pieces must be contiguous and in order");
    at += static_cast<int64_t>(p.values.size());
  }
  count_ = at - offset;
}

void Payload::CopyTo(std::span<float> out) const {
  ASGD_CHECK_EQ(static_cast<int64_t>(out.size()), count_);
  std::size_t at = 0;
  for (const Piece& p : pieces_) {
    if (!p.values.empty()) std::memcpy(out.data() + at, p.values.data(), p.values.size_bytes());
    at += p.values.size();
  }
}

ReplyBuffer::ReplyBuffer(int64_t count) : count_(count) {
  ASGD_CHECK_GE(count, 0);
  if (count == 0) return;
  auto* p = static_cast<float*>(::operator new(static_cast<std::size_t>(count) * sizeof(float),
                                               std::align_val_t{kBufferAlignment}));
  std::memset(p, 0, static_cast<std::size_t>(count) * sizeof(float));
  data_.reset(p);
}

ReplyBuffer::~ReplyBuffer() = default;

float* ReplyBuffer::Release() {
  count_ = 0;
  return data_.release();
}

void ReplyBuffer::Free(float* data) {
  if (data != nullptr) ::operator delete(data, std::align_val_t{kBufferAlignment});
}

void ServerRule::LoadState(std::string_view state) {
  if (!state.empty()) {
    throw InputError("server rule " + Name() + " keeps no state but was given " +
                     std::to_string(state.size()) + " bytes");
  }
}

namespace {

thread_local uint64_t t_non_finite_results = 0;

// The largest |value| as float bits (NaN above Inf). Vectorised: no early exit.
uint32_t MaxMagnitudeBits(const float* p, std::size_t n) {
  uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::bit_cast<uint32_t>(p[i]) & 0x7fffffffu);
  return m;
}

// Adding t to a finite float d can only round to Inf when |t| >= 2^103 (half an ulp of
// FLT_MAX); below 2^102 (with margin for the rounding of scale * s) it never does. So a
// pass over the payload alone, which is small and was just received, tells whether the
// shard's values need checking at all: almost never.
constexpr double kSafeAddend = 0x1p102;

// The payload spans FindNonFinite scanned during the current push (while armed by the
// host, internal::ArmPayloadScans), with their largest magnitude: an add of a src inside
// one of them need not read src twice.
struct PayloadScans {
  struct Scan {
    const float* begin;
    const float* end;
    uint32_t max_bits;
  };
  static constexpr std::size_t kMax = 16;
  bool armed = false;
  std::size_t count = 0;
  Scan scans[kMax];
};
thread_local PayloadScans t_scans;

void RememberScan(const float* p, std::size_t n, uint32_t max_bits) {
  if (!t_scans.armed || t_scans.count == PayloadScans::kMax) return;
  t_scans.scans[t_scans.count++] = {p, p + n, max_bits};
}

bool MayOverflow(float scale, const float* s, std::size_t n) {
  uint32_t bits = 0;
  bool known = false;
  for (std::size_t i = 0; i < t_scans.count && !known; ++i) {
    const PayloadScans::Scan& scan = t_scans.scans[i];
    if (s >= scan.begin && s + n <= scan.end) {
      bits = scan.max_bits;  // of a span that holds src: a bound for src's
      known = true;
    }
  }
  if (!known) bits = MaxMagnitudeBits(s, n);
  return !AddCannotOverflow(scale, std::bit_cast<float>(bits));
}

// The rare path: computes every result before writing any, so that a refused add leaves
// dst unchanged.
void CheckedAdd(std::span<float> dst, float scale, std::span<const float> src, bool scaled) {
  std::vector<float> out(dst.size());
  for (std::size_t i = 0; i < dst.size(); ++i) {
    out[i] = scaled ? dst[i] + scale * src[i] : dst[i] + src[i];
    if (!std::isfinite(out[i])) {
      ++t_non_finite_results;
      throw NonFiniteResultError(::asgd::internal::StrCat(
          "the result at element ", i, " of the range would be ", out[i] != out[i] ? "NaN" : "Inf",
          " (", dst[i], " + ", scaled ? scale * src[i] : src[i], "); nothing was changed"));
    }
  }
  std::memcpy(dst.data(), out.data(), out.size() * sizeof(float));
}

}  // namespace

uint64_t NonFiniteResultsOnThisThread() { return t_non_finite_results; }

bool AddCannotOverflow(float scale, float max_magnitude) {
  // In double, so that the product itself cannot overflow; NaN compares false.
  return static_cast<double>(std::fabs(scale)) * static_cast<double>(max_magnitude) < kSafeAddend;
}

bool AddStaysFinite(std::span<const float> dst, float scale, std::span<const float> src) {
  ASGD_CHECK_EQ(dst.size(), src.size());
  if (!MayOverflow(scale, src.data(), src.size())) return true;
  for (std::size_t i = 0; i < dst.size(); ++i) {
    if (!std::isfinite(dst[i] + scale * src[i])) return false;
  }
  return true;
}

namespace {

void AddUnchecked(std::span<float> dst, std::span<const float> src) {
  float* __restrict d = dst.data();
  const float* __restrict s = src.data();
  const std::size_t n = dst.size();
  for (std::size_t i = 0; i < n; ++i) d[i] += s[i];
}

}  // namespace

void AddTo(std::span<float> dst, std::span<const float> src) {
  ASGD_CHECK_EQ(dst.size(), src.size());
  if (MayOverflow(1.0f, src.data(), src.size())) {
    CheckedAdd(dst, 1.0f, src, /*scaled=*/false);
    return;
  }
  AddUnchecked(dst, src);
}

void AddScaledTo(std::span<float> dst, float scale, std::span<const float> src) {
  ASGD_CHECK_EQ(dst.size(), src.size());
  if (MayOverflow(scale, src.data(), src.size())) {
    CheckedAdd(dst, scale, src, /*scaled=*/true);
    return;
  }
  float* __restrict d = dst.data();
  const float* __restrict s = src.data();
  const std::size_t n = dst.size();
  for (std::size_t i = 0; i < n; ++i) d[i] += scale * s[i];
}

namespace internal {

void ArmPayloadScans() {
  t_scans.armed = true;
  t_scans.count = 0;
}

void DisarmPayloadScans() {
  t_scans.armed = false;
  t_scans.count = 0;
}

}  // namespace internal

int64_t FindNonFinite(std::span<const float> values) { return FindNonFinite(values, nullptr); }

int64_t FindNonFinite(std::span<const float> values, float* max_magnitude) {
  // An exponent of all ones is Inf or NaN: a magnitude (bits without the sign) at or
  // above Inf's. The block loop has no early exit, so the compiler vectorises it; only a
  // block that holds a bad value is scanned again. The largest magnitude comes for free
  // and is remembered for the add helpers (when armed).
  constexpr std::size_t kBlock = 2048;
  constexpr uint32_t kInfBits = 0x7f800000u;
  const float* p = values.data();
  const std::size_t n = values.size();
  uint32_t max_bits = 0;
  for (std::size_t begin = 0; begin < n; begin += kBlock) {
    const std::size_t end = std::min(n, begin + kBlock);
    uint32_t m = 0;
    for (std::size_t i = begin; i < end; ++i) {
      m = std::max(m, std::bit_cast<uint32_t>(p[i]) & 0x7fffffffu);
    }
    max_bits = std::max(max_bits, m);
    if (m >= kInfBits) {
      for (std::size_t i = begin; i < end; ++i) {
        if ((std::bit_cast<uint32_t>(p[i]) & kInfBits) == kInfBits) {
          return static_cast<int64_t>(i);
        }
      }
    }
  }
  RememberScan(p, n, max_bits);
  if (max_magnitude != nullptr) *max_magnitude = std::bit_cast<float>(max_bits);
  return -1;
}

bool AddScaledInto(std::span<float> out, std::span<const float> base, float scale,
                   std::span<const float> src) {
  ASGD_CHECK_EQ(out.size(), base.size());
  ASGD_CHECK_EQ(out.size(), src.size());
  float* __restrict o = out.data();
  const float* __restrict b = base.data();
  const float* __restrict s = src.data();
  const std::size_t n = out.size();
  // A result's magnitude bits at or above Inf's mean NaN or Inf: a NaN or Inf in src (or
  // base) or an overflow. The max reduction has no early exit, so the loop vectorises.
  uint32_t m = 0;
  if (scale == 1.0f) {
    for (std::size_t i = 0; i < n; ++i) {
      o[i] = b[i] + s[i];
      m = std::max(m, std::bit_cast<uint32_t>(o[i]) & 0x7fffffffu);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      o[i] = b[i] + scale * s[i];
      m = std::max(m, std::bit_cast<uint32_t>(o[i]) & 0x7fffffffu);
    }
  }
  return m < 0x7f800000u;
}

namespace {

class AddRule final : public ServerRule {
 public:
  std::string Name() const override { return "add"; }

  PushOutcome OnPush(ShardContext& ctx, ServerCall& call) override {
    // All pieces or none: AddTo refuses only its own piece, so a push of several pieces
    // is checked whole first (a pass over the payload only, see AddStaysFinite).
    const std::span<const Payload::Piece> pieces = call.payload().pieces();
    if (pieces.size() == 1) {
      AddTo(ctx.mutable_values().subspan(static_cast<std::size_t>(pieces[0].offset),
                                         pieces[0].values.size()),
            pieces[0].values);
    } else {
      std::span<const float> current = ctx.values();
      for (const Payload::Piece& piece : pieces) {
        if (!AddStaysFinite(current.subspan(static_cast<std::size_t>(piece.offset), piece.values.size()),
                            1.0f, piece.values)) {
          ++t_non_finite_results;
          throw NonFiniteResultError(::asgd::internal::StrCat(
              "the sum at shard-local elements ", piece.offset, "..",
              piece.offset + static_cast<int64_t>(piece.values.size()),
              " would not be finite; nothing was changed"));
        }
      }
      std::span<float> values = ctx.mutable_values();
      for (const Payload::Piece& piece : pieces) {
        AddUnchecked(values.subspan(static_cast<std::size_t>(piece.offset), piece.values.size()),
                     piece.values);
      }
    }
    ctx.AdvanceVersion();
    return PushOutcome::kApplied;
  }

  std::optional<float> ElementwiseAddScale(const RequestInfo&, int64_t) const override {
    return 1.0f;
  }
};

}  // namespace

std::unique_ptr<ServerRule> NewAddRule() { return std::make_unique<AddRule>(); }

}  // namespace asgd::ps
