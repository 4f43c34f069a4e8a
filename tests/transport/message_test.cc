// The wire codec (transport/message.h): what one peer encodes, the other decodes field
// for field; and every malformed, inconsistent or hostile header is rejected with the
// right ErrorCode and a one-line reason naming the field, before a payload byte is
// trusted (DESIGN.md §5).
#include "transport/message.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <msgpack.hpp>

#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace asgd::transport {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kU32Max = std::numeric_limits<uint32_t>::max();
// DecodeHeader's sanity bound on count and offset (message.cc).
constexpr uint64_t kMaxElements = uint64_t{1} << 40;

// Field names in wire order, as the decoder names them in its messages.
const char* const kFieldNames[kHeaderFields] = {
    "protocol", "op",    "flags",  "role",          "sender", "shard", "request_id",
    "version",  "clock", "dtype",  "offset",        "count",  "payload_bytes",
    "frames",   "code",  "aux",    "message"};

std::vector<std::byte> Encode(const Header& h) {
  std::vector<std::byte> buf(kMaxHeaderBytes);
  buf.resize(EncodeHeader(h, buf));
  return buf;
}

// A valid push request of 4 float32 elements in one frame, with a distinct value in
// every field, so a field read from the wrong position shows.
Header PushRequest() {
  Header h;
  h.op = Op::kPush;
  h.role = Role::kWorker;
  h.sender = 3;
  h.shard = 1;
  h.request_id = 77;
  h.version = 5;
  h.clock = 9;
  h.dtype = DType::kFloat32;
  h.offset = 2;
  h.count = 4;
  h.payload_bytes = 16;
  h.frames = 1;
  return h;
}

Header PullRequest() {
  Header h = PushRequest();
  h.op = Op::kPull;
  h.payload_bytes = 0;
  h.frames = 0;
  return h;
}

// ---- A second encoder, field by field, for headers EncodeHeader cannot produce -------

using Packer = msgpack::packer<msgpack::sbuffer>;
using FieldWriter = std::function<void(Packer&)>;

FieldWriter Uint(uint64_t v) {
  return [v](Packer& pk) { pk.pack_uint64(v); };
}
FieldWriter Int(int64_t v) {
  return [v](Packer& pk) { pk.pack_int64(v); };
}
FieldWriter Str(std::string s) {
  return [s](Packer& pk) {
    pk.pack_str(static_cast<uint32_t>(s.size()));
    pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
  };
}

// The header's 17 wire fields, in order.
std::vector<FieldWriter> WireFields(const Header& h) {
  return {Uint(h.protocol),
          Uint(static_cast<uint64_t>(h.op)),
          Uint(h.flags),
          Uint(static_cast<uint64_t>(h.role)),
          Uint(h.sender),
          Uint(h.shard),
          Uint(h.request_id),
          Uint(h.version),
          Int(h.clock),
          Uint(static_cast<uint64_t>(h.dtype)),
          Uint(h.offset),
          Uint(h.count),
          Uint(h.payload_bytes),
          Uint(h.frames),
          Uint(static_cast<uint64_t>(h.code)),
          Uint(h.aux),
          Str(h.message)};
}

std::vector<std::byte> PackArray(const std::vector<FieldWriter>& fields) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(static_cast<uint32_t>(fields.size()));
  for (const FieldWriter& f : fields) f(pk);
  std::vector<std::byte> out(buf.size());
  std::memcpy(out.data(), buf.data(), buf.size());
  return out;
}

std::vector<std::byte> WithField(const Header& h, uint32_t index, FieldWriter value) {
  std::vector<FieldWriter> fields = WireFields(h);
  fields[index] = std::move(value);
  return PackArray(fields);
}

DecodeError Decode(const std::vector<std::byte>& frame, Header* out = nullptr) {
  Header scratch;
  return DecodeHeader(frame, out != nullptr ? out : &scratch);
}

// Every rejection: the code, a detail naming the field, on one line.
void ExpectRejected(const DecodeError& e, ErrorCode code, const std::string& names) {
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code, code) << "got " << ErrorCodeName(e.code) << ": " << e.detail;
  EXPECT_THAT(e.detail, HasSubstr(names));
  EXPECT_THAT(e.detail, Not(HasSubstr("\n")));
}

// ---- Round trips ---------------------------------------------------------------------

// Every field survives encode + decode, including the signed clock and the message.
TEST(Codec, RoundTripsEveryField) {
  Header h;
  h.op = Op::kPushPull;
  h.flags = kFlagReply;
  h.role = Role::kPs;
  h.sender = 7;
  h.shard = 3;
  h.request_id = 0x1234567890ull;
  h.version = 42;
  h.clock = -17;
  h.dtype = DType::kFloat32;
  h.offset = 1000;
  h.count = 250;
  h.payload_bytes = 1000;
  h.frames = 2;
  h.code = ErrorCode::kNonFinite;
  h.aux = 99;
  h.message = "push payload holds NaN";
  Header got;
  ASSERT_TRUE(Decode(Encode(h), &got).ok());
  EXPECT_EQ(got, h);
}

