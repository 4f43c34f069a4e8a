#include "transport/control.h"

#include "core/check.h"
#include "core/error.h"
#include "transport/endpoint.h"
#include "transport/zap_handler.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

using internal::AnnotateReceive;
using internal::AnnotateSend;

namespace {

std::string Text(const zmq::message_t& m) { return std::string(static_cast<const char*>(m.data()), m.size()); }

void Tune(zmq::socket_t& s, const Endpoint& e, const ControlOptions& o) {
  const SocketTuning t = e.Tuning();
  internal::ConfigureSocket(s, 1000, 1000, t.send_buffer_bytes, t.receive_buffer_bytes);
  s.set(zmq::sockopt::maxmsgsize,
        o.max_message_bytes + (o.curve.enabled ? internal::kCurveFrameOverhead : 0));
}

}  // namespace

class ControlServer::Impl {
 public:
  Impl(std::shared_ptr<Context> context, const std::string& address, ControlOptions options)
      : context_(std::move(context)) {
    const auto endpoint = ParseEndpoint(address, "cluster.coordinator");
    CheckCurveServer(options.curve);
    if (options.curve.enabled && endpoint->Scheme() == "inproc") {
      throw ConfigError("cluster.coordinator", address,
                        "an ipc:// or tcp:// address for a CURVE server (inproc:// connections "
                        "are never authenticated)");
    }
    try {
      socket_ = zmq::socket_t(context_->zmq_context(), zmq::socket_type::router);
      Tune(socket_, *endpoint, options);
      // A reply to a peer that has gone is dropped, not an error.
      socket_.set(zmq::sockopt::router_mandatory, false);
    } catch (const zmq::error_t& e) {
      internal::ThrowZmqError(e, "creating the control socket for", address);
    }
    if (options.curve.enabled) {
      curve_ = std::make_unique<internal::CurveServerSecurity>(*context_, socket_, options.curve,
                                                               "the control channel");
    }
    bound_ = endpoint->Bind(socket_.handle(), options.bind_retry);
    if (curve_ != nullptr) curve_->SetAddress(bound_);
  }

  std::optional<Request> Receive(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      socket_.set(zmq::sockopt::rcvtimeo, static_cast<int>(std::max<int64_t>(0, left.count())));
      zmq::message_t id, body;
      try {
        if (!socket_.recv(id)) return std::nullopt;
        if (!id.more()) continue;  // cannot happen on a ROUTER; be safe
        (void)socket_.recv(body);
        AnnotateReceive();
        if (body.more()) {
          // Not ours: drain the rest and ignore the message.
          zmq::message_t rest;
          do {
            (void)socket_.recv(rest);
          } while (rest.more());
          continue;
        }
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        internal::ThrowZmqError(e, "receive on", bound_);
      }
      return Request{Text(id), Text(body)};
    }
  }

  void Reply(const std::string& peer, const std::string& text) {
    try {
      AnnotateSend();
      if (!socket_.send(zmq::buffer(peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) return;
      (void)socket_.send(zmq::buffer(text), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      if (e.num() == EHOSTUNREACH) return;
      internal::ThrowZmqError(e, "reply on", bound_);
    }
  }

  const std::string& endpoint() const { return bound_; }

 private:
  std::shared_ptr<Context> context_;
  zmq::socket_t socket_;
  std::unique_ptr<internal::CurveServerSecurity> curve_;  // with options.curve.enabled
  std::string bound_;
};

ControlServer::ControlServer(std::shared_ptr<Context> context, const std::string& address,
                             ControlOptions options)
    : impl_(std::make_unique<Impl>(std::move(context), address, options)) {}
ControlServer::~ControlServer() = default;
const std::string& ControlServer::endpoint() const { return impl_->endpoint(); }
std::optional<ControlServer::Request> ControlServer::Receive(std::chrono::milliseconds timeout) {
  return impl_->Receive(timeout);
}
void ControlServer::Reply(const std::string& peer, const std::string& text) {
  impl_->Reply(peer, text);
}

class ControlClient::Impl {
 public:
  Impl(std::shared_ptr<Context> context, const std::string& address, ControlOptions options)
      : context_(std::move(context)),
        endpoint_(ParseEndpoint(address, "cluster.coordinator")),
        options_(options) {
    CheckCurveClient(options_.curve);
    Connect();
  }

  std::optional<std::string> Request(const std::string& text, std::chrono::milliseconds timeout) {
    try {
      AnnotateSend();
      if (!socket_.send(zmq::buffer(text), zmq::send_flags::dontwait)) {
        Reset();  // the queue to the coordinator is full: it is not reading
        return std::nullopt;
      }
      socket_.set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout.count()));
      zmq::message_t reply;
      if (!socket_.recv(reply)) {
        Reset();  // a late reply must not answer the next request
        return std::nullopt;
      }
      AnnotateReceive();
      std::string out = Text(reply);
      while (reply.more()) (void)socket_.recv(reply);  // not ours: keep the first frame
      return out;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) {
        Reset();
        return std::nullopt;
      }
      internal::ThrowZmqError(e, "request to", endpoint_->address());
    }
  }

 private:
  void Connect() {
    try {
      socket_ = zmq::socket_t(context_->zmq_context(), zmq::socket_type::dealer);
      Tune(socket_, *endpoint_, options_);
      if (options_.curve.enabled) internal::ConfigureCurveClient(socket_, options_.curve);
    } catch (const zmq::error_t& e) {
      internal::ThrowZmqError(e, "creating the control socket for", endpoint_->address());
    }
    endpoint_->Connect(socket_.handle());
  }
  void Reset() {
    socket_.close();
    Connect();
  }

  std::shared_ptr<Context> context_;
  std::unique_ptr<Endpoint> endpoint_;
  ControlOptions options_;
  zmq::socket_t socket_;
};

ControlClient::ControlClient(std::shared_ptr<Context> context, const std::string& address,
                             ControlOptions options)
    : impl_(std::make_unique<Impl>(std::move(context), address, options)) {}
ControlClient::~ControlClient() = default;
std::optional<std::string> ControlClient::Request(const std::string& text,
                                                  std::chrono::milliseconds timeout) {
  return impl_->Request(text, timeout);
}

}  // namespace asgd::transport
