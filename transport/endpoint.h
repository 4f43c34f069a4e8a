// Where a socket binds or connects: one interface, one implementation per scheme
// (gloo-style): InprocEndpoint (inproc_endpoint.cc), IpcEndpoint (ipc_endpoint.cc) and
// TcpEndpoint (tcp_endpoint.cc), reachable through the factories below.
//
// The same server and client code runs over all three; an Endpoint contributes what
// differs: address syntax and checks, and socket tuning (ipc:// raises SO_SNDBUF and
// SO_RCVBUF to 4 MiB, without which it cannot keep up with tcp:// at large payloads).
//
// Bind addresses may use a wildcard port or path ("tcp://127.0.0.1:*", "ipc://*");
// Bind returns the real address (ZMQ_LAST_ENDPOINT) to hand to clients. Binding to a
// fixed port retries while the port is in use (a previous test or process may still hold
// it); prefer fixed ports below 32768, outside Linux's ephemeral range.
//
// Thread safety: Endpoint objects are immutable. Bind and Connect act on a socket that
// the calling thread must own.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace asgd::transport {

struct SocketTuning {
  // SO_SNDBUF / SO_RCVBUF in bytes for sockets on this endpoint; -1 keeps the OS default
  // (for tcp:// that is Linux's autotuning, which setting a size would switch off).
  int send_buffer_bytes = -1;
  int receive_buffer_bytes = -1;
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // "inproc", "ipc" or "tcp".
  virtual std::string_view Scheme() const = 0;
  // The address as configured, e.g. "tcp://127.0.0.1:5555".
  const std::string& address() const { return address_; }
  // Socket options every socket on this endpoint should get before bind/connect.
  SocketTuning Tuning() const { return DoTuning(); }

  // Binds a libzmq socket (the void* of zmq_socket) and returns the address actually
  // bound. Retries every 50 ms while the address is in use, until retry_for has passed.
  // Throws IoError naming the address if binding fails.
  std::string Bind(void* socket, Duration retry_for) const;
  // Connects a libzmq socket; ZeroMQ reconnects in the background until the peer is
  // up. Throws IoError naming the address for an address ZeroMQ refuses.
  void Connect(void* socket) const;

 protected:
  explicit Endpoint(std::string address) : address_(std::move(address)) {}
  virtual SocketTuning DoTuning() const = 0;
  // The address passed to zmq_bind (e.g. tcp maps "localhost" to 127.0.0.1).
  virtual std::string BindAddress() const { return address_; }

 private:
  std::string address_;
};

// Longest ipc:// path: sockaddr_un.sun_path holds 108 bytes on Linux, NUL included.
inline constexpr std::size_t kMaxIpcPathBytes = 107;

// inproc://name: threads in one process sharing a Context. REQUIRES: name not empty.
std::unique_ptr<Endpoint> NewInprocEndpoint(std::string_view name);
// ipc://path: a Unix domain socket at path ("*" lets ZeroMQ pick a temp file).
// Throws ConfigError for an empty path or one longer than the 107 bytes Linux allows.
std::unique_ptr<Endpoint> NewIpcEndpoint(std::string_view path);
// tcp://host:port; port 0 means "any free port" (bind only). Throws ConfigError for an
// empty host or a port outside [0, 65535].
std::unique_ptr<Endpoint> NewTcpEndpoint(std::string_view host, int port);

// Parses "inproc://name", "ipc://path", "tcp://host:port" (port may be "*") or a bare
// "host:port" (tcp). Throws ConfigError naming key and the value otherwise.
std::unique_ptr<Endpoint> ParseEndpoint(std::string_view address,
                                        std::string_view key = "endpoint");

}  // namespace asgd::transport