// Requests of every op that a client sends decode to what was encoded.
TEST(Codec, RoundTripsEveryRequestOp) {
  for (Op op : {Op::kPush, Op::kPull, Op::kPushPull, Op::kRegister, Op::kHeartbeat,
                Op::kBarrier, Op::kClock, Op::kStop, Op::kCheckpoint}) {
    Header h = OpRequestHasPayload(op) ? PushRequest() : PullRequest();
    h.op = op;
    Header got;
    const DecodeError e = Decode(Encode(h), &got);
    EXPECT_TRUE(e.ok()) << OpName(op) << ": " << e.detail;
    EXPECT_EQ(got, h) << OpName(op);
  }
}

// The optional oldest_version (field 17) of a windowed push: sent after the 17 fields
// only when set, read back as it was; a header without it is exactly the 17-field layout
// a peer of before the field reads, and decodes with the field unset.
TEST(Codec, OldestVersionRoundTripsOnPushRequestsOnly) {
  for (Op op : {Op::kPush, Op::kPushPull}) {
    SCOPED_TRACE(OpName(op));
    Header h = PushRequest();  // version 5
    h.op = op;
    const std::vector<std::byte> plain = Encode(h);
    ASSERT_GE(plain.size(), 3u);
    EXPECT_EQ(plain[0], std::byte{0xdc});  // array16 ...
    EXPECT_EQ(std::to_integer<int>(plain[2]), 17);  // ... of the 17 fields
    Header got;
    ASSERT_TRUE(Decode(plain, &got).ok());
    EXPECT_FALSE(got.oldest_version.has_value());
    for (uint64_t oldest : {uint64_t{0}, uint64_t{2}, uint64_t{5}}) {
      h.oldest_version = oldest;
      const std::vector<std::byte> bytes = Encode(h);
      EXPECT_EQ(std::to_integer<int>(bytes[2]), 18);
      EXPECT_EQ(bytes.size(), plain.size() + 1);  // a positive fixint
      const DecodeError e = Decode(bytes, &got);
      ASSERT_TRUE(e.ok()) << e.detail;
      EXPECT_EQ(got, h);
      ASSERT_TRUE(got.oldest_version.has_value());
      EXPECT_EQ(*got.oldest_version, oldest);
    }
    // A peer writing the 17 fields and the optional one by hand is read the same.
    std::vector<FieldWriter> fields = WireFields(PushRequest());
    fields[1] = Uint(static_cast<uint64_t>(op));
    fields.push_back(Uint(3));
    ASSERT_TRUE(Decode(PackArray(fields), &got).ok());
    EXPECT_EQ(got.oldest_version, std::optional<uint64_t>(3));
    // Wide versions, the largest oldest one included.
    h.version = kU64Max;
    h.oldest_version = kU64Max - 1;
    ASSERT_TRUE(Decode(Encode(h), &got).ok());
    EXPECT_EQ(got, h);
    EXPECT_LE(Encode(h).size(), kMaxHeaderBytes);
  }
}

// A compressed push (field 18, encoding): count is the dense element count, payload_bytes
// the encoded frames' total; field 17 travels too (as the version when not older) and
// reads back as the version. A dense push leaves both out, as before.
Header CompressedPush(compression::Encoding encoding) {
  Header h = PushRequest();  // count 4
  h.encoding = encoding;
  h.frames = compression::kEncodedFrames;
  h.payload_bytes = 12;  // e.g. sign: a 4-byte scale and one 8-byte word
  return h;
}

TEST(Codec, EncodingRoundTripsOnPushRequests) {
  for (Op op : {Op::kPush, Op::kPushPull}) {
    for (uint32_t e = 1; e < compression::kEncodingEnd; ++e) {
      Header h = CompressedPush(static_cast<compression::Encoding>(e));
      h.op = op;
      const std::vector<std::byte> bytes = Encode(h);
      EXPECT_EQ(std::to_integer<int>(bytes[2]), 19);
      Header got;
      const DecodeError err = Decode(bytes, &got);
      ASSERT_TRUE(err.ok()) << err.detail;
      EXPECT_EQ(got.encoding, h.encoding);
      EXPECT_EQ(got.oldest_version, std::optional<uint64_t>(h.version));
      h.oldest_version = h.version;
      EXPECT_EQ(got, h);
      h.oldest_version = 2;  // an older one survives next to the encoding
      ASSERT_TRUE(Decode(Encode(h), &got).ok());
      EXPECT_EQ(got, h);
    }
  }
  // The largest sparse encoding (k = count) fits: 8 bytes per element and a scale frame.
  Header h = CompressedPush(compression::Encoding::kTopK);
  h.payload_bytes = MaxEncodedBytes(h.count);
  EXPECT_TRUE(Decode(Encode(h)).ok());
}

