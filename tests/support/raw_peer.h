// A raw ZeroMQ peer of a shard server, for tests that play a hostile, buggy or stuck
// client (issue 22): request headers, a DEALER socket that barely reads, and sending and
// receiving requests frame by frame. Header-only; the test links asgd::transport.
#pragma once

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "ps/message.h"
#include "transport/zmq_util.h"

namespace asgd::testing {

using ps::DType;
using ps::Header;
using ps::Op;
using ps::Role;

// How long a raw peer's send or receive waits.
constexpr int kReceiveTimeoutMs = 5000;

// A request from worker 1 to shard 0 for [0, count); a push says it carries one frame.
inline Header Request(Op op, uint64_t count, uint64_t request_id) {
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

inline zmq::socket_t Dealer(zmq::context_t& context, const std::string& endpoint, int receive_hwm) {
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, kReceiveTimeoutMs);
  s.set(zmq::sockopt::sndtimeo, kReceiveTimeoutMs);
  s.set(zmq::sockopt::rcvhwm, receive_hwm);
  s.set(zmq::sockopt::rcvbuf, 4096);  // a peer that does not read fills this at once
  s.connect(endpoint);
  return s;
}

inline void Send(zmq::socket_t& s, const Header& h, const std::vector<float>* payload = nullptr) {
  zmq::message_t header = transport::internal::HeaderMessage(h);
  transport::internal::AnnotateSend();
  ASSERT_TRUE(s.send(header, payload ? zmq::send_flags::sndmore : zmq::send_flags::none));
  if (payload) {
    zmq::message_t m(payload->data(), payload->size() * sizeof(float));
    ASSERT_TRUE(s.send(m, zmq::send_flags::none));
  }
}

// A push of pieces, one frame each, starting at element 0.
inline void SendPieces(zmq::socket_t& s, uint64_t request_id,
                       const std::vector<std::vector<float>>& pieces) {
  uint64_t count = 0;
  for (const auto& p : pieces) count += p.size();
  Header h = Request(Op::kPush, count, request_id);
  h.frames = static_cast<uint32_t>(pieces.size());
  zmq::message_t header = transport::internal::HeaderMessage(h);
  transport::internal::AnnotateSend();
  ASSERT_TRUE(s.send(header, zmq::send_flags::sndmore));
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    zmq::message_t m(pieces[i].data(), pieces[i].size() * sizeof(float));
    ASSERT_TRUE(
        s.send(m, i + 1 < pieces.size() ? zmq::send_flags::sndmore : zmq::send_flags::none));
  }
}

// The header of the next reply (its payload, if any, copied to *values).
inline std::optional<Header> Receive(zmq::socket_t& s, std::vector<float>* values = nullptr) {
  zmq::message_t m;
  if (!s.recv(m)) return std::nullopt;
  transport::internal::AnnotateReceive();
  Header h;
  if (!ps::DecodeHeader(
           std::span<const std::byte>(static_cast<const std::byte*>(m.data()), m.size()), &h)
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

}  // namespace asgd::testing
