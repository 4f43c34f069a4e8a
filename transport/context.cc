#include "transport/context.h"

#include <zmq.hpp>

#include <string>

#include "core/error.h"
#include "transport/zap_handler.h"

namespace asgd::transport {

Context::Context(const ContextOptions& options) {
  if (options.io_threads < 0) {
    throw ConfigError("transport.io_threads", std::to_string(options.io_threads),
                      "an integer >= 0");
  }
  if (options.max_sockets < 1) {
    throw ConfigError("transport.max_sockets", std::to_string(options.max_sockets),
                      "an integer >= 1");
  }
  try {
    ctx_ = std::make_unique<zmq::context_t>(options.io_threads, options.max_sockets);
    // zmq_ctx_term must not wait for lingering messages: delivery is acknowledged by
    // the application (every socket also gets linger 0).
    ctx_->set(zmq::ctxopt::blocky, 0);
  } catch (const zmq::error_t& e) {
    throw IoError(std::string("transport: creating the ZeroMQ context: ") + e.what());
  }
}

// zmq::context_t's destructor terminates the context (retrying on EINTR); it returns
// once every socket made from it is closed. The ZAP handler's sockets close first.
Context::~Context() { zap_.reset(); }

internal::ZapHandler& Context::zap_handler() {
  std::lock_guard<std::mutex> lock(zap_mu_);
  if (zap_ == nullptr) zap_ = std::make_unique<internal::ZapHandler>(*ctx_);
  return *zap_;
}

std::shared_ptr<Context> NewContext(const ContextOptions& options) {
  return std::make_shared<Context>(options);
}

}  // namespace asgd::transport