TEST(Codec, EncodingIsRefusedWhereItMeansNothingOrCannotBe) {
  auto with_encoding = [](Header h, FieldWriter encoding) {
    std::vector<FieldWriter> fields = WireFields(h);
    fields.push_back(Uint(h.version));
    fields.push_back(std::move(encoding));
    return PackArray(fields);
  };
  const Header push = CompressedPush(compression::Encoding::kDense);
  // Field 17 comes first and is refused first: either way the header names the op.
  ExpectRejected(Decode(with_encoding(PullRequest(), Uint(1))), ErrorCode::kMalformedHeader,
                 "on a pull request");
  Header reply = PushRequest();
  reply.flags = kFlagReply;
  reply.payload_bytes = 0;
  reply.frames = 0;
  ExpectRejected(Decode(with_encoding(reply, Uint(1))), ErrorCode::kMalformedHeader,
                 "on a push reply");
  ExpectRejected(Decode(with_encoding(push, Uint(0))), ErrorCode::kBadEncoding, "encoding = 0");
  ExpectRejected(Decode(with_encoding(push, Uint(compression::kEncodingEnd))),
                 ErrorCode::kBadEncoding, "encoding = 6");
  ExpectRejected(Decode(with_encoding(push, Str("qsgd"))), ErrorCode::kMalformedHeader,
                 "(encoding) is a string");
  Header h = CompressedPush(compression::Encoding::kSign);
  h.frames = 3;
  ExpectRejected(Decode(Encode(h)), ErrorCode::kBadFrames, "sign push in 3 frames");
  h = CompressedPush(compression::Encoding::kQsgd);
  h.payload_bytes = MaxEncodedBytes(h.count) + 1;
  ExpectRejected(Decode(Encode(h)), ErrorCode::kPayloadMismatch, "qsgd payload of 41 bytes");
  h = CompressedPush(compression::Encoding::kQsgd);
  h.payload_bytes = 0;
  h.frames = 0;
  ExpectRejected(Decode(Encode(h)), ErrorCode::kPayloadMismatch, "qsgd push without payload");
}

// Where oldest_version would mean nothing or contradict the version, the header is refused
// by name: on a request without gradients, on a reply, above the version, of the wrong type.
TEST(Codec, OldestVersionIsRefusedWhereItMeansNothing) {
  auto with_oldest = [](Header h, FieldWriter oldest) {
    std::vector<FieldWriter> fields = WireFields(h);
    fields.push_back(std::move(oldest));
    return PackArray(fields);
  };
  ExpectRejected(Decode(with_oldest(PullRequest(), Uint(1))), ErrorCode::kMalformedHeader,
                 "oldest_version on a pull request");
  Header reply = PushRequest();
  reply.flags = kFlagReply;
  reply.payload_bytes = 0;
  reply.frames = 0;
  ExpectRejected(Decode(with_oldest(reply, Uint(1))), ErrorCode::kMalformedHeader,
                 "oldest_version on a push reply");
  Header clock = PullRequest();
  clock.op = Op::kClock;
  ExpectRejected(Decode(with_oldest(clock, Uint(1))), ErrorCode::kMalformedHeader,
                 "oldest_version on a clock request");
  ExpectRejected(Decode(with_oldest(PushRequest(), Uint(6))), ErrorCode::kMalformedHeader,
                 "oldest_version = 6 exceeds version = 5");
  ExpectRejected(Decode(with_oldest(PushRequest(), Int(-1))), ErrorCode::kMalformedHeader,
                 "oldest_version = -1 is negative");
  ExpectRejected(Decode(with_oldest(PushRequest(), Str("1"))), ErrorCode::kMalformedHeader,
                 "(oldest_version) is a string");
  ExpectRejected(Decode(with_oldest(PushRequest(), [](Packer& pk) { pk.pack_nil(); })),
                 ErrorCode::kMalformedHeader, "(oldest_version) is a nil");
}

// The largest value of every field fits the encoding and comes back unchanged, and the
// encoded header stays within kMaxHeaderBytes (receivers size buffers by it).
TEST(Codec, RoundTripsMaximumValues) {
  for (int64_t clock : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    Header h;
    h.op = Op::kPull;
    h.flags = kKnownFlags;
    h.role = Role::kEvaluator;
    h.sender = kU32Max;
    h.shard = kU32Max;
    h.request_id = kU64Max;
    h.version = kU64Max;
    h.clock = clock;
    h.dtype = DType::kFloat32;
    h.offset = kMaxElements;
    h.count = kMaxElements;
    h.payload_bytes = kMaxElements * 4;
    h.frames = kMaxPayloadFrames;
    h.code = ErrorCode::kShuttingDown;
    h.aux = kU64Max;
    h.message = std::string(kMaxErrorMessageBytes, 'm');
    const std::vector<std::byte> frame = Encode(h);
    EXPECT_LE(frame.size(), kMaxHeaderBytes);
    Header got;
    const DecodeError e = Decode(frame, &got);
    ASSERT_TRUE(e.ok()) << e.detail;
    EXPECT_EQ(got, h);
  }
}

