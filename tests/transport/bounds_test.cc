// What one peer — hostile, buggy or merely stuck — can make a shard server hold (issue
// 22): replies it does not read, barriers that never complete. A live ShardServer on
// loopback tcp, driven by raw ZeroMQ DEALER sockets; the assertions are on the server's
// counters and on this process's resident memory, not on timing.
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "transport/message.h"
#include "transport/shard_server.h"
#include "transport/zmq_util.h"

namespace asgd::transport {
namespace {

constexpr int kReceiveTimeoutMs = 5000;

// This process's resident set, in bytes (Linux).
int64_t ResidentBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

Header Request(Op op, uint64_t count, uint64_t request_id) {
  Header h;
  h.op = op;
  h.role = Role::kWorker;
  h.sender = 1;
  h.shard = 0;
  h.request_id = request_id;
  h.offset = 0;
  h.count = count;
  if (op == Op::kPush) {
    h.dtype = DType::kFloat32;
    h.payload_bytes = count * sizeof(float);
    h.frames = 1;
  }
  return h;
}

zmq::socket_t Dealer(zmq::context_t& context, const std::string& endpoint, int receive_hwm) {
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, kReceiveTimeoutMs);
  s.set(zmq::sockopt::sndtimeo, kReceiveTimeoutMs);
  s.set(zmq::sockopt::rcvhwm, receive_hwm);
  s.set(zmq::sockopt::rcvbuf, 4096);  // a peer that does not read fills this at once
  s.connect(endpoint);
  return s;
}

void Send(zmq::socket_t& s, const Header& h, const std::vector<float>* payload = nullptr) {
  zmq::message_t header = internal::HeaderMessage(h);
  internal::AnnotateSend();
  ASSERT_TRUE(s.send(header, payload ? zmq::send_flags::sndmore : zmq::send_flags::none));
  if (payload) {
    zmq::message_t m(payload->data(), payload->size() * sizeof(float));
    ASSERT_TRUE(s.send(m, zmq::send_flags::none));
  }
}

// The header of the next reply (its payload, if any, copied to *values).
std::optional<Header> Receive(zmq::socket_t& s, std::vector<float>* values = nullptr) {
  zmq::message_t m;
  if (!s.recv(m)) return std::nullopt;
  internal::AnnotateReceive();
  Header h;
  if (!DecodeHeader(std::span<const std::byte>(static_cast<const std::byte*>(m.data()), m.size()), &h)
           .ok()) {
    return std::nullopt;
  }
  while (m.more()) {
    if (!s.recv(m)) return std::nullopt;
    if (values != nullptr) {
      values->resize(m.size() / sizeof(float));
      std::memcpy(values->data(), m.data(), m.size());
    }
  }
  return h;
}

// Polls until pred() holds or 10 s pass (the test then fails on what pred checks).
template <typename Pred>
void WaitFor(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Issue 22 item 2: a peer pulls thousands of times between pushes and never reads. Each
// queued pull reply pins a copy-on-write copy of the shard; without a bound this holds
// kPulls x the shard (64 MiB here). With the per-peer budget (default: 8 x the shard, at
// least 1 MiB) the server holds at most the budget, drops (and counts) the rest, and
// keeps serving other peers exactly.
TEST(ShardServerBounds, UnreadPullRepliesAreBoundedPerPeer) {
  constexpr int64_t kShardSize = 4096;  // 16 KiB
  constexpr int kPulls = 4000;
  constexpr int64_t kShardBytes = kShardSize * 4;
  constexpr int64_t kBudget = int64_t{1} << 20;  // the default for this shard
  auto context = NewContext();
  ServerOptions options;
  options.endpoint = "tcp://127.0.0.1:*";
  ShardServer server(context, options, std::vector<float>(kShardSize, 1.0f), NewAddRule());
  server.Start();
  const int64_t rss_before = ResidentBytes();

  zmq::socket_t stuck = Dealer(context->zmq_context(), server.endpoint(), /*receive_hwm=*/1);
  const std::vector<float> one = {0.5f};
  for (int i = 0; i < kPulls; ++i) {
    Send(stuck, Request(Op::kPull, kShardSize, 2 * i));
    Send(stuck, Request(Op::kPush, 1, 2 * i + 1), &one);  // the next pull needs a new copy
    if (HasFatalFailure()) return;
  }
  WaitFor([&] { return server.stats().requests >= 2 * kPulls; });
  const ShardStats s = server.stats();
  ASSERT_EQ(s.requests, 2u * kPulls);
  EXPECT_EQ(s.version, static_cast<uint64_t>(kPulls));
  EXPECT_GT(s.replies_over_budget, 0u);
  EXPECT_GE(s.replies_dropped, s.replies_over_budget);
  EXPECT_LE(s.queued_reply_bytes, static_cast<uint64_t>(kBudget));
  // Retired copies are pinned only by replies within the budget, plus the spares.
  EXPECT_LE(s.pinned_snapshots, static_cast<uint64_t>(kBudget / kShardBytes + 2 + 1));
  // Unbounded, this would be about kPulls x 16 KiB = 64 MiB; allow slack for allocators.
  EXPECT_LT(ResidentBytes() - rss_before, 24 << 20);

  // Another peer is served exactly meanwhile.
  zmq::socket_t other = Dealer(context->zmq_context(), server.endpoint(), 1000);
  Send(other, Request(Op::kPull, kShardSize, 1));
  std::vector<float> values;
  const std::optional<Header> h = Receive(other, &values);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->op, Op::kPull);
  ASSERT_EQ(values.size(), static_cast<std::size_t>(kShardSize));
  EXPECT_EQ(values[0], 1.0f + 0.5f * kPulls);
  EXPECT_EQ(values[1], 1.0f);

  // Once the stuck peer closes, what it held is released.
  stuck.close();
  WaitFor([&] { return server.stats().queued_reply_bytes == 0; });
  EXPECT_EQ(server.stats().queued_reply_bytes, 0u);
  EXPECT_LE(server.stats().pinned_snapshots, 2u);
}

// Issue 22 item 3: barriers whose participant count is never reached are released with
// an error reply after barrier_timeout, and one peer may wait in at most
// max_barriers_per_peer of them.
TEST(ShardServerBounds, BarriersTimeOutAndAreCappedPerPeer) {
  auto context = NewContext();
  ServerOptions options;
  options.endpoint = "tcp://127.0.0.1:*";
  options.barrier_timeout = std::chrono::milliseconds(300);
  options.max_barriers_per_peer = 2;
  ShardServer server(context, options, std::vector<float>(8, 0.0f), NewAddRule());
  server.Start();
  zmq::socket_t peer = Dealer(context->zmq_context(), server.endpoint(), 1000);
  auto barrier = [](int64_t id, uint64_t request_id) {
    Header h = Request(Op::kBarrier, 0, request_id);
    h.clock = id;
    h.aux = 5;  // participants that never come
    return h;
  };
  Send(peer, barrier(1, 11));
  Send(peer, barrier(2, 12));
  Send(peer, barrier(3, 13));  // one past the cap: refused at once
  std::optional<Header> h = Receive(peer);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->request_id, 13u);
  EXPECT_EQ(h->op, Op::kError);
  EXPECT_EQ(h->code, ErrorCode::kRejectedByRule) << h->message;
  EXPECT_EQ(server.stats().barriers_refused, 1u);
  // The two held ones time out with an error reply each.
  for (int i = 0; i < 2; ++i) {
    h = Receive(peer);
    ASSERT_TRUE(h.has_value()) << "a barrier was held past its timeout";
    EXPECT_EQ(h->op, Op::kError);
    EXPECT_EQ(h->code, ErrorCode::kRejectedByRule) << h->message;
    EXPECT_TRUE(h->request_id == 11 || h->request_id == 12) << h->request_id;
  }
  ShardStats s = server.stats();
  EXPECT_EQ(s.barriers_timed_out, 2u);
  EXPECT_EQ(s.held_barriers, 0u);
  EXPECT_EQ(s.held, 0u);
  // The peer's count was released with them: a complete barrier (1 participant) passes.
  Header one = barrier(4, 14);
  one.aux = 1;
  Send(peer, one);
  h = Receive(peer);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->op, Op::kBarrier) << h->message;
  EXPECT_EQ(h->request_id, 14u);
}

}  // namespace
}  // namespace asgd::transport
