// The control channel between the roles of a multi-process run and their coordinator
// (docs/architecture.md#roles-and-processes): registration, periodic reports (which double
// as heartbeats) and the
// coordinator's decisions in the replies. Messages are opaque bytes (experiments/
// control_protocol.h gives them meaning); this layer knows sockets, sizes and timeouts only.
//
//   ControlServer  one ROUTER socket the coordinator binds; Receive() hands over one
//                  request at a time with the identity of its sender, Reply() answers it.
//   ControlClient  one DEALER socket a role connects; Request() sends one message and
//                  waits for its reply. One request at a time: a timed-out request's
//                  late reply is discarded (the connection is reset), so replies never
//                  pair with the wrong request.
//
// Size limits: a message above max_message_bytes makes ZeroMQ drop the peer's
// connection (ZMQ_MAXMSGSIZE): a stranger cannot make the coordinator allocate at will.
// Multipart messages are refused (answered with nothing) rather than misread.
//
// Thread safety: each object is used by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "transport/context.h"
#include "transport/curve.h"

namespace asgd::transport {

struct ControlOptions {
  // Largest message accepted, in bytes. Default 64 MiB.
  int64_t max_message_bytes = int64_t{64} << 20;
  // How long binding retries while the address is in use. Default 5 s.
  std::chrono::milliseconds bind_retry{5000};
  // CURVE encryption and authentication (curve.h): the server's key pair and the
  // authorized client keys for a ControlServer, the server's public key and a key pair
  // for a ControlClient; checked at construction. A refused client's requests time out
  // (nullopt). Default off: plain ZeroMQ.
  CurveOptions curve;
};

class ControlServer {
 public:
  // Binds address ("tcp://HOST:PORT", "ipc://PATH", "inproc://NAME"; a port or path of
  // "*" picks one). Throws IoError/ConfigError naming the address.
  ControlServer(std::shared_ptr<Context> context, const std::string& address,
                ControlOptions options = {});
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // The bound address (with the real port or path).
  const std::string& endpoint() const;

  struct Request {
    std::string peer;  // the sender's connection identity, for Reply
    std::string text;
  };
  // The next request, or nullopt if none arrived within timeout.
  std::optional<Request> Receive(std::chrono::milliseconds timeout);
  // Answers a request; a peer that has gone is ignored.
  void Reply(const std::string& peer, const std::string& text);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

class ControlClient {
 public:
  // Connects to the coordinator at address (ZeroMQ connects in the background).
  ControlClient(std::shared_ptr<Context> context, const std::string& address,
                ControlOptions options = {});
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Sends text and waits for the reply; nullopt if none came within timeout (the
  // coordinator is not up yet, or gone).
  std::optional<std::string> Request(const std::string& text, std::chrono::milliseconds timeout);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace asgd::transport
