// libFuzzer target over the wire decoder (ps/message.h). DecodeHeader and
// DecodeMessage must never crash, throw or read outside a frame, and whatever they accept
// must satisfy what message.h promises: every field in range, the lengths consistent with
// each other and with the frames, the range inside the shard, and a header that survives
// EncodeHeader + DecodeHeader unchanged. A broken promise aborts, which libFuzzer reports.
//
// Input framing (so the fuzzer can build multipart messages): the input is a sequence of
// frames, each a 2-byte little-endian length L followed by L bytes. A length that runs past
// the end of the input takes the bytes that are left, so every input is some message; an
// empty input is a message of no frames. Frame 0 is the header, the rest are payload
// frames. Each frame is copied into a heap block of exactly its size, so that
// AddressSanitizer catches a read past a frame's end instead of it reading the next frame.
//
// Compressed pushes (issue 17): a push with the header's encoding field is also decoded
// as the shard would (compression::Decode into count elements) once the message passed
// the shard checks; the decoder must refuse with one line and leave its output unchanged,
// or accept.
//
// Seeds: `message_fuzz --write-seeds=DIR` writes valid messages in this framing to DIR
// (the committed corpus in tests/fuzz/corpus/message) and exits. See README.md.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compression/compressor.h"
#include "core/rng.h"
#include "ps/message.h"

