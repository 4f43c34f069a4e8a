#include "transport/zero_copy.h"

#include <chrono>
#include <thread>

namespace asgd::transport {

bool SendCompletion::WaitFor(Duration timeout) const {
  // Not std::atomic::wait/notify: the free callback would have to notify after its
  // decrement, when the waiter may already have destroyed this object.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int spin = 0; !done(); ++spin) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    if (spin < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(spin < 256 ? 20 : 200));
    }
  }
  return true;
}

void SendCompletion::Release(void* /*data*/, void* hint) {
  static_cast<SendCompletion*>(hint)->pending_.fetch_sub(1, std::memory_order_release);
}

}  // namespace asgd::transport
