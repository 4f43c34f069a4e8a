#include "transport/endpoint.h"

#include <zmq.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace asgd::transport {

std::string Endpoint::Bind(void* socket, Duration retry_for) const {
  const std::string addr = BindAddress();
  const auto deadline = std::chrono::steady_clock::now() + retry_for;
  while (zmq_bind(socket, addr.c_str()) != 0) {
    const int err = errno;
    if (err == EADDRINUSE && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    throw IoError(internal::StrCat("transport: bind ", addr, ": ", zmq_strerror(err)));
  }
  char last[1024];
  size_t len = sizeof(last);
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, last, &len) != 0 || len == 0) {
    throw IoError(internal::StrCat("transport: bind ", addr,
                                   ": cannot read the bound address: ", zmq_strerror(errno)));
  }
  return std::string(last, strnlen(last, len));
}

void Endpoint::Connect(void* socket) const {
  if (zmq_connect(socket, address_.c_str()) != 0) {
    throw IoError(internal::StrCat("transport: connect ", address_, ": ", zmq_strerror(errno)));
  }
}

std::unique_ptr<Endpoint> ParseEndpoint(std::string_view address, std::string_view key) {
  const std::string k(key);
  const std::string value(address);
  auto bad = [&](const std::string& expected) { return ConfigError(k, value, expected); };
  constexpr std::string_view kExpected =
      "inproc://NAME, ipc://PATH, tcp://HOST:PORT or HOST:PORT";
  if (StartsWith(address, "inproc://")) {
    const std::string_view name = address.substr(9);
    if (name.empty()) throw bad(std::string(kExpected) + " (inproc name is empty)");
    return NewInprocEndpoint(name);
  }
  if (StartsWith(address, "ipc://")) {
    // NewIpcEndpoint names no key; the caller's key tells the user which setting to fix.
    const std::string_view path = address.substr(6);
    if (path.empty() || path.size() > kMaxIpcPathBytes) {
      throw bad(internal::StrCat("ipc://PATH with a path of 1 to ", kMaxIpcPathBytes, " bytes"));
    }
    return NewIpcEndpoint(path);
  }
  std::string_view hostport = address;
  if (StartsWith(address, "tcp://")) {
    hostport = address.substr(6);
  } else if (address.find("://") != std::string_view::npos) {
    throw bad(std::string(kExpected) + " (unknown scheme)");
  }
  const std::size_t colon = hostport.rfind(':');
  if (colon == std::string_view::npos || colon == 0) throw bad(std::string(kExpected));
  const std::string_view host = hostport.substr(0, colon);
  const std::string_view port_text = hostport.substr(colon + 1);
  int port = 0;
  if (port_text != "*") {
    auto p = ParseInt64(port_text);
    if (!p || *p < 1 || *p > 65535) throw bad("a port in [1, 65535] after the host");
    port = static_cast<int>(*p);
  }
  return NewTcpEndpoint(host, port);
}

}  // namespace asgd::transport
