// Internal helpers shared by the transport implementation files (.cc only). This is the
// one header in transport/ that includes zmq.hpp; interface headers never include it.
#pragma once

#include <zmq.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "ps/message.h"
#include "transport/zero_copy.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace asgd::transport::internal {

// ThreadSanitizer sees no synchronisation inside libzmq (it is not instrumented), so
// every message would look like a data race between sender and receiver. Each send is
// annotated as a release and each receive as an acquire of one address, which tells
// TSan what ZeroMQ guarantees: what a thread wrote before sending is visible to the
// thread that receives. (The address is shared by all sockets, which is coarser than
// ZeroMQ's per-pipe ordering and so may hide a race between two threads that also
// exchange messages; tests/tsan.supp silences reports inside libzmq itself.)
inline char tsan_message_token;
inline void AnnotateSend() {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(&tsan_message_token);
#endif
}
inline void AnnotateReceive() {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(&tsan_message_token);
#endif
}

// Translates a ZeroMQ error at the transport boundary: IoError("transport: <action>
// <endpoint>: <zmq message>").
[[noreturn]] void ThrowZmqError(const zmq::error_t& e, std::string_view action,
                                std::string_view endpoint);

// A header frame: encoded on the stack, then copied into a (usually small) message.
inline zmq::message_t HeaderMessage(const ps::Header& h) {
  std::array<std::byte, ps::kMaxHeaderBytes> buf;
  const std::size_t n = ps::EncodeHeader(h, buf);
  return zmq::message_t(buf.data(), n);
}

// A frame that points at [data, data + bytes) without copying; completion counts it
// until ZeroMQ lets go. REQUIRES: bytes > 0; the buffer and *completion stay valid and
// the buffer unchanged until completion->done().
inline zmq::message_t ZeroCopyMessage(const void* data, std::size_t bytes,
                                      SendCompletion* completion) {
  completion->Add(1);
  return zmq::message_t(const_cast<void*>(data), bytes, &SendCompletion::Release, completion);
}

inline std::span<const std::byte> Bytes(const zmq::message_t& m) {
  return {static_cast<const std::byte*>(m.data()), m.size()};
}

// Applies the options every asgd socket gets: linger 0 (delivery is acknowledged by the
// application, never left to linger), the given high-water marks, and buffer sizes
// when >= 0.
void ConfigureSocket(zmq::socket_t& s, int send_hwm, int receive_hwm, int send_buffer,
                     int receive_buffer);

}  // namespace asgd::transport::internal
