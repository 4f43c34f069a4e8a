// Internal to transport/ (.cc files only, like zmq_util.h): the pieces of CURVE that
// touch sockets. See curve.h for the contract.
//
//   ZapHandler            one per Context (Context::zap_handler()): a thread that answers
//                         ZAP requests (RFC 27) on inproc://zeromq.zap.01 and reads the
//                         handshake failures of the CURVE server sockets (socket
//                         monitors), counting and logging refusals per server socket.
//   CurveServerSecurity   what a CURVE server socket holds: its registration (a ZAP
//                         domain with its authorized keys) for as long as it lives.
//   ConfigureCurveClient  the client's socket options.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "core/thread_annotations.h"
#include "transport/context.h"
#include "transport/curve.h"

namespace asgd::transport::internal {

// Bytes CURVE adds to a frame on the wire (the MESSAGE command: name, nonce, box
// overhead, flags: 33), rounded up. ZMQ_MAXMSGSIZE applies to the wire frame, so a
// CURVE socket allows this much more than its largest valid message.
inline constexpr int64_t kCurveFrameOverhead = 64;

struct ZapDomain;

class ZapHandler {
 public:
  // Binds inproc://zeromq.zap.01 in context and starts the thread. Throws IoError.
  explicit ZapHandler(zmq::context_t& context);
  // Stops the thread and closes its sockets (so the context can terminate).
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // Registers a server socket before it binds: sets its ZAP domain, and monitors its
  // handshake failures. keys: Z85 public keys, each checked (ConfigError); what names
  // the server in log lines. The domain is known until Unregister.
  std::shared_ptr<ZapDomain> Register(zmq::socket_t& server, const std::vector<std::string>& keys,
                                      std::string what);
  void Unregister(const std::shared_ptr<ZapDomain>& domain);

 private:
  struct Monitor;
  void Loop();
  // Answers one ZAP request (frames already read).
  void Answer(std::vector<zmq::message_t>& request);
  // Reads one event from a monitor socket.
  void ReadEvent(Monitor& m);

  zmq::context_t& context_;
  zmq::socket_t zap_;  // the handler thread's once it runs
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::shared_ptr<ZapDomain>> domains_ ASGD_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Monitor>> new_monitors_ ASGD_GUARDED_BY(mu_);
  uint64_t next_domain_ ASGD_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

// REQUIRES: options.enabled and CheckCurveServer(options) passed.
class CurveServerSecurity {
 public:
  // Makes socket a CURVE server accepting options.authorized_clients; call before
  // binding. what names the server in log lines ("shard 3", "control channel").
  CurveServerSecurity(Context& context, zmq::socket_t& socket, const CurveOptions& options,
                      std::string what);
  ~CurveServerSecurity();
  CurveServerSecurity(const CurveServerSecurity&) = delete;
  CurveServerSecurity& operator=(const CurveServerSecurity&) = delete;

  // The bound address, for log lines.
  void SetAddress(const std::string& address);
  // Connections refused so far.
  uint64_t refused() const;

 private:
  Context& context_;
  std::shared_ptr<ZapDomain> domain_;
};

// Makes socket a CURVE client of options.server_public_key with the client key pair;
// call before connecting. REQUIRES: options.enabled and CheckCurveClient(options) passed.
void ConfigureCurveClient(zmq::socket_t& socket, const CurveOptions& options);

}  // namespace asgd::transport::internal
