// The wire codec (ps/message.h): what one peer encodes, the other decodes field
// for field; and every malformed, inconsistent or hostile header is rejected with the
// right ErrorCode and a one-line reason naming the field, before a payload byte is
// trusted (docs/architecture.md#wire-protocol).
#include "ps/message.h"

#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "compression/compressor.h"
#include "core/error.h"
#include "core/rng.h"
#include "tests/ps/codec_test_util.h"

namespace asgd::ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace codec_test;  // the helpers of codec_test_util.h

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
  for (Op op : {Op::kPush, Op::kPull, Op::kPushPull, Op::kRegister, Op::kHeartbeat, Op::kBarrier,
                Op::kClock, Op::kStop, Op::kCheckpoint}) {
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
    EXPECT_EQ(plain[0], std::byte{0xdc});           // array16 ...
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

// Every compressor's largest encoding fits MaxEncodedBytes: topk keeping everything, qsgd
// at the widest codes with a norm per element (bucket 1), terngrad with a piece per
// element (a tensor per element), at counts around the word boundaries.
TEST(Codec, EveryCompressorsLargestEncodingFits) {
  for (uint64_t n : {1, 2, 3, 31, 32, 33, 63, 64, 65, 100, 1000}) {
    std::vector<float> x(n);
    for (uint64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
    const std::vector<int64_t> pieces(n, 1);
    compression::CompressionOptions o;
    o.ratio = 1.0;
    o.levels = static_cast<int>(compression::kMaxQsgdLevels);
    o.bucket = 1;
    for (const char* name : {"topk", "randk", "qsgd", "sign", "terngrad"}) {
      o.name = name;
      Rng rng(1);
      compression::Encoded e;
      compression::NewCompressor(o)->Encode(x, rng, &e, pieces);
      EXPECT_LE(static_cast<uint64_t>(e.bytes()), MaxEncodedBytes(n)) << name << " n = " << n;
    }
  }
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
  ExpectRejected(Decode(Encode(h)), ErrorCode::kPayloadMismatch, "qsgd payload of 53 bytes");
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
    h.flags = kFlagReply;  // kFlagMoreChunks belongs on push requests: below
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

// A chunk of a chunked push (message.h, "Chunked pushes") round-trips; the flag is
// refused anywhere else, and a chunk must leave more of its push to come.
// A chunk of 256 elements at offset 100 with 1000 elements of its push left.
Header Chunk(Op op, uint32_t flags, uint32_t frames) {
  Header h;
  h.op = op;
  h.flags = flags;
  h.role = Role::kWorker;
  h.request_id = 9;
  h.dtype = DType::kFloat32;
  h.offset = 100;
  h.count = 256;
  h.payload_bytes = 256 * 4;
  h.frames = frames;
  h.aux = 1000;  // elements of the push from offset 100 on
  return h;
}

TEST(Codec, ChunkFlagOnlyOnDensePushChunks) {
  const Header h = Chunk(Op::kPushPull, kFlagMoreChunks, 2);
  Header got;
  DecodeError e = Decode(Encode(h), &got);
  ASSERT_TRUE(e.ok()) << e.detail;
  EXPECT_EQ(got, h);

  Header pull = h;
  pull.op = Op::kPull;
  pull.payload_bytes = 0;
  pull.frames = 0;
  pull.dtype = DType::kNone;
  e = Decode(Encode(pull), &got);
  EXPECT_EQ(e.code, ErrorCode::kMalformedHeader);
  EXPECT_NE(e.detail.find("more_chunks on a pull request"), std::string::npos) << e.detail;

  Header reply = h;  // a push's reply carries no values, so it has no chunks
  reply.op = Op::kPush;
  reply.flags |= kFlagReply;
  reply.payload_bytes = 0;
  reply.frames = 0;
  reply.dtype = DType::kNone;
  e = Decode(Encode(reply), &got);
  EXPECT_EQ(e.code, ErrorCode::kMalformedHeader) << e.detail;
  EXPECT_NE(e.detail.find("more_chunks on a push reply"), std::string::npos) << e.detail;

  Header compressed = h;
  compressed.encoding = compression::Encoding::kSign;
  compressed.oldest_version = 0;
  compressed.frames = compression::kEncodedFrames;
  e = Decode(Encode(compressed), &got);
  EXPECT_EQ(e.code, ErrorCode::kMalformedHeader);
  EXPECT_NE(e.detail.find("compressed"), std::string::npos) << e.detail;

  for (uint64_t left : {uint64_t{0}, uint64_t{255}, uint64_t{256}}) {
    Header last = h;
    last.aux = left;
    e = Decode(Encode(last), &got);
    EXPECT_EQ(e.code, ErrorCode::kPayloadMismatch) << left;
    EXPECT_NE(e.detail.find("expected more than 256"), std::string::npos) << e.detail;
  }
}

// kFlagLaterChunk marks every chunk but the first: it round-trips with and without
// kFlagMoreChunks, only on dense push requests, and a last chunk's aux is its count.
TEST(Codec, LaterChunkFlagOnlyOnDensePushChunks) {
  const Header h = Chunk(Op::kPush, kFlagMoreChunks | kFlagLaterChunk, 1);
  Header got;
  DecodeError e = Decode(Encode(h), &got);
  ASSERT_TRUE(e.ok()) << e.detail;
  EXPECT_EQ(got, h);

  Header last = h;
  last.flags = kFlagLaterChunk;
  last.aux = 256;
  e = Decode(Encode(last), &got);
  ASSERT_TRUE(e.ok()) << e.detail;
  EXPECT_EQ(got, last);
  last.aux = 1000;  // a last chunk with more of its push left
  e = Decode(Encode(last), &got);
  EXPECT_EQ(e.code, ErrorCode::kPayloadMismatch);
  EXPECT_NE(e.detail.find("expected 256"), std::string::npos) << e.detail;

  Header pull;
  pull.op = Op::kPull;
  pull.flags = kFlagLaterChunk;
  pull.count = 256;
  e = Decode(Encode(pull), &got);
  EXPECT_EQ(e.code, ErrorCode::kMalformedHeader);
  EXPECT_NE(e.detail.find("later_chunk on a pull request"), std::string::npos) << e.detail;

  Header reply = last;
  reply.aux = 256;
  reply.flags |= kFlagReply;
  e = Decode(Encode(reply), &got);
  EXPECT_EQ(e.code, ErrorCode::kMalformedHeader) << e.detail;
}

// Chunked replies (message.h): a pull or push-pull request may ask for them, and a pull
// or push-pull reply may be a chunk, with any aux (push-pull: the push's outcome); the
// flags are refused anywhere else.
TEST(Codec, ChunkedReplyFlagsOnlyOnValueRequestsAndReplies) {
  Header got;
  for (Op op : {Op::kPull, Op::kPushPull}) {
    Header request = op == Op::kPull ? Header{} : Chunk(op, 0, 1);
    request.op = op;
    request.flags = kFlagChunkedReply;
    request.count = 256;
    DecodeError e = Decode(Encode(request), &got);
    ASSERT_TRUE(e.ok()) << OpName(op) << ": " << e.detail;
    EXPECT_EQ(got, request);

    for (uint32_t flags : {kFlagMoreChunks, kFlagMoreChunks | kFlagLaterChunk, kFlagLaterChunk}) {
      Header chunk = Chunk(op, kFlagReply | flags, 1);
      chunk.aux = static_cast<uint64_t>(PushOutcome::kDropped);
      e = Decode(Encode(chunk), &got);
      ASSERT_TRUE(e.ok()) << OpName(op) << " flags " << flags << ": " << e.detail;
      EXPECT_EQ(got, chunk);
    }
    Header asked_back = Chunk(op, kFlagReply | kFlagChunkedReply, 1);
    e = Decode(Encode(asked_back), &got);
    EXPECT_EQ(e.code, ErrorCode::kMalformedHeader);
    EXPECT_NE(e.detail.find("chunked_reply on a " + std::string(OpName(op)) + " reply"),
              std::string::npos)
        << e.detail;
  }
  for (Op op : {Op::kPush, Op::kClock, Op::kBarrier, Op::kHeartbeat}) {
    Header request = Chunk(Op::kPush, kFlagChunkedReply, 1);
    request.op = op;
    if (op != Op::kPush) {
      request.payload_bytes = 0;
      request.frames = 0;
      request.dtype = DType::kNone;
      request.aux = 1;
    }
    const DecodeError e = Decode(Encode(request), &got);
    EXPECT_EQ(e.code, ErrorCode::kMalformedHeader) << OpName(op);
    EXPECT_NE(e.detail.find("expected only on pull and push_pull requests"), std::string::npos)
        << e.detail;
  }
  Header ack;  // a chunk of a reply that carries no values
  ack.op = Op::kClock;
  ack.flags = kFlagReply | kFlagLaterChunk;
  const DecodeError e = Decode(Encode(ack), &got);
  EXPECT_EQ(e.code, ErrorCode::kMalformedHeader);
  EXPECT_NE(e.detail.find("later_chunk on a clock reply"), std::string::npos) << e.detail;
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
      {"bin",
       [](Packer& pk) {
         pk.pack_bin(2);
         pk.pack_bin_body("ab", 2);
       }},
      {"array",
       [](Packer& pk) {
         pk.pack_array(1);
         pk.pack_uint8(1);
       }},
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

}  // namespace
}  // namespace asgd::ps
