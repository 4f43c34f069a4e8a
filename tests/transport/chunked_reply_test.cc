// Chunked replies (message.h, "Chunked replies"): a client whose pull or push-pull asks
// for them gets values above the server's reply_chunk_bytes as several messages, copied
// into place as they arrive, and ends with exactly what one message would have given:
// the shard's ranges scattered into the flat vector, a range of one shard, a rule's own
// payload, a reply the rule held. A raw ROUTER plays a server that breaks the sequence:
// the client reports a bad reply, writes nothing outside its destination and goes on
// with the next request. Loopback only.
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>
#include <zmq.hpp>

#include "core/error.h"
#include "core/param_layout.h"
#include "ps/message.h"
#include "ps/placement.h"
#include "tests/transport/chunk_test_util.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

using ps::AddTo;
using ps::DecodeHeader;
using ps::DType;
using ps::Header;
using ps::kFlagChunkedReply;
using ps::kFlagLaterChunk;
using ps::kFlagMoreChunks;
using ps::kFlagReply;
using ps::NewAddRule;
using ps::Op;
using ps::Payload;
using ps::Placement;
using ps::PlacementPolicy;
using ps::PushOutcome;
using ps::ReplyBuffer;
using ps::RequestInfo;
using ps::Role;
using ps::ServerCall;
using ps::ServerRule;
using ps::ShardContext;
using ps::Status;
using ps::StatusCode;
namespace {

// Three tensors round-robin over 2 shards, so each shard owns separate ranges of the flat
// vector; 10000-byte chunks cut inside ranges and frames.
constexpr int64_t kA = 5000, kB = 12000, kC = 7001;
constexpr int64_t kN = kA + kB + kC;
constexpr int64_t kReplyChunkBytes = 10000;

using chunk_test::Address;
using chunk_test::Bits;
using chunk_test::Ramp;

// Adds pushes; replies to a pull with the negated values from its own buffer (a rule's
// payload), and holds every pull of worker 9 until the next push.
class NegatingRule final : public ServerRule {
 public:
  std::string Name() const override { return "negating"; }
  PushOutcome OnPush(ShardContext& ctx, ServerCall& call) override {
    for (const Payload::Piece& piece : call.payload().pieces()) {
      AddTo(
          ctx.mutable_values().subspan(static_cast<std::size_t>(piece.offset), piece.values.size()),
          piece.values);
    }
    ctx.AdvanceVersion();
    for (uint64_t token : held_) ctx.Release(token, Negated(ctx, held_info_[token]));
    held_.clear();
    held_info_.clear();
    return PushOutcome::kApplied;
  }
  void OnPull(ShardContext& ctx, ServerCall& call) override {
    if (call.info().worker == 9) {
      const uint64_t token = call.Defer();
      held_.push_back(token);
      held_info_[token] = call.info();
      return;
    }
    call.ReplyWith(Negated(ctx, call.info()));
  }

 private:
  static ReplyBuffer Negated(ShardContext& ctx, const RequestInfo& info) {
    ReplyBuffer out = ctx.NewReplyBuffer(info.count);
    const std::span<const float> v = ctx.values().subspan(static_cast<std::size_t>(info.offset),
                                                          static_cast<std::size_t>(info.count));
    for (std::size_t i = 0; i < v.size(); ++i) out.values()[i] = -v[i];
    return out;
  }
  std::vector<uint64_t> held_;
  std::map<uint64_t, RequestInfo> held_info_;
};

struct Cluster {
  std::filesystem::path dir;
  std::shared_ptr<Context> context = NewContext();
  Placement placement;
  std::vector<std::unique_ptr<ShardServer>> servers;

