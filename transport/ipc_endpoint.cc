// ipc://: Unix domain sockets between processes on one machine.
#include "core/error.h"
#include "transport/endpoint.h"

namespace asgd::transport {
namespace {

// With Linux's default socket buffers (~200 KiB) a Unix socket moves large messages in
// many small steps and falls well behind tcp loopback; 4 MiB closes the gap (measured
// in benchmarks/transport_bench.cc).
constexpr int kIpcBufferBytes = 4 << 20;

class IpcEndpoint final : public Endpoint {
 public:
  explicit IpcEndpoint(std::string_view path) : Endpoint("ipc://" + std::string(path)) {}
  std::string_view Scheme() const override { return "ipc"; }

 protected:
  SocketTuning DoTuning() const override { return {kIpcBufferBytes, kIpcBufferBytes}; }
};

}  // namespace

std::unique_ptr<Endpoint> NewIpcEndpoint(std::string_view path) {
  if (path.empty() || path.size() > kMaxIpcPathBytes) {
    throw ConfigError("endpoint", "ipc://" + std::string(path),
                      "ipc://PATH with a path of 1 to " + std::to_string(kMaxIpcPathBytes) +
                          " bytes");
  }
  return std::make_unique<IpcEndpoint>(path);
}

}  // namespace asgd::transport