// A message longer than kMaxErrorMessageBytes is cut, not refused: an error reply must
// always be sendable, whatever the text of the exception behind it.
TEST(Codec, ErrorMessageIsCutAtTheLimit) {
  Header h;
  h.op = Op::kError;
  h.flags = kFlagReply;
  h.code = ErrorCode::kInternal;
  std::string text;
  for (int i = 0; text.size() < 3 * kMaxErrorMessageBytes; ++i) text += std::to_string(i) + " ";
  h.message = text;
  Header got;
  ASSERT_TRUE(Decode(Encode(h), &got).ok());
  EXPECT_EQ(got.message, text.substr(0, kMaxErrorMessageBytes));

  h.message = text.substr(0, kMaxErrorMessageBytes);  // exactly at the limit: kept whole
  ASSERT_TRUE(Decode(Encode(h), &got).ok());
  EXPECT_EQ(got.message, h.message);
}

// EncodeHeader checks its REQUIRES rather than writing past a short buffer.
TEST(Codec, EncodeRefusesABufferShorterThanMaxHeaderBytes) {
  std::vector<std::byte> small(kMaxHeaderBytes - 1);
  EXPECT_THROW(EncodeHeader(PushRequest(), small), InvariantError);
}

// MessagePack lets an encoder pick any integer width, and signed formats for
// non-negative values; peers written with other libraries do both. The header means the
// same whatever the width.
TEST(Codec, AcceptsIntegersOfAnyWidthAndSignedness) {
  const Header h = PushRequest();
  for (int form = 0; form < 2; ++form) {
    std::vector<FieldWriter> fields;
    const std::vector<uint64_t> values = {h.protocol,
                                          static_cast<uint64_t>(h.op),
                                          h.flags,
                                          static_cast<uint64_t>(h.role),
                                          h.sender,
                                          h.shard,
                                          h.request_id,
                                          h.version,
                                          static_cast<uint64_t>(h.clock),
                                          static_cast<uint64_t>(h.dtype),
                                          h.offset,
                                          h.count,
                                          h.payload_bytes,
                                          h.frames,
                                          static_cast<uint64_t>(h.code),
                                          h.aux};
    for (uint64_t v : values) {
      if (form == 0) {
        fields.push_back([v](Packer& pk) { pk.pack_fix_uint64(v); });  // 0xcf, 9 bytes
      } else {
        const auto s = static_cast<int64_t>(v);
        fields.push_back([s](Packer& pk) { pk.pack_fix_int64(s); });  // 0xd3, signed
      }
    }
    fields.push_back(Str(""));
    Header got;
    const DecodeError e = Decode(PackArray(fields), &got);
    ASSERT_TRUE(e.ok()) << "form " << form << ": " << e.detail;
    EXPECT_EQ(got, h) << "form " << form;
  }
}

// ---- DecodeHeader: shape and types -----------------------------------------------------

// Every proper prefix of a valid header is "truncated" (a frame cut in transit), never
// accepted and never read past its end.
TEST(Codec, TruncatedHeaderIsRejectedAtEveryLength) {
  Header with_message = PushRequest();
  with_message.message = "a message, so that some cuts fall inside a string";
  for (const Header& h : {PushRequest(), with_message}) {
    const std::vector<std::byte> full = Encode(h);
    ASSERT_TRUE(Decode(full).ok());
    for (std::size_t n = 0; n < full.size(); ++n) {
      // An exact-size copy, so that AddressSanitizer sees any read past the end.
      const std::vector<std::byte> prefix(full.begin(), full.begin() + static_cast<long>(n));
      SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
      ExpectRejected(Decode(prefix), ErrorCode::kTruncated, "header");
    }
  }
}

// The header is an array of kHeaderFields plus at most the optional ones: a peer with
// fewer or more fields speaks another layout, whose fields must not be read as ours.
TEST(Codec, WrongArrayLengthIsRejected) {
  const std::vector<FieldWriter> fields = WireFields(PushRequest());
  std::vector<FieldWriter> shorter(fields.begin(), fields.end() - 1);
  std::vector<FieldWriter> longer = fields;
  longer.push_back(Uint(0));  // oldest_version: fine
  longer.push_back(Uint(1));  // encoding: fine
  longer.push_back(Uint(0));  // and one the protocol does not have
  ExpectRejected(Decode(PackArray(shorter)), ErrorCode::kMalformedHeader, "16 elements");
  ExpectRejected(Decode(PackArray(longer)), ErrorCode::kMalformedHeader, "20 elements");
  ExpectRejected(Decode(PackArray({})), ErrorCode::kMalformedHeader, "0 elements");
  std::vector<FieldWriter> huge(1000, Uint(1));  // above the decoder's array bound
  ExpectRejected(Decode(PackArray(huge)), ErrorCode::kMalformedHeader, "1000 elements");
}

// A header that is not an array at all.
TEST(Codec, NonArrayHeaderIsRejected) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_map(1);
  pk.pack_uint8(1);
  pk.pack_uint8(2);
  std::vector<std::byte> map(buf.size());
  std::memcpy(map.data(), buf.data(), buf.size());
  ExpectRejected(Decode(map), ErrorCode::kMalformedHeader, "expected an array");
  const std::vector<std::byte> integer = {std::byte{0x05}};
  ExpectRejected(Decode(integer), ErrorCode::kMalformedHeader, "integer");
  const std::vector<std::byte> reserved = {std::byte{0xc1}};  // never valid MessagePack
  ExpectRejected(Decode(reserved), ErrorCode::kMalformedHeader, "MessagePack");
}

