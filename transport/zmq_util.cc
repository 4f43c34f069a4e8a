#include "transport/zmq_util.h"

#include "core/check.h"
#include "core/error.h"

namespace asgd::transport::internal {

void ThrowZmqError(const zmq::error_t& e, std::string_view action, std::string_view endpoint) {
  throw IoError(asgd::internal::StrCat("transport: ", action, " ", endpoint, ": ", e.what()));
}

void ConfigureSocket(zmq::socket_t& s, int send_hwm, int receive_hwm, int send_buffer,
                     int receive_buffer) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, send_hwm);
  s.set(zmq::sockopt::rcvhwm, receive_hwm);
  if (send_buffer >= 0) s.set(zmq::sockopt::sndbuf, send_buffer);
  if (receive_buffer >= 0) s.set(zmq::sockopt::rcvbuf, receive_buffer);
}

}  // namespace asgd::transport::internal
