// Explicit lifetime of caller buffers handed to ZeroMQ without a copy.
//
// A payload frame is sent with zmq_msg_init_data: ZeroMQ keeps a pointer into the
// caller's buffer and calls a free callback when it no longer needs it. Over inproc://
// that happens when the server has applied the push; over ipc:// and tcp:// when the
// I/O thread has written the last byte to the kernel, which may be shortly *after* the
// server's reply arrived. A SendCompletion counts the frames ZeroMQ still holds: the
// sender adds one per frame before sending, the free callback subtracts one, and the
// buffer is the caller's again when the count is back to zero.
//
// Thread safety: Add is called by the sending thread; Release by any ZeroMQ thread;
// done/WaitFor by any thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/clock.h"

namespace asgd::transport {

class SendCompletion {
 public:
  SendCompletion() = default;
  SendCompletion(const SendCompletion&) = delete;
  SendCompletion& operator=(const SendCompletion&) = delete;
  // REQUIRES (lifetime): done(), so that no ZeroMQ thread can still touch this object.
  ~SendCompletion() = default;

  // Called before n frames referencing the buffer are handed to ZeroMQ.
  void Add(int64_t n) { pending_.fetch_add(n, std::memory_order_relaxed); }
  // True when ZeroMQ has released every frame. Acquire: once it returns true, every
  // read ZeroMQ made of the buffer happened before.
  bool done() const { return pending_.load(std::memory_order_acquire) == 0; }
  int64_t pending() const { return pending_.load(std::memory_order_acquire); }
  // Waits until done() or until timeout passed (spinning briefly, then sleeping in
  // short steps: releases follow the last byte written within microseconds).
  // Returns done().
  bool WaitFor(Duration timeout) const;

  // The zmq_free_fn: hint is the SendCompletion. Does nothing with data.
  static void Release(void* data, void* hint);

 private:
  std::atomic<int64_t> pending_{0};
};

}  // namespace asgd::transport
