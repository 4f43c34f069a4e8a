// Chunked pushes (message.h, "Chunked pushes"): PsClient splits a large dense push into
// chunks over tcp:// and ipc://, and the shard applies it all or nothing, exactly as the
// same push in one message: under an element-wise rule (staged chunk by chunk) and under
// any other rule (the chunks' frames kept and handed over whole). A raw DEALER socket
// plays a broken or vanished peer: the server answers once with an error, leaves the shard
// unchanged and keeps serving the others, who waited meanwhile. Loopback only.
#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "core/check.h"
#include "core/param_layout.h"
#include "ps/message.h"
#include "ps/placement.h"
#include "tests/transport/chunk_test_util.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

using ps::AddScaledTo;
using ps::DecodeHeader;
using ps::DType;
using ps::EncodeHeader;
using ps::ErrorCode;
using ps::Header;
using ps::kFlagLaterChunk;
using ps::kFlagMoreChunks;
using ps::kMaxHeaderBytes;
using ps::NewAddRule;
using ps::Op;
using ps::Payload;
using ps::Placement;
using ps::PushOutcome;
using ps::Role;
using ps::ServerCall;
using ps::ServerRule;
using ps::ShardContext;
using ps::ShardSnapshot;
using ps::Status;
using ps::StatusCode;
namespace {

constexpr int64_t kN = 40000;          // 160 KB: 10 chunks of 16 KiB
constexpr int64_t kChunkBytes = 16384;  // the clients' chunk size in these tests

using chunk_test::Address;
using chunk_test::Bits;
using chunk_test::Ramp;

// Not element-wise (it says nothing of ElementwiseAddScale): adds 2 x the payload.
class DoubleAddRule final : public ServerRule {
 public:
  std::string Name() const override { return "double_add"; }
  PushOutcome OnPush(ShardContext& ctx, ServerCall& call) override {
    for (const Payload::Piece& piece : call.payload().pieces()) {
      AddScaledTo(ctx.mutable_values().subspan(static_cast<std::size_t>(piece.offset),
                                               piece.values.size()),
                  2.0f, piece.values);
    }
    ctx.AdvanceVersion();
    return PushOutcome::kApplied;
  }
};

// One shard of kN elements (two tensors, so a push has two frames), a client that
// chunks at kChunkBytes.
struct Cluster {
  std::filesystem::path dir;
  std::shared_ptr<Context> context = NewContext();
  Placement placement;
  std::vector<std::unique_ptr<ShardServer>> servers;
  std::unique_ptr<PsClient> client;