  Cluster(const std::string& scheme, bool negating, int64_t reply_chunk_bytes = kReplyChunkBytes) {
    static int unique = 0;
    dir = std::filesystem::temp_directory_path() /
          ("asgd-reply-test-" + std::to_string(::getpid()) + "-" + std::to_string(unique++));
    std::filesystem::create_directories(dir);
    ParamLayout layout;
    layout.Add("a", {kA});
    layout.Add("b", {kB});
    layout.Add("c", {kC});
    placement = Placement::Build(layout, 2, {PlacementPolicy::kRoundRobin});
    ServerOptions base;
    base.reply_chunk_bytes = reply_chunk_bytes;
    int name = 0;
    servers = StartShardServers(
        context, placement, Ramp(kN, 0.5f),
        [&](uint32_t) -> std::unique_ptr<ServerRule> {
          if (negating) return std::make_unique<NegatingRule>();
          return NewAddRule();
        },
        [&](int) { return Address(scheme, dir.string(), "ps" + std::to_string(name++)); }, base);
  }
  ~Cluster() {
    servers.clear();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  // chunk_bytes 0: asks for no chunks (every reply one message).
  std::unique_ptr<PsClient> NewClient(uint32_t id, int64_t chunk_bytes) {
    ClientOptions o;
    o.id = id;
    o.chunk_bytes = chunk_bytes;
    o.timeout = std::chrono::milliseconds(20000);
    return std::make_unique<PsClient>(context, Endpoints(servers), placement, o);
  }
  uint64_t ChunkedReplies() const {
    uint64_t n = 0;
    for (const auto& s : servers) n += s->stats().chunked_replies;
    return n;
  }
};

class ChunkedReply : public ::testing::TestWithParam<std::string> {};

// Whole-vector pulls and push-pulls: the chunked replies scatter over each shard's
// ranges into the same bits and versions as replies in one message.
TEST_P(ChunkedReply, EqualsTheSameReplyInOneMessage) {
  Cluster c(GetParam(), /*negating=*/false);
  std::unique_ptr<PsClient> chunked = c.NewClient(1, /*chunk_bytes=*/16384);
  std::unique_ptr<PsClient> whole = c.NewClient(2, /*chunk_bytes=*/0);
  std::vector<float> a(kN, -7.0f), b(kN, -8.0f);
  ASSERT_TRUE(chunked->PullAndWait(a).ok());
  ASSERT_TRUE(whole->PullAndWait(b).ok());
  EXPECT_EQ(Bits(a), Bits(Ramp(kN, 0.5f)));
  EXPECT_EQ(Bits(a), Bits(b));
  // Each shard's reply (12000 or 12001 elements, 48 KB) went as 5 chunks of 10000 bytes.
  EXPECT_EQ(c.ChunkedReplies(), 2u);
  for (const auto& s : c.servers) {
    EXPECT_EQ(s->stats().replies_sent, 2u);  // one reply to each client
    EXPECT_EQ(s->stats().errors, 0u);
  }
  EXPECT_EQ(
      std::vector<uint64_t>(chunked->pulled_versions().begin(), chunked->pulled_versions().end()),
      std::vector<uint64_t>(whole->pulled_versions().begin(), whole->pulled_versions().end()));

  const std::vector<float> delta = Ramp(kN, 0.25f);
  ASSERT_TRUE(chunked->PushPull(delta, a).Wait().ok());
  ASSERT_TRUE(whole->PullAndWait(b).ok());
  EXPECT_EQ(Bits(a), Bits(b));
  EXPECT_EQ(c.ChunkedReplies(), 4u);
  EXPECT_EQ(chunked->pulled_versions()[0], 1u);
  EXPECT_EQ(chunked->pulled_versions()[1], 1u);
}

// A range of one shard (PullShard) starting inside it, in chunks, lands at the start of
// the caller's buffer and not one element beyond it.
TEST_P(ChunkedReply, RangeOfOneShardLandsInPlace) {
  Cluster c(GetParam(), /*negating=*/false, /*reply_chunk_bytes=*/4096);
  std::unique_ptr<PsClient> client = c.NewClient(1, 16384);
  const int64_t shard_size = c.placement.shard_size(1);
  const int64_t offset = 333;
  const int64_t count = shard_size - offset - 100;
  std::vector<float> buffer(static_cast<std::size_t>(count + 2), -1.0f);
  const std::span<float> out(buffer.data() + 1, static_cast<std::size_t>(count));
  ASSERT_TRUE(client->PullShard(1, offset, out).Wait().ok());
  const std::vector<float> shard = c.placement.Gather(1, Ramp(kN, 0.5f));
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(out[static_cast<std::size_t>(i)], shard[static_cast<std::size_t>(offset + i)]) << i;
  }
  EXPECT_EQ(buffer.front(), -1.0f);
  EXPECT_EQ(buffer.back(), -1.0f);
  EXPECT_EQ(c.servers[1]->stats().chunked_replies, 1u);
}

// A rule's own reply payload goes in chunks, and so does a reply the rule held and
// released later, with the payload it chose then.
TEST_P(ChunkedReply, RulePayloadAndHeldRepliesComeInChunks) {
  Cluster c(GetParam(), /*negating=*/true);
  std::unique_ptr<PsClient> client = c.NewClient(1, 16384);
  std::vector<float> got(kN);
  ASSERT_TRUE(client->PullAndWait(got).ok());
  std::vector<float> expected = Ramp(kN, 0.5f);
  for (float& x : expected) x = -x;
  EXPECT_EQ(Bits(got), Bits(expected));
  EXPECT_EQ(c.ChunkedReplies(), 2u);

  std::unique_ptr<PsClient> held_client = c.NewClient(9, 16384);
  std::vector<float> held(kN, 0.0f);
  RequestHandle pull = held_client->Pull(held);
  // Both shards hold it: one push releases it with the values after the push.
  for (int i = 0; i < 500 && (c.servers[0]->stats().held < 1 || c.servers[1]->stats().held < 1);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(c.servers[0]->stats().held, 1u);
  ASSERT_EQ(c.servers[1]->stats().held, 1u);
  const std::vector<float> ones(kN, 1.0f);
  ASSERT_TRUE(client->PushAndWait(ones).ok());
  ASSERT_TRUE(pull.Wait().ok());
  const std::vector<float> initial = Ramp(kN, 0.5f);
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(held[static_cast<std::size_t>(i)], -(initial[static_cast<std::size_t>(i)] + 1.0f))
        << i;
  }
  EXPECT_EQ(c.ChunkedReplies(), 4u);
}

std::string SchemeName(const ::testing::TestParamInfo<std::string>& p) { return p.param; }
INSTANTIATE_TEST_SUITE_P(Endpoints, ChunkedReply, ::testing::Values("tcp", "ipc"), SchemeName);

// A request without kFlagChunkedReply gets its reply in one message, however large (a
// client of before the flag); with it, the chunks carry the reply's fields and flags.
TEST(ChunkedReplyWire, OnlyRequestsThatAskGetChunks) {
  Cluster c("tcp", /*negating=*/false);
  zmq::socket_t peer(c.context->zmq_context(), zmq::socket_type::dealer);
  peer.set(zmq::sockopt::linger, 0);
  peer.set(zmq::sockopt::rcvtimeo, 10000);
  peer.connect(c.servers[0]->endpoint());
  const auto size = static_cast<uint64_t>(c.placement.shard_size(0));
  auto send_pull = [&](uint64_t id, uint32_t flags) {
    Header h;
    h.op = Op::kPull;
    h.flags = flags;
    h.role = Role::kWorker;
    h.request_id = id;
    h.offset = 0;
    h.count = size;
    internal::AnnotateSend();
    ASSERT_TRUE(peer.send(internal::HeaderMessage(h), zmq::send_flags::none));
  };
  // Reads one message: its header and payload bytes.
  auto receive = [&]() -> std::pair<Header, std::size_t> {
    zmq::message_t m;
    EXPECT_TRUE(peer.recv(m));
    Header h;
    EXPECT_TRUE(DecodeHeader({static_cast<const std::byte*>(m.data()), m.size()}, &h).ok());
    std::size_t bytes = 0;
    while (m.more()) {
      (void)peer.recv(m);
      bytes += m.size();
    }
    internal::AnnotateReceive();
    return {h, bytes};
  };

  send_pull(1, 0);
  auto [whole, whole_bytes] = receive();
  EXPECT_EQ(whole.flags, kFlagReply);
  EXPECT_EQ(whole.count, size);
  EXPECT_EQ(whole_bytes, size * sizeof(float));

  send_pull(2, kFlagChunkedReply);
  const uint64_t per_chunk = kReplyChunkBytes / sizeof(float);
  uint64_t at = 0;
  for (uint64_t k = 0; at < size; ++k) {
    auto [h, bytes] = receive();
    const bool last = at + per_chunk >= size;
    EXPECT_EQ(h.request_id, 2u);
    EXPECT_EQ(h.op, Op::kPull);
    EXPECT_EQ(h.offset, at);
    EXPECT_EQ(h.count, std::min(per_chunk, size - at));
    EXPECT_EQ(bytes, h.count * sizeof(float));
    EXPECT_EQ(h.flags, kFlagReply | (last ? 0 : kFlagMoreChunks) | (k > 0 ? kFlagLaterChunk : 0))
        << "chunk " << k;
    at += h.count;
  }
  EXPECT_EQ(at, size);
  EXPECT_EQ(c.servers[0]->stats().chunked_replies, 1u);
  EXPECT_EQ(c.servers[0]->stats().replies_sent, 2u);
}

TEST(ChunkedReplyWire, NegativeChunkSizeIsAConfigError) {
  ServerOptions o;
  o.endpoint = "inproc://reply-chunk-option";
  o.reply_chunk_bytes = -1;
  EXPECT_THROW(ShardServer(NewContext(), o, std::vector<float>(10), NewAddRule()), ConfigError);
  o.reply_chunk_bytes = 3;
  EXPECT_THROW(ShardServer(NewContext(), o, std::vector<float>(10), NewAddRule()), ConfigError);
}

// ---- A server that breaks the sequence --------------------------------------------------

// A raw ROUTER standing for one shard of n elements: it reads a request and answers with
// the chunks the test gives (offset, count, flags, version), values = element index.
struct RawShard {
  zmq::socket_t socket;
  std::string endpoint;
  explicit RawShard(zmq::context_t& ctx) : socket(ctx, zmq::socket_type::router) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::rcvtimeo, 10000);
    socket.bind("tcp://127.0.0.1:*");
    endpoint = socket.get(zmq::sockopt::last_endpoint);
  }
  struct Chunk {
    uint64_t offset, count;
    uint32_t flags;
    uint64_t version = 5;
  };
  // Returns the request's header.
  Header Answer(const std::vector<Chunk>& chunks) {
    std::vector<zmq::message_t> request;
    do {
      request.emplace_back();
      EXPECT_TRUE(socket.recv(request.back()));
    } while (request.back().more());
    internal::AnnotateReceive();
    Header r;
    EXPECT_TRUE(
        DecodeHeader({static_cast<const std::byte*>(request[1].data()), request[1].size()}, &r)
            .ok());
    for (const Chunk& c : chunks) {
      Header h;
      h.op = r.op;
      h.flags = kFlagReply | c.flags;
      h.role = Role::kPs;
      h.request_id = r.request_id;
      h.version = c.version;
      h.dtype = DType::kFloat32;
      h.offset = c.offset;
      h.count = c.count;
      h.payload_bytes = c.count * sizeof(float);
      h.frames = 1;
      std::vector<float> values(c.count);
      for (uint64_t i = 0; i < c.count; ++i) values[i] = static_cast<float>(c.offset + i);
      internal::AnnotateSend();
      zmq::message_t id(request[0].data(), request[0].size());
      socket.send(id, zmq::send_flags::sndmore);
      socket.send(internal::HeaderMessage(h), zmq::send_flags::sndmore);
      socket.send(zmq::buffer(values.data(), values.size() * sizeof(float)));
    }
    return r;
  }
};

