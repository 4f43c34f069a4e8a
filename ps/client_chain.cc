#include "ps/client_chain.h"

#include <utility>

#include "core/check.h"
#include "core/rng.h"
#include "ps/param_client_wrapper.h"

namespace asgd::ps {
namespace {

// Times every call on the worker's clock: two clock reads per call. before_call runs
// first, outside the timing.
class TimedClient final : public ParamClientWrapper {
 public:
  TimedClient(ParamClient* target, const ClientChainOptions& o)
      : ParamClientWrapper(target),
        clock_(*o.clock),
        total_(o.total),
        before_call_(o.before_call) {}
  TimedClient(std::unique_ptr<ParamClient> target, const ClientChainOptions& o)
      : ParamClientWrapper(std::move(target)),
        clock_(*o.clock),
        total_(o.total),
        before_call_(o.before_call) {}

 protected:
  Status DoPull(std::span<float> out) override {
    return Timed([&] { return ParamClientWrapper::DoPull(out); });
  }
  Status DoPush(std::span<const float> update, int64_t step) override {
    return Timed([&] { return ParamClientWrapper::DoPush(update, step); });
  }
  Status DoPushPull(std::span<const float> update, std::span<float> out, int64_t step) override {
    return Timed([&] { return ParamClientWrapper::DoPushPull(update, out, step); });
  }
  Status DoSendClock(int64_t clock) override {
    return Timed([&] { return ParamClientWrapper::DoSendClock(clock); });
  }
  Status DoPushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                       int64_t step) override {
    return Timed([&] { return ParamClientWrapper::DoPushEncoded(parts, out, step); });
  }
  Status DoPullSparse(std::span<const int64_t> indices, std::span<float> out) override {
    return Timed([&] { return ParamClientWrapper::DoPullSparse(indices, out); });
  }
  Status DoPushSparse(std::span<const int64_t> indices, std::span<const float> values,
                      int64_t step) override {
    return Timed([&] { return ParamClientWrapper::DoPushSparse(indices, values, step); });
  }

 private:
  template <typename F>
  Status Timed(F&& call) {
    if (before_call_) before_call_();
    const Duration t0 = clock_.Now();
    Status st = call();
    *total_ += clock_.Now() - t0;
    return st;
  }

  const Clock& clock_;
  Duration* total_;
  std::function<void()> before_call_;
};

}  // namespace

ClientChain NewClientChain(ParamClient* store, const ClientChainOptions& options) {
  ASGD_CHECK(store != nullptr && options.clock != nullptr && options.total != nullptr,
             "a client chain needs the store's client, a clock and a total");
  ClientChain chain;
  std::shared_ptr<const compression::Compressor> compressor =
      compression::NewCompressor(options.compression);
  if (compressor == nullptr) {
    chain.client = std::make_unique<TimedClient>(store, options);
    return chain;
  }
  auto compressing = std::make_unique<CompressingClient>(
      store, std::move(compressor), options.compression.error_feedback,
      DeriveSeed(options.seed, "compression", static_cast<uint64_t>(options.worker)),
      options.tensors);
  chain.compressing = compressing.get();
  chain.client = std::make_unique<TimedClient>(std::move(compressing), options);
  return chain;
}

}  // namespace asgd::ps
