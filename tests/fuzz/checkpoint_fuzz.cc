// libFuzzer target over the shard-checkpoint decoder (ps/checkpoint.h).
// DecodeShardCheckpoint must never crash, read outside the bytes or allocate more than
// they hold, and may throw only DataError (one line naming the file); a checkpoint it
// accepts must encode back to exactly the bytes it came from.
//
// The decoder checks a SHA-256 over the whole file before it reads a field, so random
// bytes almost never get past it. Each input is therefore decoded twice: as it is (the
// magic and digest checks), and with its last 32 bytes replaced by the digest of the rest
// (every field check after the digest). The committed seeds are valid checkpoints, which
// both passes accept.
//
// Seeds: `checkpoint_fuzz --write-seeds=DIR` writes EncodeShardCheckpoint outputs to DIR
// (the committed corpus in tests/fuzz/corpus/checkpoint) and exits. See README.md.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/sha256.h"
#include "ps/checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

namespace asgd::ps {
namespace {

constexpr std::string_view kWhat = "fuzz/shard-1.ckpt";
constexpr std::size_t kDigestBytes = 32;

void DecodeAndCheck(std::string_view bytes) {
  ShardCheckpoint c;
  try {
    c = DecodeShardCheckpoint(bytes, kWhat);
  } catch (const DataError& e) {
    fuzz::CheckErrorMessage(e, "data: ", kWhat);
    return;
  }
  // Accepted: the fields account for every byte, so encoding them gives the input back.
  ASGD_FUZZ_CHECK(c.rule_name.size() <= 256);
  ASGD_FUZZ_CHECK(EncodeShardCheckpoint(c.snapshot, c.rule_name) == bytes);
}

void FuzzOne(const uint8_t* data, std::size_t size) {
  // libFuzzer's buffer has exactly `size` bytes, so AddressSanitizer sees a read past it.
  DecodeAndCheck(std::string_view(reinterpret_cast<const char*>(data), size));
  if (size < kDigestBytes) return;
  // The same bytes with a correct digest, in a block of exactly their size.
  const std::size_t body = size - kDigestBytes;
  auto fixed = std::make_unique<char[]>(size);
  std::memcpy(fixed.get(), data, size);
  Sha256 h;
  h.Update(std::string_view(fixed.get(), body));
  const std::array<uint8_t, 32> digest = h.Finish();
  std::memcpy(fixed.get() + body, digest.data(), kDigestBytes);
  DecodeAndCheck(std::string_view(fixed.get(), size));
}

// ---- Seeds ----------------------------------------------------------------------------

fuzz::Seeds MakeSeeds() {
  fuzz::Seeds seeds;
  ShardSnapshot empty;
  seeds.emplace_back("empty_shard", EncodeShardCheckpoint(empty, ""));

  ShardSnapshot small;
  small.shard = 3;
  small.version = 123456789012ULL;
  small.values = {1.5f, -2.25f, 0.0f, std::numeric_limits<float>::denorm_min(), 1e30f};
  small.rule_state = std::string("acc\0umulators", 13);
  seeds.emplace_back("dc_asgd_five_values", EncodeShardCheckpoint(small, "dc_asgd"));

  ShardSnapshot add;
  add.shard = 1;
  add.version = 7;
  for (int i = 0; i < 64; ++i) add.values.push_back(0.25f * static_cast<float>(i) - 4.0f);
  seeds.emplace_back("add_64_values", EncodeShardCheckpoint(add, "add"));

  ShardSnapshot state_only;
  state_only.shard = 0xffffffffu;
  state_only.version = std::numeric_limits<uint64_t>::max();
  state_only.rule_state = std::string(40, '\x7f');
  seeds.emplace_back("state_only", EncodeShardCheckpoint(state_only, "staleness_aware"));

  // Slightly broken: cut inside the values, and a value byte flipped (digest mismatch).
  std::string cut = EncodeShardCheckpoint(small, "dc_asgd");
  cut.resize(cut.size() - kDigestBytes - 3);
  seeds.emplace_back("truncated", cut);
  std::string flipped = EncodeShardCheckpoint(add, "add");
  flipped[flipped.size() - kDigestBytes - 1] ^= 0x40;
  seeds.emplace_back("flipped_value", flipped);
  return seeds;
}

}  // namespace
}  // namespace asgd::ps

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  asgd::fuzz::HandleWriteSeeds("checkpoint_fuzz", *argc, *argv, asgd::ps::MakeSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  asgd::fuzz::RunOne("checkpoint_fuzz", [&] { asgd::ps::FuzzOne(data, size); });
  return 0;
}
