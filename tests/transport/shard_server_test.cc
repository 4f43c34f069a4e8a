// A live ShardServer (the default add rule) fed malformed requests by a raw ZeroMQ DEALER
// socket, not by PsClient, over inproc:// and over tcp:// on loopback. Every bad message
// must get an error reply with the right code (echoing the request id whenever the
// decoder could read it), be counted exactly once under that code, leave the shard's
// values and version untouched, and leave the server serving: a valid push and pull on the
// same socket afterwards are exact (docs/architecture.md#wire-protocol, shard_server.h
// "Bad input").
#include "transport/shard_server.h"

#include <atomic>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "compression/compressor.h"
#include "core/check.h"
#include "core/rng.h"
#include "ps/message.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

using ps::DecodeError;
using ps::DecodeHeader;
using ps::DType;
using ps::EncodeHeader;
using ps::ErrorCode;
using ps::ErrorCodeName;
using ps::Header;
using ps::kFlagReply;
using ps::kHeaderFields;
using ps::kMaxHeaderBytes;
using ps::kMaxPayloadFrames;
using ps::NewAddRule;
using ps::Op;
using ps::OpName;
using ps::PushOutcome;
using ps::Role;
using ps::ShardSnapshot;
namespace {

using Frame = std::vector<std::byte>;
using Frames = std::vector<Frame>;

constexpr uint32_t kShard = 1;  // not 0, so that a zeroed shard field is a wrong shard
constexpr int64_t kShardSize = 16;
constexpr uint64_t kRequestId = 77;
// Every receive of the test socket gives up after this; no test can hang on a lost reply.
constexpr int kReceiveTimeoutMs = 5000;
// The server's default max_payload_bytes for this shard: max(16 * 4, 4096).
constexpr uint64_t kMaxPayloadBytes = 4096;

// ---- Messages --------------------------------------------------------------------------

Frame Encode(const Header& h) {
  Frame buf(kMaxHeaderBytes);
  buf.resize(EncodeHeader(h, buf));
  return buf;
}

Frame Floats(std::initializer_list<float> values) {
  Frame f(values.size() * sizeof(float));
  std::memcpy(f.data(), values.begin(), f.size());
  return f;
}

Frame Prefix(const Frame& f, std::size_t n) {
  return Frame(f.begin(), f.begin() + static_cast<long>(n));
}

Frame Raw(std::initializer_list<unsigned> bytes) {
  Frame f;
  for (unsigned b : bytes) f.push_back(static_cast<std::byte>(b));
  return f;
}

Frame Text(std::string_view s) {
  Frame f(s.size());
  std::memcpy(f.data(), s.data(), s.size());
  return f;
}

// A valid push of count float32 elements at offset, announced in `frames` payload frames.
Header Push(uint64_t offset, uint64_t count, uint32_t frames, uint64_t request_id = kRequestId) {
  Header h;
  h.op = Op::kPush;
  h.role = Role::kWorker;
  h.sender = 3;
  h.shard = kShard;
  h.request_id = request_id;
  h.clock = 5;
  h.dtype = DType::kFloat32;
  h.offset = offset;
  h.count = count;
  h.payload_bytes = count * sizeof(float);
  h.frames = frames;
  return h;
}

Header Pull(uint64_t offset, uint64_t count, uint64_t request_id = kRequestId) {
  Header h = Push(offset, count, 0, request_id);
  h.op = Op::kPull;
  h.payload_bytes = 0;
  return h;
}

// x compressed by `name` (ratio 0.25 for topk and randk), drawing from Rng(seed).
compression::Encoded Compressed(const std::string& name, std::span<const float> x, uint64_t seed) {
  compression::CompressionOptions o;
  o.name = name;
  o.ratio = 0.25;
  Rng rng(seed);
  compression::Encoded e;
  compression::NewCompressor(o)->Encode(x, rng, &e);
  return e;
}

// The header of a push of the whole shard carrying e's frames, labelled `label`.
Header CompressedHeader(const compression::Encoded& e, compression::Encoding label,
                        uint64_t request_id = kRequestId) {
  Header h = Push(0, kShardSize, static_cast<uint32_t>(e.frames.size()), request_id);
  h.encoding = label;
  h.payload_bytes = static_cast<uint64_t>(e.bytes());
  return h;
}

// That header and e's frames, as the DEALER sends them.
Frames CompressedMessage(const compression::Encoded& e, compression::Encoding label,
                         uint64_t request_id = kRequestId) {
  Frames f = {Encode(CompressedHeader(e, label, request_id))};
  for (const auto& frame : e.frames) f.push_back(frame);
  return f;
}

// One kind of malformed request.
struct BadInput {
  std::string name;
  ErrorCode code;       // the error reply's code
  uint64_t request_id;  // echoed in the reply: kRequestId, or 0 where it cannot be read
  Frames frames;        // what the DEALER sends (the ROUTER adds the routing frame)
};

void PrintTo(const BadInput& c, std::ostream* os) { *os << c.name; }

std::vector<BadInput> BadInputs() {
  std::vector<BadInput> cases;
  auto add = [&cases](std::string name, ErrorCode code, uint64_t request_id, Frames frames) {
    cases.push_back({std::move(name), code, request_id, std::move(frames)});
  };
  const Frame push = Encode(Push(0, 4, 1));  // 4 elements, one frame
  const Frame four = Floats({1, 2, 3, 4});

  // Header frames that are not (whole) headers.
  add("TruncatedHeaderBeforeRequestId", ErrorCode::kTruncated, 0, {Prefix(push, 3), four});
  add("TruncatedHeaderAfterRequestId", ErrorCode::kTruncated, kRequestId,
      {Prefix(push, push.size() - 1), four});
  // A DEALER cannot send a message of no frames (nor one without a header frame: the
  // ROUTER supplies the routing frame); the least it can send is one empty frame.
  add("EmptyMessage", ErrorCode::kTruncated, 0, {Frame{}});
  add("NotMessagePack", ErrorCode::kMalformedHeader, 0, {Raw({0xc1, 0xde, 0xad, 0xbe, 0xef})});
  add("HttpRequest", ErrorCode::kMalformedHeader, 0, {Text("GET / HTTP/1.1\r\n\r\n")});
  {
    Frame nils = Raw({0xdc, 0x00, kHeaderFields});  // an array (array16) of 17 nils
    nils.resize(nils.size() + kHeaderFields, std::byte{0xc0});
    add("ArrayOfNils", ErrorCode::kMalformedHeader, 0, {nils});
  }
  {
    Frame h = push;  // the last byte is the empty message string (0xa0)
    h.back() = std::byte{0x00};
    add("MessageFieldIsAnInteger", ErrorCode::kMalformedHeader, kRequestId, {h, four});
  }
  {
    Header h = Push(0, 4, 1);
    h.protocol = 2;
    add("OtherProtocolVersion", ErrorCode::kProtocolVersion, kRequestId, {Encode(h), four});
  }

  // Payload lengths that disagree with the header, or frames that disagree with it.
  {
    Header h = Push(0, 4, 1);
    h.payload_bytes = 20;
    add("PayloadBytesDisagreeWithCount", ErrorCode::kPayloadMismatch, kRequestId,
        {Encode(h), Floats({1, 2, 3, 4, 5})});
  }
  add("PayloadFrameShorterThanHeader", ErrorCode::kPayloadMismatch, kRequestId,
      {push, Floats({1, 2, 3})});
  add("PayloadFrameLongerThanHeader", ErrorCode::kPayloadMismatch, kRequestId,
      {push, Floats({1, 2, 3, 4, 5})});
  add("FewerFramesThanHeader", ErrorCode::kBadFrames, kRequestId, {Encode(Push(0, 4, 2)), four});
  add("MoreFramesThanHeader", ErrorCode::kBadFrames, kRequestId,
      {push, Floats({1, 2}), Floats({3, 4})});
  {
    Header h = Push(0, 4, 0);
    h.payload_bytes = 0;
    add("PushWithoutPayload", ErrorCode::kPayloadMismatch, kRequestId, {Encode(h)});
  }
  {
    Header h = Push(0, 4, 1);
    h.op = Op::kPull;
    add("PullWithPayload", ErrorCode::kBadFrames, kRequestId, {Encode(h), four});
  }
  {
    // More frames than the server keeps (kMaxPayloadFrames + 2 with the routing frame):
    // it drains the rest and refuses the message.
    Frames frames = {push};
    for (uint32_t i = 0; i < kMaxPayloadFrames + 4; ++i) frames.push_back(Floats({1}));
    add("TooManyFrames", ErrorCode::kBadFrames, kRequestId, std::move(frames));
  }
  add("PartialElementFrames", ErrorCode::kBadFrames, kRequestId,
      {Encode(Push(0, 4, 2)), Prefix(Floats({1, 2}), 6), Prefix(Floats({3, 4, 5}), 10)});
  add("EmptyPayloadFrame", ErrorCode::kBadFrames, kRequestId,
      {Encode(Push(0, 4, 2)), four, Frame{}});

  // Ops the server does not serve.
  for (uint32_t op : {0u, 99u}) {
    Header h = Pull(0, 4);
    h.op = static_cast<Op>(op);
    add(::asgd::internal::StrCat("UnknownOp", op), ErrorCode::kUnknownOp, kRequestId, {Encode(h)});
  }
  {
    Header h = Pull(0, 4);
    h.op = Op::kError;
    add("ErrorOpAsRequest", ErrorCode::kUnknownOp, kRequestId, {Encode(h)});
    h.op = Op::kCheckpoint;
    add("ReservedOpCheckpoint", ErrorCode::kUnknownOp, kRequestId, {Encode(h)});
  }
  {
    Header h = Push(0, 4, 1);
    h.flags = kFlagReply;
    add("ReplyAsRequest", ErrorCode::kUnknownOp, kRequestId, {Encode(h), four});
  }

  // Requests for elements this shard does not own.
  {
    Header h = Push(0, 4, 1);
    h.shard = kShard + 1;
    add("WrongShard", ErrorCode::kWrongShard, kRequestId, {Encode(h), four});
  }
  add("PullPastTheEnd", ErrorCode::kOutOfRange, kRequestId, {Encode(Pull(kShardSize, 1))});
  add("PushStraddlingTheEnd", ErrorCode::kOutOfRange, kRequestId,
      {Encode(Push(kShardSize - 2, 4, 1)), four});
  add("OffsetAboveDecoderBound", ErrorCode::kOutOfRange, kRequestId,
      {Encode(Pull(uint64_t{1} << 41, 1))});

  // Element types other than float32.
  {
    Header h = Push(0, 2, 1);
    h.dtype = DType::kFloat64;
    h.payload_bytes = 16;
    add("Float64Payload", ErrorCode::kBadDType, kRequestId, {Encode(h), four});
    h = Push(0, 4, 1);
    h.dtype = static_cast<DType>(9);
    add("UnknownDType", ErrorCode::kBadDType, kRequestId, {Encode(h), four});
  }

  // Claims far above what the server accepts; the frames are small, only the claim is big.
  add("HugeClaimedLength", ErrorCode::kTooLarge, kRequestId,
      {Encode(Push(0, kMaxPayloadBytes * 256, 1)), four});
  add("CountAboveDecoderBound", ErrorCode::kTooLarge, kRequestId,
      {Encode(Push(0, uint64_t{1} << 41, 1)), four});

  // Values that must never reach the shard; the bad element sits in the second frame, after
  // a good one, so a partial apply would show.
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  add("NaNPushPayload", ErrorCode::kNonFinite, kRequestId,
      {Encode(Push(0, 4, 2)), Floats({1, 2}), Floats({kNaN, 4})});
  {
    Header h = Push(4, 4, 2);
    h.op = Op::kPushPull;
    add("InfPushPullPayload", ErrorCode::kNonFinite, kRequestId,
        {Encode(h), Floats({1, 2}), Floats({3, -kInf})});
  }

  // Checks the server makes after decoding.
  {
    Header h = Pull(0, 0);
    h.op = Op::kBarrier;
    h.aux = 0;
    add("BarrierOfNoParticipants", ErrorCode::kMalformedHeader, kRequestId, {Encode(h)});
  }
  // A push of nothing would change no value, yet count as an update and advance the
  // version (issue 22 item 5).
  add("PushOfZeroElements", ErrorCode::kMalformedHeader, kRequestId, {Encode(Push(3, 0, 0))});
  {
    Header h = Push(0, 0, 0);
    h.op = Op::kPushPull;
    add("PushPullOfZeroElements", ErrorCode::kMalformedHeader, kRequestId, {Encode(h)});
  }

  // Compressed pushes (issue 17): the header and the frames are validated before the
  // shard decodes, and the decoder validates every field before anything is applied.
  {
    const std::vector<float> x = {1, -2, 3, -4, 5, -6, 7, -8, 1, 1, 1, 1, 1, 1, 1, 1};
    auto encoded = [&x](const std::string& name) { return Compressed(name, x, 1); };
    auto header = [](const compression::Encoded& e, compression::Encoding label) {
      return CompressedHeader(e, label);
    };
    auto message = [](const compression::Encoded& e, compression::Encoding label) {
      return CompressedMessage(e, label);
    };
    const compression::Encoded sign = encoded("sign");
    const compression::Encoded qsgd = encoded("qsgd");
    const compression::Encoded topk = encoded("topk");
    compression::Encoded cut = sign;
    cut.frames[1].resize(4);
    add("CompressedPushTruncatedCodes", ErrorCode::kBadEncoding, kRequestId,
        message(cut, compression::Encoding::kSign));
    add("CompressedPushMislabelled", ErrorCode::kBadEncoding, kRequestId,
        message(qsgd, compression::Encoding::kSign));
    compression::Encoded out_of_range = topk;
    const uint32_t past_end = kShardSize;
    std::memcpy(out_of_range.frames[0].data() + 4 * 3, &past_end, 4);
    add("CompressedPushIndexOutsideTheShard", ErrorCode::kBadEncoding, kRequestId,
        message(out_of_range, compression::Encoding::kTopK));
    compression::Encoded nan_scale = sign;
    std::memcpy(nan_scale.frames[0].data(), &kNaN, 4);
    add("CompressedPushNaNScale", ErrorCode::kBadEncoding, kRequestId,
        message(nan_scale, compression::Encoding::kSign));
    compression::Encoded nan_value = topk;
    std::memcpy(nan_value.frames[1].data(), &kNaN, 4);
    add("CompressedPushDecodesToNaN", ErrorCode::kNonFinite, kRequestId,
        message(nan_value, compression::Encoding::kTopK));
    Frames three = message(sign, compression::Encoding::kSign);
    three.push_back(Floats({1}));
    add("CompressedPushInThreeFrames", ErrorCode::kBadFrames, kRequestId, three);
    Frames unknown = message(sign, compression::Encoding::kSign);
    {
      Header h = header(sign, compression::Encoding::kSign);
      h.encoding = static_cast<compression::Encoding>(compression::kEncodingEnd);
      unknown[0] = Encode(h);
    }
    add("CompressedPushUnknownEncoding", ErrorCode::kBadEncoding, kRequestId, unknown);
    Frames payload_lie = message(sign, compression::Encoding::kSign);
    {
      Header h = header(sign, compression::Encoding::kSign);
      h.payload_bytes += 4;
      payload_lie[0] = Encode(h);
    }
    add("CompressedPushPayloadBytesDisagree", ErrorCode::kPayloadMismatch, kRequestId, payload_lie);
  }
  return cases;
}

// ---- A live shard and a raw socket -------------------------------------------------------

// Small integers, so every sum in the tests is exact in float32.
std::vector<float> InitialValues() {
  std::vector<float> v(kShardSize);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  return v;
}

std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> out;
  out.reserve(values.size());
  for (float f : values) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

// Members in this order, so that the socket closes before the server stops and both
// before the context ends.
struct LiveShard {
  std::shared_ptr<Context> context = NewContext();
  std::unique_ptr<ShardServer> server;
  zmq::socket_t socket;