// Chunks that skip, overlap, run past the request, change version midway or end early
// are a bad reply: the client says so, writes nothing outside its buffer, leaves the
// version it had, and serves the next request, whose chunks are whole.
TEST(ChunkedReplyPeer, BrokenSequencesAreBadRepliesAndHarmless) {
  constexpr uint64_t kSize = 1000;
  auto ctx = NewContext();
  RawShard shard(ctx->zmq_context());
  ParamLayout layout;
  layout.Add("w", {static_cast<int64_t>(kSize)});
  ClientOptions o;
  o.chunk_bytes = 64;  // every pull of more than 16 elements asks for chunks
  o.timeout = std::chrono::milliseconds(10000);
  PsClient client(ctx, {shard.endpoint}, Placement::Build(layout, 1), o);
  constexpr uint32_t kMore = kFlagMoreChunks, kLater = kFlagLaterChunk;

  const std::vector<std::pair<std::string, std::vector<RawShard::Chunk>>> broken = {
      {"skips", {{0, 400, kMore}, {500, 500, kLater}}},
      {"overlaps", {{0, 400, kMore}, {300, 700, kLater}}},
      {"runs past the end", {{0, 400, kMore}, {400, 700, kLater}}},
      {"ends early", {{0, 400, kMore}, {400, 300, kLater}}},
      {"changes version", {{0, 400, kMore}, {400, 600, kLater, 6}}},
      {"starts with a later chunk", {{0, 400, kMore | kLater}, {400, 600, kLater}}},
      {"continues without later_chunk", {{0, 400, kMore}, {400, 600, 0}}},
  };
  uint64_t bad_replies = 0;
  for (const auto& [what, chunks] : broken) {
    SCOPED_TRACE(what);
    std::vector<float> buffer(kSize + 2, -1.0f);
    RequestHandle pull = client.Pull(std::span<float>(buffer.data() + 1, kSize));
    const Header request = shard.Answer(chunks);
    EXPECT_EQ(request.flags, kFlagChunkedReply);
    const Status st = pull.Wait();
    EXPECT_EQ(st.code(), StatusCode::kBadReply) << st.ToString();
    EXPECT_NE(st.message().find("reply chunk"), std::string::npos) << st.ToString();
    EXPECT_EQ(buffer.front(), -1.0f);
    EXPECT_EQ(buffer.back(), -1.0f);
    EXPECT_EQ(client.stats().bad_replies, ++bad_replies);
    EXPECT_EQ(client.pulled_versions()[0], 0u);
    // What the broken reply still sends after the client gave up on it is a stray.
  }

  std::vector<float> got(kSize, -1.0f);
  RequestHandle pull = client.Pull(got);
  shard.Answer({{0, 300, kMore, 7}, {300, 300, kMore | kLater, 7}, {600, 400, kLater, 7}});
  const Status st = pull.Wait();
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (uint64_t i = 0; i < kSize; ++i) ASSERT_EQ(got[i], static_cast<float>(i)) << i;
  EXPECT_EQ(client.pulled_versions()[0], 7u);
}

}  // namespace
}  // namespace asgd::transport
