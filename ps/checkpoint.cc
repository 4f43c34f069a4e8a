#include "ps/checkpoint.h"

#include <array>
#include <cstring>

#include "core/check.h"
#include "core/error.h"
#include "core/sha256.h"

namespace asgd::ps {
namespace {

constexpr char kMagic[8] = {'A', 'S', 'G', 'D', 'S', 'H', 'R', 'D'};
constexpr uint32_t kMaxRuleName = 256;

template <typename T>
void Put(std::string& out, T v) {
  static_assert(std::is_integral_v<T>);
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out.push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff));
  }
}

// Reads fields from the front of a byte string, refusing to read past its end.
class Reader {
 public:
  Reader(std::string_view bytes, std::string_view what) : rest_(bytes), what_(what) {}
  template <typename T>
  T Get(const char* field) {
    Need(sizeof(T), field);
    uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      v |= static_cast<uint64_t>(static_cast<uint8_t>(rest_[i])) << (8 * i);
    }
    rest_.remove_prefix(sizeof(T));
    return static_cast<T>(v);
  }
  std::string_view Bytes(uint64_t n, const char* field) {
    Need(n, field);
    std::string_view b = rest_.substr(0, static_cast<std::size_t>(n));
    rest_.remove_prefix(static_cast<std::size_t>(n));
    return b;
  }
  uint64_t left() const { return rest_.size(); }
  [[noreturn]] void Fail(const std::string& problem) const {
    throw DataError(std::string(what_), problem);
  }

 private:
  void Need(uint64_t n, const char* field) const {
    if (n > rest_.size()) {
      Fail(::asgd::internal::StrCat("truncated: ", field, " needs ", n, " bytes, ", rest_.size(), " left"));
    }
  }
  std::string_view rest_;
  std::string_view what_;
};

}  // namespace

std::string EncodeShardCheckpoint(const ShardSnapshot& s, std::string_view rule_name) {
  ASGD_CHECK(rule_name.size() <= kMaxRuleName, "rule name too long");
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(out, kCheckpointFormat);
  Put<uint32_t>(out, s.shard);
  Put<uint64_t>(out, s.version);
  Put<uint64_t>(out, s.values.size());
  Put<uint32_t>(out, static_cast<uint32_t>(rule_name.size()));
  out.append(rule_name);
  Put<uint64_t>(out, s.rule_state.size());
  out.append(s.rule_state);
  const std::size_t at = out.size();
  out.resize(at + s.values.size() * sizeof(float));
  if (!s.values.empty()) std::memcpy(out.data() + at, s.values.data(), s.values.size() * sizeof(float));
  Sha256 h;
  h.Update(out);
  const std::array<uint8_t, 32> digest = h.Finish();
  out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  return out;
}

ShardCheckpoint DecodeShardCheckpoint(std::string_view bytes, std::string_view what) {
  Reader r(bytes, what);
  if (bytes.size() < sizeof(kMagic) + 32 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    r.Fail("not a shard checkpoint (no ASGDSHRD header)");
  }
  // The digest first: nothing below is trusted before it matches.
  const std::string_view body = bytes.substr(0, bytes.size() - 32);
  Sha256 h;
  h.Update(body);
  const std::array<uint8_t, 32> digest = h.Finish();
  if (std::memcmp(digest.data(), bytes.data() + body.size(), 32) != 0) {
    r.Fail("checksum mismatch (the file is corrupt or was changed)");
  }
  Reader in(body, what);
  (void)in.Bytes(sizeof(kMagic), "magic");
  const auto format = in.Get<uint32_t>("format");
  if (format != kCheckpointFormat) {
    in.Fail(::asgd::internal::StrCat("format ", format, ", expected ", kCheckpointFormat));
  }
  ShardCheckpoint c;
  c.snapshot.shard = in.Get<uint32_t>("shard");
  c.snapshot.version = in.Get<uint64_t>("version");
  const auto count = in.Get<uint64_t>("count");
  const auto name_len = in.Get<uint32_t>("rule name length");
  if (name_len > kMaxRuleName) in.Fail(::asgd::internal::StrCat("rule name of ", name_len, " bytes"));
  c.rule_name = std::string(in.Bytes(name_len, "rule name"));
  const auto state_len = in.Get<uint64_t>("rule state length");
  c.snapshot.rule_state = std::string(in.Bytes(state_len, "rule state"));
  if (count > in.left() / sizeof(float) || in.left() != count * sizeof(float)) {
    in.Fail(::asgd::internal::StrCat("claims ", count, " values but holds ", in.left(), " bytes of them"));
  }
  const std::string_view values = in.Bytes(count * sizeof(float), "values");
  c.snapshot.values.resize(static_cast<std::size_t>(count));
  if (count > 0) std::memcpy(c.snapshot.values.data(), values.data(), values.size());
  return c;
}

}  // namespace asgd::ps