  // ack_before_add_bytes: ServerOptions' (the test shard of 64 bytes is below the default).
  explicit LiveShard(const std::string& scheme, uint64_t ack_before_add_bytes = uint64_t{256} << 10) {
    static std::atomic<int> unique{0};
    ServerOptions options;
    options.shard = kShard;
    options.ack_before_add_bytes = ack_before_add_bytes;
    options.endpoint = scheme == "inproc"
                           ? ::asgd::internal::StrCat("inproc://shard-server-test-", unique++)
                           : std::string("tcp://127.0.0.1:*");
    server = std::make_unique<ShardServer>(context, options, InitialValues(), NewAddRule());
    server->Start();
    socket = zmq::socket_t(context->zmq_context(), zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::rcvtimeo, kReceiveTimeoutMs);
    socket.set(zmq::sockopt::sndtimeo, kReceiveTimeoutMs);
    socket.connect(server->endpoint());
  }

  // Sends frames as one multipart message; false if the send timed out.
  bool Send(const Frames& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      zmq::message_t m(frames[i].data(), frames[i].size());
      const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      internal::AnnotateSend();  // after writing the frame (see zmq_util.h)
      if (!socket.send(m, flags)) return false;
    }
    return true;
  }

  // One whole reply, or nullopt when none came within kReceiveTimeoutMs.
  std::optional<Frames> Receive() {
    Frames out;
    zmq::message_t m;
    do {
      if (!socket.recv(m)) return std::nullopt;
      internal::AnnotateReceive();  // before reading what the server wrote
      const auto* p = static_cast<const std::byte*>(m.data());
      out.emplace_back(p, p + m.size());
    } while (m.more());
    return out;
  }
};