  Cluster(const std::string& scheme, bool elementwise, ServerOptions base = {}) {
    static int unique = 0;
    dir = std::filesystem::temp_directory_path() /
          ("asgd-chunk-test-" + std::to_string(::getpid()) + "-" + std::to_string(unique++));
    std::filesystem::create_directories(dir);
    ParamLayout layout;
    layout.Add("a", {kN / 4});
    layout.Add("b", {kN - kN / 4});
    placement = Placement::Build(layout, 1);
    const std::vector<float> initial = Ramp(kN, 0.5f);
    servers = StartShardServers(
        context, placement, initial,
        [&](uint32_t) -> std::unique_ptr<ServerRule> {
          if (elementwise) return NewAddRule();
          return std::make_unique<DoubleAddRule>();
        },
        [&](int) { return Address(scheme, dir.string(), "ps"); }, base);
    client = NewClient(1);
  }
  ~Cluster() {
    client.reset();
    servers.clear();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::unique_ptr<PsClient> NewClient(uint32_t id, int64_t chunk_bytes = kChunkBytes) {
    ClientOptions o;
    o.id = id;
    o.chunk_bytes = chunk_bytes;
    o.timeout = std::chrono::milliseconds(20000);
    return std::make_unique<PsClient>(context, Endpoints(servers), placement, o);
  }
  ShardSnapshot Snapshot() { return servers[0]->Snapshot(); }
};

class ChunkedPush : public ::testing::TestWithParam<std::string> {};

// The same pushes chunked and in one message leave bit-identical shards, one version
// and one staleness record per push, under an element-wise rule and under another.
TEST_P(ChunkedPush, EqualsTheSamePushInOneMessage) {
  for (bool elementwise : {true, false}) {
    SCOPED_TRACE(elementwise ? "add rule (staged)" : "double-add rule (kept frames)");
    Cluster chunked(GetParam(), elementwise);
    Cluster whole(GetParam(), elementwise);
    std::unique_ptr<PsClient> one_message = whole.NewClient(2, /*chunk_bytes=*/0);
    for (int round = 1; round <= 3; ++round) {
      const std::vector<float> delta = Ramp(kN, 0.125f * static_cast<float>(round));
      ASSERT_TRUE(chunked.client->PushAndWait(delta).ok());
      ASSERT_TRUE(one_message->PushAndWait(delta).ok());
    }
    const ShardSnapshot a = chunked.Snapshot();
    const ShardSnapshot b = whole.Snapshot();
    EXPECT_EQ(a.version, 3u);
    EXPECT_EQ(b.version, 3u);
    EXPECT_EQ(Bits(a.values), Bits(b.values));
    const ShardStats s = chunked.servers[0]->stats();
    EXPECT_EQ(s.pushes_applied, 3u);
    EXPECT_EQ(s.errors, 0u);
    // The chunks were separate requests on the wire: 10 per push (3 pushes, plus none
    // for the one-message cluster's client).
    EXPECT_GE(s.requests, 30u);
    EXPECT_EQ(s.chunked_pushes, 3u);
    EXPECT_EQ(whole.servers[0]->stats().requests, 3u);
    EXPECT_EQ(whole.servers[0]->stats().chunked_pushes, 0u);
  }
}

// A chunked push-pull answers with the values after the push, in the caller's layout.
TEST_P(ChunkedPush, PushPullRepliesWithTheValuesAfterThePush) {
  Cluster c(GetParam(), /*elementwise=*/true);
  const std::vector<float> initial = Ramp(kN, 0.5f);
  const std::vector<float> delta = Ramp(kN, 0.25f);
  std::vector<float> out(kN, -1.0f);
  ASSERT_TRUE(c.client->PushPull(delta, out).Wait().ok());
  std::vector<float> expected(kN);
  for (int64_t i = 0; i < kN; ++i) expected[i] = initial[i] + delta[i];
  EXPECT_EQ(Bits(out), Bits(expected));
}

// NaN in the last chunk: the whole push is refused (kNonFinite, naming the element) and
// the shard keeps its values and version; the next push is applied.
TEST_P(ChunkedPush, NanInTheLastChunkChangesNothing) {
  for (bool elementwise : {true, false}) {
    SCOPED_TRACE(elementwise ? "staged" : "kept frames");
    Cluster c(GetParam(), elementwise);
    const ShardSnapshot before = c.Snapshot();
    std::vector<float> delta = Ramp(kN, 1.0f);
    delta[kN - 3] = std::numeric_limits<float>::quiet_NaN();
    const Status st = c.client->PushAndWait(delta);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error_code(), ErrorCode::kNonFinite) << st.ToString();
    EXPECT_NE(st.message().find(std::to_string(kN - 3)), std::string::npos) << st.ToString();
    const ShardSnapshot after = c.Snapshot();
    EXPECT_EQ(after.version, before.version);
    EXPECT_EQ(Bits(after.values), Bits(before.values));
    delta[kN - 3] = 0.0f;
    ASSERT_TRUE(c.client->PushAndWait(delta).ok());
    EXPECT_EQ(c.Snapshot().version, before.version + 1);
  }
}

// Two clients push chunked pushes at once while a third pulls: every pull shows a whole
// number of pushes (each push adds 1 everywhere, so a torn read would not be uniform),
// and the end holds exactly every push.
TEST_P(ChunkedPush, ConcurrentPushesAreAtomicAndAllLand) {
  Cluster c(GetParam(), /*elementwise=*/true);
  const ShardSnapshot start = c.Snapshot();
  constexpr int kPushes = 12;
  auto pusher = [&](uint32_t id) {
    std::unique_ptr<PsClient> client = c.NewClient(id);
    const std::vector<float> ones(kN, 1.0f);
    for (int i = 0; i < kPushes; ++i) ASSERT_TRUE(client->PushAndWait(ones).ok());
  };
  std::thread a(pusher, 10), b(pusher, 11);
  std::unique_ptr<PsClient> reader = c.NewClient(12);
  std::vector<float> got(kN);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(reader->PullAndWait(got).ok());
    for (int64_t j = 0; j < kN; ++j) {
      const float pushes = got[j] - start.values[j];
      ASSERT_EQ(pushes, got[0] - start.values[0]) << "a pull saw a push half applied at " << j;
    }
  }
  a.join();
  b.join();
  const ShardSnapshot end = c.Snapshot();
  EXPECT_EQ(end.version, 2u * kPushes);
  for (int64_t j = 0; j < kN; ++j) ASSERT_EQ(end.values[j], start.values[j] + 2.0f * kPushes) << j;
}

