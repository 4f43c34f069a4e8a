#include "compression/bit_pack.h"

#include "core/check.h"

namespace asgd::compression {

void PackBits(std::span<const uint32_t> codes, int bits, std::span<uint64_t> words) {
  ASGD_CHECK(bits >= 1 && bits <= kMaxCodeBits, "code width ", bits);
  ASGD_CHECK_EQ(words.size(), PackedWords(codes.size(), bits));
  const uint64_t limit = uint64_t{1} << bits;
  BitWriter w(words.data(), bits);
  for (uint32_t c : codes) {
    ASGD_CHECK_LT(uint64_t{c}, limit, "code does not fit ", bits, " bits");
    w.Put(c);
  }
  w.Finish();
}

bool UnpackBits(std::span<const std::byte> bytes, int bits, std::span<uint32_t> codes) {
  ASGD_CHECK(bits >= 1 && bits <= kMaxCodeBits, "code width ", bits);
  if (bytes.size() != PackedWords(codes.size(), bits) * sizeof(uint64_t)) return false;
  BitReader r(bytes.data(), bits);
  for (uint32_t& c : codes) c = static_cast<uint32_t>(r.Get());
  return r.RestIsZero();
}

}  // namespace asgd::compression
