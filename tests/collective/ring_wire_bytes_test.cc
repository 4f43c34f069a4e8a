// The ring allreduce's byte counts against what gloo really puts on the wire. The ranks are
// threads of this process, so every socket of the group is one of this process's file
// descriptors: the kernel's per-socket count of payload bytes received (TCP_INFO
// tcpi_bytes_received) before and after one allreduce gives, for each ring link, what the
// sending rank wrote on it, independently of ExpectedAllreduceBytes. gloo's ring sends only
// to its left neighbour, so each rank's data crosses exactly one socket; the other sockets
// of the full mesh carry nothing in between. The wire figure also holds gloo's framing (a
// header of a few words per message, and the zero-byte ready-to-receive notifications),
// which the counters leave out on purpose: a few KiB at these sizes, far below the MiB a
// wrong segment schedule would move.

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "collective/collective.h"
#include "tests/collective/run_ranks.h"

namespace asgd::collective {
namespace {

namespace fs = std::filesystem;

// Payload bytes received so far on each TCP socket this process holds, by socket inode;
// sets *uncounted if the kernel's TCP_INFO does not count them (Linux before 4.1).
std::map<std::string, uint64_t> TcpBytesReceived(bool* uncounted) {
  std::map<std::string, uint64_t> out;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = fs::read_symlink(entry.path(), ec).string();
    if (ec || !target.starts_with("socket:[")) continue;
    const int fd = std::atoi(entry.path().filename().c_str());
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;  // not TCP
    if (len < offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received)) {
      *uncounted = true;
      continue;
    }
    out[target] = info.tcpi_bytes_received;
  }
  return out;
}

struct WireCase {
  int size;
  std::size_t count;
};

class RingWireBytes : public ::testing::TestWithParam<WireCase> {};

TEST_P(RingWireBytes, ExpectedBytesMatchTheSockets) {
  const int size = GetParam().size;  // not a binding: clang 14 cannot capture one
  const std::size_t count = GetParam().count;
  // gloo's framing on one link for one allreduce: a header of a few words for each data
  // message and each notification, one of each per segment and phase, at most 64 segments
  // a phase here (2,304 bytes measured at 16 MiB on 2 ranks, 9,216 at 64 MiB); 64 KiB is
  // far above that and far below one segment.
  constexpr uint64_t kFraming = 64 * 1024;
  // A socket that carried a ring link's data (more than the framing alone).
  constexpr uint64_t kLink = 4 * kFraming;

  auto rendezvous = NewInMemoryRendezvous();
  std::map<std::string, uint64_t> before, after;
  int phase = 0;
  bool uncounted = false;
  // All ranks are connected and idle at each sync point: the snapshots bracket exactly
  // one allreduce.
  std::barrier sync(
      size, [&]() noexcept { (phase++ == 0 ? before : after) = TcpBytesReceived(&uncounted); });
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Collective> c;
      try {
        c = Connect(testing::RankOptions(r, size, Algorithm::kRing), rendezvous);
        c->Barrier();
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
      sync.arrive_and_wait();
      try {
        if (c) {
          std::vector<float> v(count, static_cast<float>(r));
          c->Allreduce(v);
        }
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
      sync.arrive_and_wait();
      try {
        if (c) c->Barrier();
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    try {
      if (errors[static_cast<std::size_t>(r)])
        std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const std::exception& e) {
      FAIL() << "rank " << r << ": " << e.what();
    }
  }

  if (uncounted) GTEST_SKIP() << "this kernel's TCP_INFO has no tcpi_bytes_received";
  std::vector<uint64_t> wire;
  for (const auto& [socket, bytes] : after) {
    const auto it = before.find(socket);
    const uint64_t delta = bytes - (it == before.end() ? 0 : it->second);
    if (delta > kLink) wire.push_back(delta);
  }
  std::vector<uint64_t> sent, received;
  uint64_t sent_total = 0, received_total = 0;
  for (int r = 0; r < size; ++r) {
    const Traffic t = ExpectedAllreduceBytes(Algorithm::kRing, r, size, count);
    sent.push_back(t.sent);
    received.push_back(t.received);
    sent_total += t.sent;
    received_total += t.received;
  }
  EXPECT_EQ(sent_total, received_total);
  ASSERT_EQ(wire.size(), static_cast<std::size_t>(size)) << "one busy socket per ring link";
  std::sort(wire.begin(), wire.end());
  std::sort(sent.begin(), sent.end());
  for (std::size_t i = 0; i < wire.size(); ++i) {
    // The wire holds the payload plus the framing, never less than the payload.
    EXPECT_GE(wire[i], sent[i]) << "link " << i << " of " << size << " ranks, " << count
                                << " floats";
    EXPECT_LE(wire[i], sent[i] + kFraming)
        << "link " << i << " of " << size << " ranks, " << count << " floats";
  }
}

std::string CaseName(const ::testing::TestParamInfo<WireCase>& info) {
  return std::to_string(info.param.size) + "ranks_" + std::to_string(info.param.count) + "floats";
}

// Above 2N MiB (gloo's minimum of 2N segments of at most 1 MiB), where the segment count
// grows with the vector; 5,000,003 floats split evenly neither into N chunks nor 4-byte
// aligned segments.
INSTANTIATE_TEST_SUITE_P(AboveTwoNMiB, RingWireBytes,
                         ::testing::Values(WireCase{2, 4u << 20}, WireCase{2, 16u << 20},
                                           WireCase{3, 4u << 20}, WireCase{3, 16u << 20},
                                           WireCase{4, 4u << 20}, WireCase{4, 16u << 20},
                                           WireCase{3, 5'000'003}, WireCase{4, 5'000'003}),
                         CaseName);

}  // namespace
}  // namespace asgd::collective