// A shard server that dies after the first chunk of a push, and a new one bound at its
// address (a killed `asgd ps` restarted): the client's connection delivers the chunks it
// still queued to the new server. It applies nothing of them (not even as a push of
// their range) and answers kIncompletePush, which the push's handle reports; the next
// push lands whole. The dying server is a raw ROUTER that reads one chunk, with a
// one-message queue and a small kernel buffer, so that most chunks are still queued in
// the client when it closes.
TEST_P(ChunkedPush, ShardRestartedBetweenChunksAppliesNothingOfThePush) {
  constexpr int64_t kBig = int64_t{1} << 22;    // 16 MiB: 256 chunks of 64 KiB
  Cluster c(GetParam(), /*elementwise=*/true);  // for its folder and context
  zmq::socket_t dying(c.context->zmq_context(), zmq::socket_type::router);
  dying.set(zmq::sockopt::linger, 0);
  dying.set(zmq::sockopt::rcvhwm, 1);
  dying.set(zmq::sockopt::rcvbuf, 16384);
  dying.bind(Address(GetParam(), c.dir.string(), "restarted"));
  const std::string endpoint = dying.get(zmq::sockopt::last_endpoint);

  ParamLayout layout;
  layout.Add("w", {kBig});
  const Placement placement = Placement::Build(layout, 1);
  ClientOptions o;
  o.id = 3;
  o.chunk_bytes = 65536;
  o.timeout = std::chrono::milliseconds(20000);
  PsClient client(c.context, {endpoint}, placement, o);
  const std::vector<float> ones(static_cast<std::size_t>(kBig), 1.0f);
  RequestHandle push = client.Push(ones);

  // The first chunk reaches the dying server, which goes away without answering.
  std::vector<zmq::message_t> first;
  do {
    first.emplace_back();
    ASSERT_TRUE(dying.recv(first.back()));
  } while (first.back().more());
  internal::AnnotateReceive();
  ASSERT_GE(first.size(), 3u);
  Header h;
  ASSERT_TRUE(
      DecodeHeader({static_cast<const std::byte*>(first[1].data()), first[1].size()}, &h).ok());
  EXPECT_EQ(h.flags, kFlagMoreChunks);
  EXPECT_EQ(h.offset, 0u);
  EXPECT_EQ(h.aux, static_cast<uint64_t>(kBig));
  first.clear();
  dying.close();

  const std::vector<float> initial = Ramp(kBig, 0.25f);
  std::vector<std::unique_ptr<ShardServer>> restarted = StartShardServers(
      c.context, placement, initial, [](uint32_t) { return NewAddRule(); },
      [&](int) { return endpoint; });
  const Status st = push.Wait();
  ASSERT_EQ(st.code(), StatusCode::kRemoteError) << st.ToString();
  EXPECT_EQ(st.error_code(), ErrorCode::kIncompletePush) << st.ToString();
  EXPECT_NE(st.message().find("earlier chunks did not come"), std::string::npos) << st.ToString();
  const ShardSnapshot unchanged = restarted[0]->Snapshot();
  EXPECT_EQ(unchanged.version, 0u);
  EXPECT_EQ(Bits(unchanged.values), Bits(initial));
  EXPECT_GE(restarted[0]->stats().errors_for(ErrorCode::kIncompletePush), 1u);

  const Status next = client.PushAndWait(ones);
  ASSERT_TRUE(next.ok()) << next.ToString();
  const ShardSnapshot after = restarted[0]->Snapshot();
  EXPECT_EQ(after.version, 1u);
  for (int64_t j = 0; j < kBig; ++j) {
    ASSERT_EQ(after.values[static_cast<std::size_t>(j)],
              initial[static_cast<std::size_t>(j)] + 1.0f)
        << j;
  }
}

