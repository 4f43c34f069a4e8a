#include "transport/server_rule.h"

#include <bit>
#include <cstring>
#include <new>

#include "core/aligned.h"
#include "core/check.h"
#include "core/error.h"

namespace asgd::transport {

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

void AddTo(std::span<float> dst, std::span<const float> src) {
  ASGD_CHECK_EQ(dst.size(), src.size());
  float* __restrict d = dst.data();
  const float* __restrict s = src.data();
  const std::size_t n = dst.size();
  for (std::size_t i = 0; i < n; ++i) d[i] += s[i];
}

void AddScaledTo(std::span<float> dst, float scale, std::span<const float> src) {
  ASGD_CHECK_EQ(dst.size(), src.size());
  float* __restrict d = dst.data();
  const float* __restrict s = src.data();
  const std::size_t n = dst.size();
  for (std::size_t i = 0; i < n; ++i) d[i] += scale * s[i];
}

int64_t FindNonFinite(std::span<const float> values) {
  // An exponent of all ones is Inf or NaN. The block loop has no early exit, so the
  // compiler vectorises it; only a block that holds a bad value is scanned again.
  constexpr std::size_t kBlock = 2048;
  const float* p = values.data();
  const std::size_t n = values.size();
  for (std::size_t begin = 0; begin < n; begin += kBlock) {
    const std::size_t end = std::min(n, begin + kBlock);
    uint32_t bad = 0;
    for (std::size_t i = begin; i < end; ++i) {
      bad |= static_cast<uint32_t>((std::bit_cast<uint32_t>(p[i]) & 0x7f800000u) == 0x7f800000u);
    }
    if (bad != 0) {
      for (std::size_t i = begin; i < end; ++i) {
        if ((std::bit_cast<uint32_t>(p[i]) & 0x7f800000u) == 0x7f800000u) {
          return static_cast<int64_t>(i);
        }
      }
    }
  }
  return -1;
}

namespace {

class AddRule final : public ServerRule {
 public:
  std::string Name() const override { return "add"; }

  PushOutcome OnPush(ShardContext& ctx, ServerCall& call) override {
    std::span<float> values = ctx.mutable_values();
    for (const Payload::Piece& piece : call.payload().pieces()) {
      AddTo(values.subspan(static_cast<std::size_t>(piece.offset), piece.values.size()),
            piece.values);
    }
    ctx.AdvanceVersion();
    return PushOutcome::kApplied;
  }
};

}  // namespace

std::unique_ptr<ServerRule> NewAddRule() { return std::make_unique<AddRule>(); }

}  // namespace asgd::transport
