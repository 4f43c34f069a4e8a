// A ZeroMQ context, owned explicitly (no process-wide singleton: libraries take what they use
// as arguments, docs/architecture.md#configuration).
//
// Servers and clients that talk over inproc:// must share one Context; over ipc:// and
// tcp:// each process (or each test) may use its own. Servers and clients hold a
// shared_ptr to their Context, so it outlives every socket made from it.
//
// Thread safety: a Context may be shared by any number of threads.
#pragma once

#include <memory>
#include <mutex>

namespace zmq {
class context_t;  // zmq.hpp stays out of interface headers
}

namespace asgd::transport {

namespace internal {
class ZapHandler;  // transport/zap_handler.h
}

struct ContextOptions {
  // ZeroMQ I/O threads. They move bytes for ipc:// and tcp:// (so a send returns before
  // the bytes are on the wire and compute overlaps communication); inproc:// uses none.
  // Default 1, enough for several GB/s.
  int io_threads = 1;
  // Most sockets the context may open. Default 1023 (libzmq's default).
  int max_sockets = 1023;
};

class Context {
 public:
  // Throws ConfigError for io_threads < 0 or max_sockets < 1.
  explicit Context(const ContextOptions& options = {});
  // Terminates the ZeroMQ context. Returns once every socket made from it is closed,
  // which the shared_ptr ownership above guarantees.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // The cppzmq context, for transport internals.
  zmq::context_t& zmq_context() const { return *ctx_; }
  // The context's ZAP handler for CURVE servers (curve.h), started on first use.
  // Thread-safe. Throws IoError if it cannot start.
  internal::ZapHandler& zap_handler();

 private:
  std::unique_ptr<zmq::context_t> ctx_;
  std::mutex zap_mu_;
  // Declared after ctx_, so destroyed (its sockets closed) before the context ends.
  std::unique_ptr<internal::ZapHandler> zap_;
};

std::shared_ptr<Context> NewContext(const ContextOptions& options = {});

}  // namespace asgd::transport