std::string SchemeName(const ::testing::TestParamInfo<std::string>& p) { return p.param; }
INSTANTIATE_TEST_SUITE_P(Endpoints, ChunkedPush, ::testing::Values("tcp", "ipc"), SchemeName);

// ---- A peer that breaks the protocol ------------------------------------------------------

// A raw DEALER on the cluster's shard.
struct RawPeer {
  zmq::socket_t socket;
  explicit RawPeer(Cluster& c) : socket(c.context->zmq_context(), zmq::socket_type::dealer) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::rcvtimeo, 10000);
    socket.connect(c.servers[0]->endpoint());
  }
  // A chunk of `count` elements (value 1) at offset, with `left` elements of the push left:
  // kFlagMoreChunks if more, kFlagLaterChunk if later (not the push's first chunk).
  void SendChunk(uint64_t request_id, uint64_t offset, uint64_t count, uint64_t left, bool more,
                 bool later) {
    Header h;
    h.op = Op::kPush;
    h.role = Role::kWorker;
    h.sender = 7;
    h.request_id = request_id;
    h.dtype = DType::kFloat32;
    h.offset = offset;
    h.count = count;
    h.payload_bytes = count * sizeof(float);
    h.frames = 1;
    h.aux = left;
    if (more) h.flags |= kFlagMoreChunks;
    if (later) h.flags |= kFlagLaterChunk;
    std::vector<std::byte> header(kMaxHeaderBytes);
    header.resize(EncodeHeader(h, header));
    const std::vector<float> payload(count, 1.0f);
    internal::AnnotateSend();
    ASSERT_TRUE(socket.send(zmq::buffer(header.data(), header.size()), zmq::send_flags::sndmore));
    ASSERT_TRUE(socket.send(zmq::buffer(payload.data(), payload.size() * sizeof(float))));
  }
  std::optional<Header> Reply() {
    zmq::message_t m;
    if (!socket.recv(m)) return std::nullopt;
    internal::AnnotateReceive();
    Header h;
    EXPECT_TRUE(DecodeHeader({static_cast<const std::byte*>(m.data()), m.size()}, &h).ok());
    while (m.more()) (void)socket.recv(m);
    return h;
  }
};

// A peer that sends the first chunk and vanishes: the push is dropped after
// chunk_timeout with one error reply, the shard is unchanged, and a client that pushed
// meanwhile (its push waited behind the open one) is served.
TEST(ChunkedPushPeer, VanishedMidPushIsDroppedAndOthersAreServed) {
  ServerOptions base;
  base.chunk_timeout = std::chrono::milliseconds(300);
  Cluster c("tcp", /*elementwise=*/true, base);
  const ShardSnapshot before = c.Snapshot();
  RawPeer peer(c);
  peer.SendChunk(5, 0, 1000, kN, /*more=*/true, /*later=*/false);
  const std::vector<float> ones(kN, 1.0f);
  ASSERT_TRUE(c.client->PushAndWait(ones).ok());  // waits behind the open push, then lands
  const std::optional<Header> reply = peer.Reply();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->op, Op::kError);
  EXPECT_EQ(reply->request_id, 5u);
  EXPECT_EQ(reply->code, ErrorCode::kIncompletePush);
  EXPECT_NE(reply->message.find("did not come within 300 ms"), std::string::npos) << reply->message;
  const ShardSnapshot after = c.Snapshot();
  EXPECT_EQ(after.version, before.version + 1);
  for (int64_t j = 0; j < kN; ++j) ASSERT_EQ(after.values[j], before.values[j] + 1.0f) << j;
}