// Every field, given a value of a type it never has, is rejected by name.
TEST(Codec, WrongFieldTypeIsRejectedForEveryField) {
  const Header h = PushRequest();
  const std::vector<std::pair<std::string, FieldWriter>> wrong = {
      {"nil", [](Packer& pk) { pk.pack_nil(); }},
      {"boolean", [](Packer& pk) { pk.pack_true(); }},
      // Non-integral: msgpack-c writes an integral double as an integer.
      {"float", [](Packer& pk) { pk.pack_double(1.5); }},
      {"float", [](Packer& pk) { pk.pack_float(0.5f); }},
      {"bin", [](Packer& pk) { pk.pack_bin(2); pk.pack_bin_body("ab", 2); }},
      {"array", [](Packer& pk) { pk.pack_array(1); pk.pack_uint8(1); }},
      {"map", [](Packer& pk) { pk.pack_map(0); }},
  };
  for (uint32_t i = 0; i < kHeaderFields; ++i) {
    SCOPED_TRACE(kFieldNames[i]);
    for (const auto& [type, writer] : wrong) {
      SCOPED_TRACE(type);
      ExpectRejected(Decode(WithField(h, i, writer)), ErrorCode::kMalformedHeader,
                     std::string("(") + kFieldNames[i] + ") is a");
    }
    if (i == kHeaderFields - 1) {
      ExpectRejected(Decode(WithField(h, i, Uint(1))), ErrorCode::kMalformedHeader,
                     "(message) is an integer");
    } else {
      ExpectRejected(Decode(WithField(h, i, Str("1"))), ErrorCode::kMalformedHeader,
                     std::string("(") + kFieldNames[i] + ") is a string");
    }
  }
}

// Only the clock is signed; a negative value anywhere else is refused, not wrapped.
TEST(Codec, NegativeValueIsRejectedInUnsignedFields) {
  const Header h = PushRequest();
  for (uint32_t i = 0; i + 1 < kHeaderFields; ++i) {
    SCOPED_TRACE(kFieldNames[i]);
    const DecodeError e = Decode(WithField(h, i, Int(-1)));
    if (i == 8) {  // clock
      EXPECT_TRUE(e.ok()) << e.detail;
    } else if (i == 0) {  // protocol: -1 cannot even be read as a version
      ExpectRejected(e, ErrorCode::kMalformedHeader, "protocol = -1 is negative");
    } else {
      ExpectRejected(e, ErrorCode::kMalformedHeader,
                     std::string(kFieldNames[i]) + " = -1 is negative");
    }
  }
}

// Unsigned values too wide for their field are refused, not truncated.
TEST(Codec, ValueTooWideForItsFieldIsRejected) {
  const Header h = PushRequest();
  const std::vector<std::pair<uint32_t, uint64_t>> cases = {
      {2, uint64_t{kU32Max} + 1},   // flags
      {4, uint64_t{kU32Max} + 1},   // sender
      {5, uint64_t{kU32Max} + 1},   // shard
      {13, uint64_t{kU32Max} + 1},  // frames
      {14, uint64_t{0xffff} + 1},   // code
      {8, uint64_t{1} << 63},       // clock, as an unsigned value above int64
  };
  for (const auto& [index, value] : cases) {
    SCOPED_TRACE(kFieldNames[index]);
    ExpectRejected(Decode(WithField(h, index, Uint(value))), ErrorCode::kMalformedHeader,
                   kFieldNames[index]);
  }
}

TEST(Codec, TrailingBytesAreRejected) {
  std::vector<std::byte> frame = Encode(PushRequest());
  frame.push_back(std::byte{0});
  ExpectRejected(Decode(frame), ErrorCode::kMalformedHeader, "1 trailing bytes");
}

// ---- DecodeHeader: values --------------------------------------------------------------

// Another protocol version is reported as such, even when its layout differs from ours
// (so a version mismatch never reads as "malformed").
TEST(Codec, BadProtocolVersionIsRejected) {
  for (uint64_t version : {uint64_t{0}, uint64_t{2}, kU64Max}) {
    SCOPED_TRACE(version);
    Header got;
    ExpectRejected(Decode(WithField(PushRequest(), 0, Uint(version)), &got),
                   ErrorCode::kProtocolVersion, "protocol version " + std::to_string(version));
    EXPECT_EQ(got.request_id, 77u);
  }
  ExpectRejected(Decode(PackArray({Uint(2), Str("another layout")})),
                 ErrorCode::kProtocolVersion, "protocol version 2");
}

TEST(Codec, UnknownOpIsRejected) {
  for (uint64_t op : {uint64_t{0}, uint64_t{kOpEnd}, uint64_t{255}, uint64_t{1000}}) {
    ExpectRejected(Decode(WithField(PullRequest(), 1, Uint(op))), ErrorCode::kUnknownOp,
                   "op " + std::to_string(op));
  }
  // kError exists, but only as a reply: a request with it is refused.
  Header h = PullRequest();
  h.op = Op::kError;
  ExpectRejected(Decode(Encode(h)), ErrorCode::kUnknownOp, "error");
  h.flags = kFlagReply;
  EXPECT_TRUE(Decode(Encode(h)).ok());
}