// Decodes a reply's header frame; fails the test if it does not decode.
Header ReplyHeader(const Frames& reply) {
  Header h;
  EXPECT_FALSE(reply.empty());
  if (reply.empty()) return h;
  const DecodeError e = DecodeHeader(reply[0], &h);
  EXPECT_TRUE(e.ok()) << "reply header does not decode: " << e.detail;
  return h;
}

// Sends one bad input and checks (a) the error reply, (b) the counters, (c) the shard.
void ExpectRefusedHarmlessly(LiveShard& shard, const BadInput& c) {
  SCOPED_TRACE(c.name);
  const ShardStats before = shard.server->stats();
  const ShardSnapshot snapshot_before = shard.server->Snapshot();

  ASSERT_TRUE(shard.Send(c.frames)) << "send timed out";
  const std::optional<Frames> reply = shard.Receive();
  ASSERT_TRUE(reply.has_value()) << "no reply within " << kReceiveTimeoutMs << " ms";
  ASSERT_EQ(reply->size(), 1u) << "an error reply has no payload";
  const Header h = ReplyHeader(*reply);
  EXPECT_EQ(h.op, Op::kError) << OpName(h.op);
  EXPECT_TRUE(h.is_reply());
  EXPECT_EQ(h.code, c.code) << "got " << ErrorCodeName(h.code) << ": " << h.message;
  EXPECT_EQ(h.request_id, c.request_id);
  EXPECT_EQ(h.shard, kShard);
  EXPECT_EQ(h.version, snapshot_before.version);
  EXPECT_FALSE(h.message.empty());
  EXPECT_EQ(h.message.find('\n'), std::string::npos) << h.message;

  const ShardStats after = shard.server->stats();
  EXPECT_EQ(after.requests, before.requests + 1);
  EXPECT_EQ(after.errors, before.errors + 1);
  EXPECT_EQ(after.errors_for(c.code), before.errors_for(c.code) + 1);
  for (std::size_t i = 0; i < after.errors_by_code.size(); ++i) {
    if (i == static_cast<std::size_t>(c.code)) continue;
    EXPECT_EQ(after.errors_by_code[i], before.errors_by_code[i])
        << ErrorCodeName(static_cast<ErrorCode>(i));
  }
  EXPECT_EQ(after.pushes_applied + after.pushes_accepted + after.pushes_dropped,
            before.pushes_applied + before.pushes_accepted + before.pushes_dropped);
  EXPECT_EQ(after.pulls, before.pulls);

  const ShardSnapshot snapshot_after = shard.server->Snapshot();
  EXPECT_EQ(snapshot_after.version, snapshot_before.version);
  EXPECT_EQ(Bits(snapshot_after.values), Bits(snapshot_before.values));
  EXPECT_EQ(snapshot_after.rule_state, snapshot_before.rule_state);
}