// Chunks out of order, later chunks without their first (a middle one and a last one:
// the rest of a push whose first chunks went to a server that died at this address), a
// last chunk that claims more of its push, and a chunk whose push runs past the shard
// each get an error reply and change nothing: no later chunk opens a push or is applied
// as a push of its own range. The peer is then served.
TEST(ChunkedPushPeer, BrokenSequencesAreRefusedHarmlessly) {
  Cluster c("tcp", /*elementwise=*/true);
  const ShardSnapshot before = c.Snapshot();
  RawPeer peer(c);

  peer.SendChunk(1, 0, 100, 300, true, false);
  peer.SendChunk(1, 150, 100, 150, true, true);  // skips [100, 150)
  std::optional<Header> r = peer.Reply();        // the open push is dropped
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->request_id, 1u);
  EXPECT_EQ(r->code, ErrorCode::kIncompletePush) << r->message;
  EXPECT_NE(r->message.find("not the push's chunk at element 100"), std::string::npos)
      << r->message;
  r = peer.Reply();  // and the stray chunk is refused on its own, opening nothing
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->request_id, 1u);
  EXPECT_EQ(r->code, ErrorCode::kIncompletePush) << r->message;
  EXPECT_NE(r->message.find("earlier chunks did not come"), std::string::npos) << r->message;
  peer.SendChunk(2, 0, 10, 0, false, false);  // aux 0: a whole push of 10
  r = peer.Reply();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->request_id, 2u);
  EXPECT_EQ(r->op, Op::kPush) << r->message;  // applied

  // The tail of a push of [0, 300) cut after its first chunk: a middle chunk and the last.
  peer.SendChunk(3, 100, 100, 200, true, true);
  peer.SendChunk(3, 200, 100, 100, false, true);
  for (int i = 0; i < 2; ++i) {
    r = peer.Reply();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->request_id, 3u);
    EXPECT_EQ(r->op, Op::kError);
    EXPECT_EQ(r->code, ErrorCode::kIncompletePush) << r->message;
    EXPECT_NE(r->message.find("earlier chunks did not come"), std::string::npos) << r->message;
  }

  peer.SendChunk(4, 50, 10, 20, false, false);  // a last chunk (unflagged) of a push never begun
  r = peer.Reply();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->request_id, 4u);
  EXPECT_EQ(r->code, ErrorCode::kPayloadMismatch);
  EXPECT_NE(r->message.find("earlier chunks did not come"), std::string::npos) << r->message;

  peer.SendChunk(5, kN - 10, 5, 20, true, false);  // the push would run past the shard
  peer.SendChunk(5, kN - 5, 5, 15, true, true);
  peer.SendChunk(5, kN, 5, 10, true, true);
  peer.SendChunk(5, kN + 5, 5, 5, false, true);
  r = peer.Reply();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->request_id, 5u);
  EXPECT_NE(r->code, ErrorCode::kNone);

  const ShardSnapshot after = c.Snapshot();
  EXPECT_EQ(after.version, before.version + 1);  // only request 2
  for (int64_t j = 0; j < kN; ++j) {
    ASSERT_EQ(after.values[j], before.values[j] + (j < 10 ? 1.0f : 0.0f)) << j;
  }
  const std::vector<float> ones(kN, 1.0f);
  EXPECT_TRUE(c.client->PushAndWait(ones).ok());
}

}  // namespace
}  // namespace asgd::transport