TEST(Codec, UnknownRoleIsRejected) {
  for (uint64_t role : {uint64_t{kRoleEnd}, uint64_t{200}}) {
    ExpectRejected(Decode(WithField(PullRequest(), 3, Uint(role))), ErrorCode::kMalformedHeader,
                   "role " + std::to_string(role));
  }
}

// Unknown dtypes, and known ones that are not served, get kBadDType whether or not a
// payload follows.
TEST(Codec, UnknownOrUnservedDTypeIsRejected) {
  for (uint64_t dtype : {uint64_t{kDTypeEnd}, uint64_t{77}}) {
    ExpectRejected(Decode(WithField(PushRequest(), 9, Uint(dtype))), ErrorCode::kBadDType,
                   "dtype " + std::to_string(dtype));
  }
  Header push = PushRequest();
  push.dtype = DType::kFloat64;
  push.payload_bytes = push.count * 8;
  ExpectRejected(Decode(Encode(push)), ErrorCode::kBadDType, "dtype float64");
  Header pull = PullRequest();
  pull.dtype = DType::kFloat16;
  ExpectRejected(Decode(Encode(pull)), ErrorCode::kBadDType, "dtype float16");
}

TEST(Codec, UnknownFlagsAreRejected) {
  for (uint64_t flags : {uint64_t{2}, uint64_t{kFlagReply | 4}, uint64_t{0x80000000}}) {
    ExpectRejected(Decode(WithField(PullRequest(), 2, Uint(flags))), ErrorCode::kMalformedHeader,
                   "flags");
  }
}

// payload_bytes must be exactly count elements of the dtype: anything else means the
// sender and receiver disagree about what the frames hold.
TEST(Codec, PayloadBytesMustEqualCountTimesElementSize) {
  for (uint64_t bytes : {uint64_t{15}, uint64_t{17}, uint64_t{32}, uint64_t{4}}) {
    Header h = PushRequest();
    h.payload_bytes = bytes;
    ExpectRejected(Decode(Encode(h)), ErrorCode::kPayloadMismatch,
                   "payload_bytes " + std::to_string(bytes));
  }
  // A frame announced for 2^40 elements with no bytes.
  Header h = PushRequest();
  h.count = kMaxElements;
  h.payload_bytes = 0;
  ExpectRejected(Decode(Encode(h)), ErrorCode::kPayloadMismatch,
                 "payload_bytes 0 but count " + std::to_string(kMaxElements));
}

TEST(Codec, FramesAboveTheLimitAreRejected) {
  Header h = PushRequest();
  h.frames = kMaxPayloadFrames;
  EXPECT_TRUE(Decode(Encode(h)).ok());
  h.frames = kMaxPayloadFrames + 1;
  ExpectRejected(Decode(Encode(h)), ErrorCode::kBadFrames,
                 "frames " + std::to_string(kMaxPayloadFrames + 1));
  h.frames = kU32Max;
  ExpectRejected(Decode(Encode(h)), ErrorCode::kBadFrames, "frames");
}

// Requests of ops that carry no payload must not announce one, and push requests of
// elements must carry them.
TEST(Codec, PayloadPresenceMustMatchTheOp) {
  for (Op op : {Op::kPull, Op::kRegister, Op::kHeartbeat, Op::kBarrier, Op::kClock, Op::kStop}) {
    Header h = PushRequest();  // 4 elements in one frame
    h.op = op;
    ExpectRejected(Decode(Encode(h)), ErrorCode::kBadFrames,
                   std::string(OpName(op)) + " request carries 1 payload frames");
  }
  for (Op op : {Op::kPush, Op::kPushPull}) {
    Header h = PullRequest();  // 4 elements, no payload
    h.op = op;
    ExpectRejected(Decode(Encode(h)), ErrorCode::kPayloadMismatch,
                   std::string(OpName(op)) + " of 4 elements without payload");
  }
  Header h = PushRequest();
  h.frames = 0;  // 16 bytes announced in no frame
  ExpectRejected(Decode(Encode(h)), ErrorCode::kBadFrames, "16 bytes in 0 frames");
  // A reply may carry values for any op it answers.
  h = PushRequest();
  h.op = Op::kPull;
  h.flags = kFlagReply;
  EXPECT_TRUE(Decode(Encode(h)).ok());
}