// (d) A valid push (two frames) and a pull on the same socket: the pull reads exactly
// what the shard held plus the push, at the next version.
void ExpectServing(LiveShard& shard) {
  const ShardSnapshot before = shard.server->Snapshot();
  std::vector<float> delta(kShardSize);
  for (std::size_t i = 0; i < delta.size(); ++i)
    delta[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
  Frame first(8 * sizeof(float)), second(8 * sizeof(float));
  std::memcpy(first.data(), delta.data(), first.size());
  std::memcpy(second.data(), delta.data() + 8, second.size());

  ASSERT_TRUE(shard.Send({Encode(Push(0, kShardSize, 2, 1001)), first, second}));
  std::optional<Frames> reply = shard.Receive();
  ASSERT_TRUE(reply.has_value()) << "no push reply";
  ASSERT_EQ(reply->size(), 1u);
  Header h = ReplyHeader(*reply);
  EXPECT_EQ(h.op, Op::kPush) << h.message;
  EXPECT_TRUE(h.is_reply());
  EXPECT_EQ(h.code, ErrorCode::kNone);
  EXPECT_EQ(h.request_id, 1001u);
  EXPECT_EQ(h.version, before.version + 1);
  EXPECT_EQ(h.aux, static_cast<uint64_t>(PushOutcome::kApplied));

  ASSERT_TRUE(shard.Send({Encode(Pull(0, kShardSize, 1002))}));
  reply = shard.Receive();
  ASSERT_TRUE(reply.has_value()) << "no pull reply";
  ASSERT_EQ(reply->size(), 2u);
  h = ReplyHeader(*reply);
  EXPECT_EQ(h.op, Op::kPull) << h.message;
  EXPECT_EQ(h.request_id, 1002u);
  EXPECT_EQ(h.version, before.version + 1);
  EXPECT_EQ(h.dtype, DType::kFloat32);
  EXPECT_EQ(h.count, static_cast<uint64_t>(kShardSize));
  EXPECT_EQ(h.frames, 1u);
  ASSERT_EQ((*reply)[1].size(), kShardSize * sizeof(float));
  std::vector<float> got(kShardSize);
  std::memcpy(got.data(), (*reply)[1].data(), (*reply)[1].size());
  std::vector<float> expected = before.values;
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += delta[i];
  EXPECT_EQ(Bits(got), Bits(expected));
  EXPECT_EQ(Bits(shard.server->Snapshot().values), Bits(expected));
}

// ---- Tests -------------------------------------------------------------------------------

const std::vector<std::string> kSchemes = {"inproc", "tcp"};

std::string SchemeName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

std::string BadInputCaseName(
    const ::testing::TestParamInfo<std::tuple<std::string, BadInput>>& info) {
  return ::asgd::internal::StrCat(std::get<0>(info.param), "_", std::get<1>(info.param).name);
}

class ShardServerBadInput : public ::testing::TestWithParam<std::tuple<std::string, BadInput>> {};

// One bad input on a fresh server: refused, counted once, harmless; then still serving.
TEST_P(ShardServerBadInput, IsRefusedCountedAndHarmless) {
  const auto& [scheme, c] = GetParam();
  LiveShard shard(scheme);
  ExpectRefusedHarmlessly(shard, c);
  if (HasFatalFailure()) return;
  // Unchanged means unchanged from the start, too.
  const ShardSnapshot s = shard.server->Snapshot();
  EXPECT_EQ(s.version, 0u);
  EXPECT_EQ(Bits(s.values), Bits(InitialValues()));
  ExpectServing(shard);
}

INSTANTIATE_TEST_SUITE_P(Endpoints, ShardServerBadInput,
                         ::testing::Combine(::testing::ValuesIn(kSchemes),
                                            ::testing::ValuesIn(BadInputs())),
                         BadInputCaseName);

class ShardServerCompressed : public ::testing::TestWithParam<std::string> {};

// A compressed push changes the shard by exactly its decoded values.
TEST_P(ShardServerCompressed, AppliesTheDecodedPush) {
  LiveShard shard(GetParam());
  const ShardSnapshot before = shard.server->Snapshot();
  std::vector<float> x(kShardSize);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 3) - 1.5f;
  for (const std::string name : {"sign", "qsgd", "topk", "randk", "terngrad"}) {
    SCOPED_TRACE(name);
    const compression::Encoded e = Compressed(name, x, 3);
    std::vector<float> decoded(kShardSize);
    ASSERT_EQ(compression::Decode(e, decoded), "");
    const ShardSnapshot prior = shard.server->Snapshot();
    ASSERT_TRUE(shard.Send(CompressedMessage(e, e.encoding, 2001)));
    const std::optional<Frames> reply = shard.Receive();
    ASSERT_TRUE(reply.has_value());
    const Header r = ReplyHeader(*reply);
    EXPECT_EQ(r.code, ErrorCode::kNone) << r.message;
    EXPECT_EQ(r.version, prior.version + 1);
    std::vector<float> expected = prior.values;
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += decoded[i];
    EXPECT_EQ(Bits(shard.server->Snapshot().values), Bits(expected));
  }
  EXPECT_EQ(shard.server->Snapshot().version, before.version + 5);
}

