// The wire codec's checks of values (ps/message.h), after message_test.cc's round
// trips and shapes: versions, ops, roles, dtypes, flags, payload sizes and limits, offsets
// and counts, the payload frames, the shard's range, DecodeMessage, and enum names. Each
// rejection has the right ErrorCode and a one-line reason naming the field.
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "ps/message.h"
#include "tests/ps/codec_test_util.h"

namespace asgd::ps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace codec_test;  // the helpers of codec_test_util.h

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
  ExpectRejected(Decode(PackArray({Uint(2), Str("another layout")})), ErrorCode::kProtocolVersion,
                 "protocol version 2");
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
  for (uint64_t flags : {uint64_t{16}, uint64_t{kFlagReply | 32}, uint64_t{0x80000000}}) {
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
  for (const Case& c :
       {Case{0, 10, true}, Case{6, 4, true}, Case{10, 0, true}, Case{0, 0, true}, Case{7, 4, false},
        Case{0, 11, false}, Case{10, 1, false}, Case{11, 0, false}, Case{kMaxElements, 1, false}}) {
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
}  // namespace asgd::ps