// offset and count are bounded before anyone adds them, so offset + count can never wrap
// around to pass a shard's range check.
TEST(Codec, OffsetAndCountOverflowIsRejected) {
  Header h = PullRequest();
  h.offset = kU64Max;
  h.count = 1;
  ExpectRejected(Decode(Encode(h)), ErrorCode::kOutOfRange, "offset");
  h = PullRequest();
  h.offset = kU64Max - 3;
  h.count = 4;  // offset + count == 2^64 == 0
  ExpectRejected(Decode(Encode(h)), ErrorCode::kOutOfRange, "offset");
  h = PullRequest();
  h.count = kU64Max;
  ExpectRejected(Decode(Encode(h)), ErrorCode::kTooLarge, "count");
  h = PushRequest();
  h.count = kU64Max / 4 + 1;  // count * 4 wraps to 0 ...
  h.payload_bytes = 0;        // ... which a naive check would find equal
  h.frames = 1;
  ExpectRejected(Decode(Encode(h)), ErrorCode::kTooLarge, "count");

  // Both at the bound pass the header and then fail against any real shard.
  h = PullRequest();
  h.offset = kMaxElements;
  h.count = kMaxElements;
  Header got;
  ASSERT_TRUE(Decode(Encode(h), &got).ok());
  ExpectRejected(CheckRequestForShard(got, got.shard, 1000), ErrorCode::kOutOfRange,
                 "outside shard 1 of 1000");
}

// The request id is what lets a client match an error reply to its request, so it is
// reported whenever the decoder got as far as reading it.
TEST(Codec, RequestIdIsFilledWhenReadable) {
  const Header h = PushRequest();  // request_id 77, field 6
  Header got;
  ExpectRejected(Decode(WithField(h, 1, Uint(99)), &got), ErrorCode::kUnknownOp, "op");
  EXPECT_EQ(got.request_id, 77u);
  ExpectRejected(Decode(WithField(h, 9, Str("x")), &got), ErrorCode::kMalformedHeader, "dtype");
  EXPECT_EQ(got.request_id, 77u);  // field 9 comes after the id
  ExpectRejected(Decode(WithField(h, 3, Str("x")), &got), ErrorCode::kMalformedHeader, "role");
  EXPECT_EQ(got.request_id, 0u);  // parsing stopped before the id

  // Truncations: 0 until the id was read, 77 from then on.
  const std::vector<std::byte> full = Encode(h);
  bool seen = false;
  for (std::size_t n = 0; n < full.size(); ++n) {
    const std::vector<std::byte> prefix(full.begin(), full.begin() + static_cast<long>(n));
    ASSERT_FALSE(Decode(prefix, &got).ok());
    if (seen) {
      EXPECT_EQ(got.request_id, 77u) << n;
    } else {
      EXPECT_TRUE(got.request_id == 0 || got.request_id == 77) << n;
      seen = got.request_id == 77;
    }
  }
  EXPECT_TRUE(seen);
}

// A decode overwrites everything in *out, so a reused Header carries nothing over.
TEST(Codec, DecodeResetsTheOutputHeader) {
  Header got = PushRequest();
  got.message = "stale";
  ASSERT_TRUE(Decode(Encode(PullRequest()), &got).ok());
  EXPECT_EQ(got, PullRequest());
  EXPECT_FALSE(Decode(std::vector<std::byte>{}, &got).ok());
  EXPECT_EQ(got.request_id, 0u);
  EXPECT_TRUE(got.message.empty());
}

// ---- CheckPayloadFrames ------------------------------------------------------------------

Header TwoFramePush() {
  Header h = PushRequest();
  h.frames = 2;
  return h;  // 4 elements, 16 bytes
}

TEST(PayloadFrames, AcceptsFramesThatAddUp) {
  const std::vector<std::size_t> sizes = {8, 8};
  EXPECT_TRUE(CheckPayloadFrames(TwoFramePush(), sizes, 1 << 20).ok());
  const std::vector<std::size_t> uneven = {4, 12};
  EXPECT_TRUE(CheckPayloadFrames(TwoFramePush(), uneven, 16).ok());  // exactly at the limit
}

TEST(PayloadFrames, WrongFrameCountIsRejected) {
  for (const std::vector<std::size_t>& sizes :
       {std::vector<std::size_t>{16}, std::vector<std::size_t>{4, 4, 8},
        std::vector<std::size_t>{}}) {
    ExpectRejected(CheckPayloadFrames(TwoFramePush(), sizes, 1 << 20), ErrorCode::kBadFrames,
                   "header says 2 payload frames, message has " + std::to_string(sizes.size()));
  }
}

// A frame must hold whole float32 elements: 6 bytes is one and a half.
TEST(PayloadFrames, PartialElementIsRejected) {
  const std::vector<std::size_t> sizes = {6, 10};
  ExpectRejected(CheckPayloadFrames(TwoFramePush(), sizes, 1 << 20), ErrorCode::kBadFrames,
                 "payload frame 0 has 6 bytes");
}

TEST(PayloadFrames, EmptyFrameIsRejected) {
  const std::vector<std::size_t> sizes = {16, 0};
  ExpectRejected(CheckPayloadFrames(TwoFramePush(), sizes, 1 << 20), ErrorCode::kBadFrames,
                 "payload frame 1 has 0 bytes");
}

TEST(PayloadFrames, SumMismatchIsRejected) {
  const std::vector<std::size_t> sizes = {8, 4};
  ExpectRejected(CheckPayloadFrames(TwoFramePush(), sizes, 1 << 20), ErrorCode::kPayloadMismatch,
                 "payload frames hold 12 bytes, header says 16");
}