namespace asgd::ps {
namespace {

// The receiver the fuzzed messages are decoded for: shard 1 of 64 elements, accepting up to
// 256 payload bytes, so that both the shard range and the size limit are reachable.
constexpr uint32_t kShard = 1;
constexpr int64_t kShardSize = 64;
constexpr uint64_t kMaxPayload = 256;
// DecodeHeader's sanity bound on count and offset (message.cc).
constexpr uint64_t kMaxElements = uint64_t{1} << 40;
// More frames than DecodeMessage keeps on its stack (64) and than a message may announce.
constexpr std::size_t kMaxFrames = kMaxPayloadFrames + 8;

#define ASGD_FUZZ_CHECK(cond)                                                                 \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "message_fuzz: invariant violated: %s (%s:%d)\n", #cond, __FILE__, \
                   __LINE__);                                                                 \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

struct OwnedFrame {
  std::unique_ptr<std::byte[]> data;
  std::size_t size = 0;
  std::span<const std::byte> span() const { return {data.get(), size}; }
};

std::vector<OwnedFrame> SplitFrames(const uint8_t* data, std::size_t size) {
  std::vector<OwnedFrame> frames;
  std::size_t at = 0;
  while (at < size && frames.size() < kMaxFrames) {
    std::size_t n = data[at];
    if (at + 1 < size) n |= static_cast<std::size_t>(data[at + 1]) << 8;
    at = std::min(at + 2, size);
    n = std::min(n, size - at);
    OwnedFrame f;
    f.size = n;
    f.data = std::make_unique<std::byte[]>(n);  // exact size; a 0-byte block is fine
    if (n > 0) std::memcpy(f.data.get(), data + at, n);
    frames.push_back(std::move(f));
    at += n;
  }
  return frames;
}

void CheckError(const DecodeError& e) {
  ASGD_FUZZ_CHECK(e.code != ErrorCode::kNone);
  ASGD_FUZZ_CHECK(static_cast<uint16_t>(e.code) <= static_cast<uint16_t>(ErrorCode::kBadEncoding));
  ASGD_FUZZ_CHECK(!e.detail.empty());
  ASGD_FUZZ_CHECK(e.detail.find('\n') == std::string::npos);
}

// What DecodeHeader promises of a header it accepted.
void CheckHeader(const Header& h) {
  ASGD_FUZZ_CHECK(h.protocol == kProtocolVersion);
  ASGD_FUZZ_CHECK(static_cast<uint32_t>(h.op) >= 1 && static_cast<uint32_t>(h.op) < kOpEnd);
  ASGD_FUZZ_CHECK((h.flags & ~kKnownFlags) == 0);
  ASGD_FUZZ_CHECK(static_cast<uint32_t>(h.role) < kRoleEnd);
  ASGD_FUZZ_CHECK(static_cast<uint32_t>(h.dtype) < kDTypeEnd);
  ASGD_FUZZ_CHECK(h.frames <= kMaxPayloadFrames);
  ASGD_FUZZ_CHECK(h.count <= kMaxElements);
  ASGD_FUZZ_CHECK(h.offset <= kMaxElements);
  ASGD_FUZZ_CHECK(h.message.size() <= kMaxErrorMessageBytes);
  if (h.oldest_version) {  // the optional field: on push requests only, never above version
    ASGD_FUZZ_CHECK(!h.is_reply() && OpRequestHasPayload(h.op));
    ASGD_FUZZ_CHECK(*h.oldest_version <= h.version);
  }
  const bool encoded = h.encoding != compression::Encoding::kDense;
  if (encoded) {  // the optional field: on push requests only, with their frames
    ASGD_FUZZ_CHECK(!h.is_reply() && OpRequestHasPayload(h.op));
    ASGD_FUZZ_CHECK(static_cast<uint32_t>(h.encoding) < compression::kEncodingEnd);
    ASGD_FUZZ_CHECK(h.frames == compression::kEncodedFrames);
    ASGD_FUZZ_CHECK(h.payload_bytes <= MaxEncodedBytes(h.count));
  }
  const bool returns_values = h.op == Op::kPull || h.op == Op::kPushPull;
  if ((h.flags & kFlagChunkedReply) != 0) {  // asked for on pull and push-pull requests only
    ASGD_FUZZ_CHECK(!h.is_reply() && returns_values);
  }
  if ((h.flags & kChunkFlags) != 0) {  // chunks of dense pushes, or of values replies
    ASGD_FUZZ_CHECK(h.is_reply() ? returns_values : OpRequestHasPayload(h.op) && !encoded);
  }
  const bool has_payload = h.frames > 0 || h.payload_bytes > 0;
  if (has_payload) {
    ASGD_FUZZ_CHECK(h.dtype == DType::kFloat32);
    ASGD_FUZZ_CHECK(encoded || h.payload_bytes == h.count * 4);
    ASGD_FUZZ_CHECK(h.frames > 0);
  } else {
    ASGD_FUZZ_CHECK(h.dtype == DType::kNone || h.dtype == DType::kFloat32);
  }
  if (!h.is_reply()) {
    ASGD_FUZZ_CHECK(h.op != Op::kError);
    if (OpRequestHasPayload(h.op)) {
      ASGD_FUZZ_CHECK(h.count == 0 || has_payload);
    } else {
      ASGD_FUZZ_CHECK(!has_payload);
    }
  }
  // What was accepted encodes within the bound and decodes to the same header.
  std::array<std::byte, kMaxHeaderBytes> buf;
  const std::size_t n = EncodeHeader(h, buf);
  ASGD_FUZZ_CHECK(n > 0 && n <= kMaxHeaderBytes);
  Header again;
  ASGD_FUZZ_CHECK(DecodeHeader(std::span<const std::byte>(buf.data(), n), &again).ok());
  ASGD_FUZZ_CHECK(again == h);
}

void FuzzOne(const uint8_t* data, std::size_t size) {
  const std::vector<OwnedFrame> owned = SplitFrames(data, size);
  std::vector<std::span<const std::byte>> frames;
  frames.reserve(owned.size());
  for (const OwnedFrame& f : owned) frames.push_back(f.span());

  // The header frame on its own.
  Header header;
  DecodeError header_error = {ErrorCode::kTruncated, "no frames"};
  if (!frames.empty()) {
    header_error = DecodeHeader(frames[0], &header);
    if (header_error.ok()) {
      CheckHeader(header);
    } else {
      CheckError(header_error);
    }
  }

  // The whole message, as a server would see it, with and without the shard checks.
  Header loose, strict;
  const DecodeError loose_error = DecodeMessage(frames, &loose, kMaxPayload, kShard, -1);
  const DecodeError strict_error = DecodeMessage(frames, &strict, kMaxPayload, kShard, kShardSize);
  if (!header_error.ok()) {
    // The header's verdict stands.
    ASGD_FUZZ_CHECK(loose_error.code == header_error.code);
    ASGD_FUZZ_CHECK(strict_error.code == header_error.code);
    return;
  }
  if (!loose_error.ok()) {
    CheckError(loose_error);
    ASGD_FUZZ_CHECK(strict_error.code == loose_error.code);  // shard checks come last
    return;
  }
  ASGD_FUZZ_CHECK(loose == header);
  const Header& h = loose;
  // CheckPayloadFrames: the frames are the announced ones, whole elements, adding up.
  ASGD_FUZZ_CHECK(frames.size() - 1 == h.frames);
  ASGD_FUZZ_CHECK(h.payload_bytes <= kMaxPayload);
  uint64_t total = 0;
  for (std::size_t i = 1; i < frames.size(); ++i) {
    ASGD_FUZZ_CHECK(!frames[i].empty() && frames[i].size() % 4 == 0);
    total += frames[i].size();
  }
  ASGD_FUZZ_CHECK(total == h.payload_bytes);
  ASGD_FUZZ_CHECK(total == h.count * 4 || total == 0 ||
                  h.encoding != compression::Encoding::kDense);

  if (!strict_error.ok()) {
    CheckError(strict_error);
    ASGD_FUZZ_CHECK(strict_error.code == ErrorCode::kWrongShard ||
                    strict_error.code == ErrorCode::kOutOfRange);
    return;
  }
  ASGD_FUZZ_CHECK(strict == h);
  ASGD_FUZZ_CHECK(h.shard == kShard);
  ASGD_FUZZ_CHECK(h.offset + h.count <= static_cast<uint64_t>(kShardSize));
  if (h.encoding != compression::Encoding::kDense) {
    // What the shard does next (ShardCore): decode into count elements.
    std::vector<float> out(h.count, 7.0f);
    const std::string problem = compression::Decode(
        h.encoding, std::span<const std::span<const std::byte>>(frames).subspan(1), out);
    if (!problem.empty()) {
      ASGD_FUZZ_CHECK(problem.find('\n') == std::string::npos);
      for (float v : out) ASGD_FUZZ_CHECK(v == 7.0f);  // refused: nothing written
    }
  }
}

// ---- Seeds ----------------------------------------------------------------------------

void AppendFrame(std::string* out, std::span<const std::byte> frame) {
  out->push_back(static_cast<char>(frame.size() & 0xff));
  out->push_back(static_cast<char>(frame.size() >> 8));
  out->append(reinterpret_cast<const char*>(frame.data()), frame.size());
}

std::string Message(const Header& h, const std::vector<std::size_t>& payload_frames = {}) {
  std::array<std::byte, kMaxHeaderBytes> buf;
  std::string out;
  AppendFrame(&out, std::span<const std::byte>(buf.data(), EncodeHeader(h, buf)));
  float next = 1.0f;
  for (std::size_t elements : payload_frames) {
    std::vector<std::byte> frame(elements * sizeof(float));
    for (std::size_t i = 0; i < elements; ++i, next += 1.0f) {
      std::memcpy(frame.data() + i * sizeof(float), &next, sizeof(float));
    }
    AppendFrame(&out, frame);
  }
  return out;
}

Header Request(Op op, uint64_t offset, uint64_t count, uint32_t frames) {
  Header h;
  h.op = op;
  h.role = Role::kWorker;
  h.sender = 2;
  h.shard = kShard;
  h.request_id = 41;
  h.version = 3;
  h.clock = 7;
  h.offset = offset;
  h.count = count;
  if (frames > 0) {
    h.dtype = DType::kFloat32;
    h.payload_bytes = count * sizeof(float);
    h.frames = frames;
  }
  return h;
}

bool WriteSeeds(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> seeds;  // name, message
  seeds.emplace_back("push_one_frame", Message(Request(Op::kPush, 4, 4, 1), {4}));
  seeds.emplace_back("push_three_frames", Message(Request(Op::kPush, 0, 6, 3), {1, 2, 3}));
  seeds.emplace_back("push_pull", Message(Request(Op::kPushPull, 60, 4, 1), {4}));
  Header window = Request(Op::kPush, 4, 4, 1);
  window.oldest_version = 1;  // the optional field: a push computed on versions 1 to 3
  seeds.emplace_back("push_window", Message(window, {4}));
  seeds.emplace_back("pull", Message(Request(Op::kPull, 8, 16, 0)));
  Header clock = Request(Op::kClock, 0, 0, 0);
  clock.clock = -5;
  seeds.emplace_back("clock", Message(clock));
  Header barrier = Request(Op::kBarrier, 0, 0, 0);
  barrier.aux = 4;
  seeds.emplace_back("barrier", Message(barrier));
  seeds.emplace_back("register", Message(Request(Op::kRegister, 0, 0, 0)));
  Header reply = Request(Op::kPull, 8, 2, 1);
  reply.flags = kFlagReply;
  reply.role = Role::kPs;
  seeds.emplace_back("pull_reply", Message(reply, {2}));
  // Compressed pushes of 16 elements, one per encoding, and one mislabelled.
  std::vector<float> x(16);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) - 2.0f;
  for (const std::string name : {"topk", "randk", "qsgd", "sign", "terngrad"}) {
    compression::CompressionOptions o;
    o.name = name;
    o.ratio = 0.25;
    Rng rng(1);
    compression::Encoded e;
    compression::NewCompressor(o)->Encode(x, rng, &e);
    for (const bool mislabel : {false, true}) {
      if (mislabel && name != "qsgd") continue;
      Header h = Request(Op::kPush, 8, 16, 0);
      h.dtype = DType::kFloat32;
      h.frames = static_cast<uint32_t>(e.frames.size());
      h.payload_bytes = static_cast<uint64_t>(e.bytes());
      h.encoding = mislabel ? compression::Encoding::kSign : e.encoding;
      std::string bytes = Message(h);
      for (const auto& frame : e.frames) AppendFrame(&bytes, frame);
      seeds.emplace_back((mislabel ? "compressed_mislabelled_" : "compressed_") + name, bytes);
    }
  }
  Header error = Request(Op::kError, 0, 0, 0);
  error.flags = kFlagReply;
  error.code = ErrorCode::kNonFinite;
  error.message = "push payload holds NaN at shard-local element 3";
  seeds.emplace_back("error_reply", Message(error));
  for (const auto& [name, bytes] : seeds) {
    std::ofstream out(dir + "/" + name, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "message_fuzz: cannot write %s/%s\n", dir.c_str(), name.c_str());
      return false;
    }
  }
  std::fprintf(stderr, "message_fuzz: wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
  return true;
}

}  // namespace
}  // namespace asgd::ps

// libFuzzer calls this before it parses its own flags, so the generator mode needs no flag
// of libFuzzer's.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  constexpr std::string_view kFlag = "--write-seeds=";
  for (int i = 1; i < *argc; ++i) {
    const std::string_view arg = (*argv)[i];
    if (arg.substr(0, kFlag.size()) == kFlag) {
      std::exit(asgd::ps::WriteSeeds(std::string(arg.substr(kFlag.size()))) ? 0 : 1);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  asgd::ps::FuzzOne(data, size);
  return 0;
}