INSTANTIATE_TEST_SUITE_P(Endpoints, ShardServerCompressed, ::testing::ValuesIn(kSchemes),
                         SchemeName);

class ShardServerAfterBadInput : public ::testing::TestWithParam<std::string> {};

// Every bad input in a row on one socket, after a valid push so that the shard's state is
// not its initial one; then a valid push and pull on that socket are exact.
TEST_P(ShardServerAfterBadInput, KeepsServingExactly) {
  LiveShard shard(GetParam());
  ExpectServing(shard);
  if (HasFatalFailure()) return;
  const std::vector<BadInput> cases = BadInputs();
  for (const BadInput& c : cases) {
    ExpectRefusedHarmlessly(shard, c);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(shard.server->stats().errors, cases.size());
  ExpectServing(shard);
  EXPECT_EQ(shard.server->Snapshot().version, 2u);
}

INSTANTIATE_TEST_SUITE_P(Endpoints, ShardServerAfterBadInput, ::testing::ValuesIn(kSchemes),
                         SchemeName);

class ShardServerAckBeforeAdd : public ::testing::TestWithParam<std::string> {};

// Over tcp:// a push of the whole shard onto values already checked finite (by the first
// such push) is acknowledged before its add (ServerOptions::ack_before_add_bytes 0: at
// any size); the add is done before the next request is read, so the pull right after
// each ack, and a snapshot, read the push exactly. Over inproc:// (the payload is the
// client's buffer) never. A whole-shard push holding NaN or near overflow is still
// refused with nothing changed.
TEST_P(ShardServerAckBeforeAdd, AddsBeforeTheNextRequest) {
  LiveShard shard(GetParam(), 0);
  constexpr int kPushes = 4;
  for (int i = 0; i < kPushes; ++i) {
    ExpectServing(shard);
    if (HasFatalFailure()) return;
  }
  const bool over_the_wire = GetParam() != "inproc";
  EXPECT_EQ(shard.server->stats().acked_before_add, over_the_wire ? kPushes - 1u : 0u);
  EXPECT_EQ(shard.server->stats().pushes_applied, static_cast<uint64_t>(kPushes));
  std::vector<float> bad(kShardSize, 1.0f);
  bad[kShardSize - 1] = std::numeric_limits<float>::quiet_NaN();
  Frame first(8 * sizeof(float)), second(8 * sizeof(float));
  std::memcpy(first.data(), bad.data(), first.size());
  std::memcpy(second.data(), bad.data() + 8, second.size());
  ExpectRefusedHarmlessly(shard, {"WholeShardNaN",
                                  ErrorCode::kNonFinite,
                                  kRequestId,
                                  {Encode(Push(0, kShardSize, 2)), first, second}});
  bad[kShardSize - 1] = std::numeric_limits<float>::max();
  std::memcpy(second.data(), bad.data() + 8, second.size());
  for (const char* name : {"WholeShardNearOverflowOnce", "WholeShardOverflow"}) {
    const ShardSnapshot before = shard.server->Snapshot();
    ASSERT_TRUE(shard.Send({Encode(Push(0, kShardSize, 2)), first, second}));
    const std::optional<Frames> reply = shard.Receive();
    ASSERT_TRUE(reply.has_value()) << name;
    const Header h = ReplyHeader(*reply);
    const bool overflow = std::string(name) == "WholeShardOverflow";
    EXPECT_EQ(h.code, overflow ? ErrorCode::kNonFinite : ErrorCode::kNone) << name << h.message;
    EXPECT_EQ(shard.server->Snapshot().version, before.version + (overflow ? 0 : 1)) << name;
  }
  EXPECT_EQ(shard.server->stats().acked_before_add, over_the_wire ? kPushes - 1u : 0u);
  ExpectServing(shard);
}

// Below ServerOptions::ack_before_add_bytes a push is added before its ack, over tcp://
// too.
TEST(ShardServerAckBeforeAdd, NotBelowTheSizeThreshold) {
  LiveShard shard("tcp", kShardSize * sizeof(float) + 1);
  for (int i = 0; i < 3; ++i) {
    ExpectServing(shard);
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(shard.server->stats().acked_before_add, 0u);
  EXPECT_EQ(shard.server->stats().pushes_applied, 3u);
}

INSTANTIATE_TEST_SUITE_P(Endpoints, ShardServerAckBeforeAdd, ::testing::ValuesIn(kSchemes),
                         SchemeName);

}  // namespace
}  // namespace asgd::transport