// A claimed length above the receiver's limit is refused on the claim alone, before the
// frames are looked at: the server never sizes anything by a peer's number.
TEST(PayloadFrames, ClaimAboveTheLimitIsRejected) {
  Header h = PushRequest();
  h.count = kMaxElements;
  h.payload_bytes = kMaxElements * 4;
  ASSERT_TRUE(Decode(Encode(h)).ok());  // a consistent header ...
  const std::vector<std::size_t> sizes = {16};
  ExpectRejected(CheckPayloadFrames(h, sizes, 1 << 20), ErrorCode::kTooLarge,
                 "payload_bytes " + std::to_string(kMaxElements * 4));  // ... but too large
  ExpectRejected(CheckPayloadFrames(TwoFramePush(), std::vector<std::size_t>{8, 8}, 15),
                 ErrorCode::kTooLarge, "limit 15");
}

// ---- CheckRequestForShard ----------------------------------------------------------------

TEST(ShardCheck, WrongShardIsRejected) {
  Header h = PullRequest();  // shard 1
  ExpectRejected(CheckRequestForShard(h, 0, 100), ErrorCode::kWrongShard,
                 "request for shard 1 reached shard 0");
  EXPECT_TRUE(CheckRequestForShard(h, 1, 100).ok());
}

TEST(ShardCheck, RangeMustLieInsideTheShard) {
  struct Case {
    uint64_t offset, count;
    bool ok;
  };
  for (const Case& c : {Case{0, 10, true}, Case{6, 4, true}, Case{10, 0, true},
                        Case{0, 0, true}, Case{7, 4, false}, Case{0, 11, false},
                        Case{10, 1, false}, Case{11, 0, false}, Case{kMaxElements, 1, false}}) {
    Header h = PullRequest();
    h.offset = c.offset;
    h.count = c.count;
    const DecodeError e = CheckRequestForShard(h, h.shard, 10);
    SCOPED_TRACE(std::to_string(c.offset) + "+" + std::to_string(c.count));
    if (c.ok) {
      EXPECT_TRUE(e.ok()) << e.detail;
    } else {
      ExpectRejected(e, ErrorCode::kOutOfRange,
                     "elements [" + std::to_string(c.offset) + ", " +
                         std::to_string(c.offset + c.count) + ") outside shard 1 of 10");
    }
  }
}

// ---- DecodeMessage ---------------------------------------------------------------------

// The three steps in order, on whole messages, including one with more payload frames
// than DecodeMessage keeps on its stack.
TEST(DecodeMessage, RunsHeaderFramesAndShardChecks) {
  const std::vector<std::byte> payload(16);
  Header h = PushRequest();
  std::vector<std::byte> header = Encode(h);
  std::vector<std::span<const std::byte>> frames = {header, payload};
  Header got;
  EXPECT_TRUE(DecodeMessage(frames, &got, 1 << 20, 1, 100).ok());
  EXPECT_EQ(got, h);
  ExpectRejected(DecodeMessage(frames, &got, 1 << 20, 0, 100), ErrorCode::kWrongShard, "shard");
  EXPECT_TRUE(DecodeMessage(frames, &got, 1 << 20, 0, -1).ok());  // no shard checks
  ExpectRejected(DecodeMessage(frames, &got, 1 << 20, 1, 5), ErrorCode::kOutOfRange, "of 5");
  ExpectRejected(DecodeMessage(std::span(frames).first(1), &got, 1 << 20, 1, 100),
                 ErrorCode::kBadFrames, "message has 0");
  ExpectRejected(DecodeMessage({}, &got, 1 << 20, 1, 100), ErrorCode::kTruncated, "no frames");

  h.count = 100;
  h.payload_bytes = 400;
  h.frames = 100;
  header = Encode(h);
  const std::vector<std::byte> one(4);
  frames.assign(1, header);
  for (int i = 0; i < 100; ++i) frames.push_back(one);
  EXPECT_TRUE(DecodeMessage(frames, &got, 1 << 20, 1, 200).ok());
  frames.push_back(one);
  ExpectRejected(DecodeMessage(frames, &got, 1 << 20, 1, 200), ErrorCode::kBadFrames,
                 "message has 101");
}

TEST(Names, EveryEnumValueHasAName) {
  for (uint32_t op = 1; op < kOpEnd; ++op) {
    EXPECT_NE(OpName(static_cast<Op>(op)), "unknown") << op;
  }
  for (uint32_t role = 1; role < kRoleEnd; ++role) {
    EXPECT_NE(RoleName(static_cast<Role>(role)), "unknown") << role;
  }
  for (uint32_t dtype = 0; dtype < kDTypeEnd; ++dtype) {
    EXPECT_NE(DTypeName(static_cast<DType>(dtype)), "unknown") << dtype;
  }
  for (uint16_t code = 0; code <= static_cast<uint16_t>(ErrorCode::kShuttingDown); ++code) {
    EXPECT_THAT(ErrorCodeName(static_cast<ErrorCode>(code)), Not(HasSubstr("code "))) << code;
  }
  EXPECT_EQ(ErrorCodeName(static_cast<ErrorCode>(999)), "code 999");
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kNone), 0u);
}

}  // namespace
}  // namespace asgd::transport
