// inproc://: threads of one process exchanging message pointers through a shared
// Context. No kernel, no I/O thread: a zero-copy push frame reaches the server as a
// pointer into the client's buffer.
#include "core/check.h"
#include "transport/endpoint.h"

namespace asgd::transport {
namespace {

class InprocEndpoint final : public Endpoint {
 public:
  explicit InprocEndpoint(std::string_view name) : Endpoint("inproc://" + std::string(name)) {}
  std::string_view Scheme() const override { return "inproc"; }

 protected:
  SocketTuning DoTuning() const override { return {}; }  // kernel buffers play no part
};

}  // namespace

std::unique_ptr<Endpoint> NewInprocEndpoint(std::string_view name) {
  ASGD_CHECK(!name.empty(), "inproc endpoint name must not be empty");
  return std::make_unique<InprocEndpoint>(name);
}

}  // namespace asgd::transport
