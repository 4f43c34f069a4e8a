// tcp://: TCP between processes or machines (loopback 127.0.0.1 by default).
// ZeroMQ sets TCP_NODELAY itself; buffer sizes stay with Linux's autotuning.
#include "core/error.h"
#include "transport/endpoint.h"

namespace asgd::transport {
namespace {

class TcpEndpoint final : public Endpoint {
 public:
  TcpEndpoint(std::string_view host, int port)
      : Endpoint("tcp://" + std::string(host) + ":" + (port == 0 ? "*" : std::to_string(port))),
        bind_address_("tcp://" + std::string(host == "localhost" ? "127.0.0.1" : host) + ":" +
                      (port == 0 ? "*" : std::to_string(port))) {}
  std::string_view Scheme() const override { return "tcp"; }

 protected:
  SocketTuning DoTuning() const override { return {}; }
  // zmq_bind takes an interface or a numeric address, not a host name.
  std::string BindAddress() const override { return bind_address_; }

 private:
  std::string bind_address_;
};

}  // namespace

std::unique_ptr<Endpoint> NewTcpEndpoint(std::string_view host, int port) {
  if (host.empty() || port < 0 || port > 65535) {
    throw ConfigError("endpoint", std::string(host) + ":" + std::to_string(port),
                      "tcp://HOST:PORT with a host and a port in [1, 65535] (0 or * = any)");
  }
  return std::make_unique<TcpEndpoint>(host, port);
}

}  // namespace asgd::transport
