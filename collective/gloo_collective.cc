// The gloo implementation of Collective and the rendezvous stores.

#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <gloo/algorithm.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include "collective/collective.h"

namespace asgd::collective {
namespace {

// One prefix for all of asgd's point-to-point slots, above gloo's own prefixes (0x01 to
// 0x08 in gloo/types.h) so a tagged send never matches a collective's buffer.
constexpr uint8_t kSendRecvSlotPrefix = 0x40;

// The largest vector whose ring_chunked or halving_doubling allreduce runs on the
// synchronous mesh (Connect). A synchronous pair writes with a blocking writev from the
// calling thread, and these algorithms send before they receive, so every rank may be
// writing to a peer that is itself writing: each message must fit in the socket's send
// buffer. gloo sizes that buffer to the message (SO_SNDBUF, capped by the kernel's
// net.core.wmem_max, 208 KiB by default on Linux); a rank's largest message is half the
// vector (halving_doubling's first step), 128 KiB here, with room to spare.
// halving_doubling cuts longer vectors into pieces of this size (AllreducePieceFloats,
// collective.h), so every call of it runs there; ring_chunked sends longer vectors whole
// through the asynchronous mesh, where the per-call cost is small against the transfer.
constexpr std::size_t kSyncMaxBytes = std::size_t{256} << 10;

class StoreRendezvous : public Rendezvous {
 public:
  explicit StoreRendezvous(std::unique_ptr<gloo::rendezvous::Store> store)
      : store_(std::move(store)) {}
  gloo::rendezvous::Store& store() { return *store_; }

 private:
  std::unique_ptr<gloo::rendezvous::Store> store_;
};

std::string Describe(const std::exception& e) {
  std::string what = e.what();
  // gloo's messages can span lines (EnforceNotMet appends a trace); one line is the
  // contract of an InputError.
  for (char& c : what) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return what;
}

class GlooCollective final : public Collective {
 public:
  // `context`: the pairs in gloo's default (asynchronous) mode; `sync_context`: a second
  // mesh whose pairs are in synchronous mode, for the algorithm objects of small vectors
  // (null with one rank).
  GlooCollective(const CollectiveOptions& options, std::shared_ptr<gloo::Context> context,
                 std::shared_ptr<gloo::Context> sync_context)
      : Collective(options.rank, options.size, options.algorithm),
        timeout_(options.timeout),
        context_(std::move(context)),
        sync_context_(std::move(sync_context)) {}

 protected:
  Traffic DoAllreduce(std::span<float> data, ReduceOp op) override {
    auto what = [&] {
      return "allreduce (" + std::string(AlgorithmName(algorithm())) + ", " +
             std::to_string(data.size()) + " floats)";
    };
    Guard(what, [&] {
      if (algorithm() == Algorithm::kRing) {
        gloo::AllreduceOptions opts(context_);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setOutput(data.data(), data.size());
        using Reduce = void (*)(void*, const void*, const void*, size_t);
        opts.setReduceFunction(op == ReduceOp::kMax ? static_cast<Reduce>(&gloo::max<float>)
                                                    : static_cast<Reduce>(&gloo::sum<float>));
        opts.setTimeout(timeout_);
        gloo::allreduce(opts);
      } else {
        // A vector longer than one piece goes piece by piece (AllreducePieceFloats), each
        // on the synchronous mesh: bound pieces on the caller's memory, others through the
        // cached objects. Without pieces, the whole vector is one.
        ForEachAllreducePiece(algorithm(), size(), data.size(), [&](std::size_t at, std::size_t n) {
          const std::span<float> piece = data.subspan(at, n);
          if (gloo::Algorithm* bound = Bound(piece, op)) {
            bound->run();
            return;
          }
          CacheEntry& entry = CachedAlgorithm(n, op);
          std::copy(piece.begin(), piece.end(), entry.buffer.begin());
          entry.algorithm->run();
          std::copy(entry.buffer.begin(), entry.buffer.end(), piece.begin());
        });
      }
    });
    return ExpectedAllreduceBytes(algorithm(), rank(), size(), data.size());
  }

  void DoBind(std::span<float> data, ReduceOp op) override {
    if (algorithm() == Algorithm::kRing) return;
    auto what = [&] {
      return "bind (" + std::string(AlgorithmName(algorithm())) + ", " +
             std::to_string(data.size()) + " floats)";
    };
    Guard(what, [&] {
      // One object per piece (AllreducePieceFloats), each on its part of the vector.
      ForEachAllreducePiece(algorithm(), size(), data.size(), [&](std::size_t at, std::size_t n) {
        float* piece = data.data() + at;
        std::erase_if(bound_, [&](const BoundEntry& e) {
          return e.data == piece && e.count == n && e.op == op;
        });
        bound_.push_back(BoundEntry{piece, n, op, NewAlgorithm(piece, n, op)});
      });
    });
  }

  Traffic DoBroadcast(std::span<float> data, int root) override {
    auto what = [&] {
      return "broadcast (root " + std::to_string(root) + ", " + std::to_string(data.size()) +
             " floats)";
    };
    Guard(what, [&] {
      gloo::BroadcastOneToAll<float> broadcast(context_, {data.data()}, data.size(), root);
      broadcast.run();
    });
    const uint64_t bytes = data.size_bytes();
    if (rank() == root) return {bytes * static_cast<uint64_t>(size() - 1), 0};
    return {0, bytes};
  }

  void DoBarrier() override {
    Guard([] { return std::string("barrier"); }, [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

  void DoSend(int peer, std::span<const float> data, uint32_t tag) override {
    auto what = [&] {
      return "send (to rank " + std::to_string(peer) + ", tag " + std::to_string(tag) + ")";
    };
    Guard(what, [&] {
      // gloo's buffers are not const-qualified; a send only reads.
      auto buffer = context_->createUnboundBuffer(const_cast<float*>(data.data()),
                                                  data.size_bytes());
      buffer->send(peer, gloo::Slot::build(kSendRecvSlotPrefix, tag));
      buffer->waitSend(timeout_);
    });
  }

  void DoRecv(int peer, std::span<float> data, uint32_t tag) override {
    auto what = [&] {
      return "recv (from rank " + std::to_string(peer) + ", tag " + std::to_string(tag) + ")";
    };
    Guard(what, [&] {
      auto buffer = context_->createUnboundBuffer(data.data(), data.size_bytes());
      buffer->recv(peer, gloo::Slot::build(kSendRecvSlotPrefix, tag));
      buffer->waitRecv(timeout_);
    });
  }

 private:
  // Runs one gloo call, turning whatever gloo throws into one CollectiveError. After a
  // failure the pairs are in an unknown state (a peer may have seen half a message), so
  // the handle refuses all later calls with the same error.
  // The operation's description is built only on failure, so the common path allocates
  // nothing beyond what gloo does.
  template <typename Describer, typename Call>
  void Guard(const Describer& operation, const Call& call) {
    if (failed_) std::rethrow_exception(failed_);
    try {
      call();
      return;
    } catch (const gloo::Exception& e) {
      failed_ = std::make_exception_ptr(CollectiveError(rank(), operation(), Describe(e)));
    } catch (const gloo::EnforceNotMet& e) {
      failed_ = std::make_exception_ptr(CollectiveError(rank(), operation(), Describe(e)));
    }
    std::rethrow_exception(failed_);
  }

  // gloo's class-based algorithms (ring_chunked, halving_doubling) allocate scratch and
  // register their buffers with the pairs in the constructor, and every construction takes
  // the context's next slot (context->nextSlot()). The cost is paid once per length: an
  // entry owns its buffer, and a call copies the caller's vector in and the result out.
  // The entry is chosen by the length and the reduction alone, which every rank passes
  // alike, so every rank
  // builds and evicts the same entries in the same order and the slots stay in step.
  // (Keying by the caller's address, as before, let one rank reuse an entry where a peer,
  // whose allocator had placed a fresh vector elsewhere, built a new one: the two then
  // waited on different slots until the timeout.) The copies are two passes over the
  // vector against the algorithm's several passes and its messages.
  struct CacheEntry {
    std::size_t count = 0;
    ReduceOp op = ReduceOp::kSum;
    std::vector<float> buffer;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };

  CacheEntry& CachedAlgorithm(std::size_t count, ReduceOp op) {
    for (auto& entry : cache_) {
      if (entry.count == count && entry.op == op) return entry;
    }
    constexpr std::size_t kMaxCached = 4;
    if (cache_.size() == kMaxCached) cache_.pop_front();
    CacheEntry entry;
    entry.count = count;
    entry.op = op;
    entry.buffer.assign(count, 0.0f);
    entry.algorithm = NewAlgorithm(entry.buffer.data(), count, op);
    cache_.push_back(std::move(entry));
    return cache_.back();
  }

  // gloo's algorithm object (ring_chunked or halving_doubling) on `count` floats at `data`
  // (a halving_doubling piece: AllreducePieceFloats), on the synchronous mesh up to
  // kSyncMaxBytes. The choice depends on the length alone, so every rank takes its slots
  // from the same context.
  std::unique_ptr<gloo::Algorithm> NewAlgorithm(float* data, std::size_t count, ReduceOp op) {
    if (count > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw gloo::InvalidOperationException(
          "gloo's ring_chunked and halving_doubling take at most 2^31-1 floats at one rank");
    }
    const std::shared_ptr<gloo::Context>& context =
        sync_context_ != nullptr && count * sizeof(float) <= kSyncMaxBytes ? sync_context_
                                                                           : context_;
    const std::vector<float*> ptrs{data};
    const int n = static_cast<int>(count);
    const gloo::ReductionFunction<float>* fn = op == ReduceOp::kMax
                                                   ? gloo::ReductionFunction<float>::max
                                                   : gloo::ReductionFunction<float>::sum;
    if (algorithm() == Algorithm::kRingChunked) {
      return std::make_unique<gloo::AllreduceRingChunked<float>>(context, ptrs, n, fn);
    }
    return std::make_unique<gloo::AllreduceHalvingDoubling<float>>(context, ptrs, n, fn);
  }

  // A span bound by Bind: gloo's algorithm object on the caller's own vector. gloo reads
  // and writes that vector only inside run() (its receives land in the object's own
  // scratch), so the entry may outlive the vector; it is used only for a call on the same
  // address, length and op, which is then that memory.
  struct BoundEntry {
    float* data = nullptr;
    std::size_t count = 0;
    ReduceOp op = ReduceOp::kSum;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };

  gloo::Algorithm* Bound(std::span<float> data, ReduceOp op) {
    for (BoundEntry& e : bound_) {
      if (e.data == data.data() && e.count == data.size() && e.op == op) {
        return e.algorithm.get();
      }
    }
    return nullptr;
  }

  const std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<gloo::Context> sync_context_;
  std::deque<CacheEntry> cache_;
  std::vector<BoundEntry> bound_;
  std::exception_ptr failed_;
};

}  // namespace

std::shared_ptr<Rendezvous> NewInMemoryRendezvous() {
  return std::make_shared<StoreRendezvous>(std::make_unique<gloo::rendezvous::HashStore>());
}

std::shared_ptr<Rendezvous> NewFileRendezvous(const std::string& dir) {
  struct stat st {};
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw ConfigError("collective.rendezvous_dir", dir, "an existing folder shared by all ranks");
  }
  return std::make_shared<StoreRendezvous>(std::make_unique<gloo::rendezvous::FileStore>(dir));
}

namespace {

// gloo's TCP pairs write with writev(), which raises SIGPIPE when a dead peer closed the
// connection, and the default action kills the whole process before gloo can throw. With
// SIGPIPE ignored the write fails with EPIPE, gloo throws, and the caller gets one
// CollectiveError naming the operation. A handler the program installed is left alone.
void IgnoreSigpipeUnlessHandled() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      ::signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

std::unique_ptr<Collective> Connect(const CollectiveOptions& options,
                                    std::shared_ptr<Rendezvous> rendezvous) {
  options.Validate();
  IgnoreSigpipeUnlessHandled();
  auto* store = dynamic_cast<StoreRendezvous*>(rendezvous.get());
  if (store == nullptr) {
    throw ConfigError("collective rendezvous: not made by NewInMemoryRendezvous or NewFileRendezvous");
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(store->store(), device);
    // A size-1 "mesh" has no pairs; the Collective base class never calls gloo then.
    if (options.size == 1) return std::make_unique<GlooCollective>(options, context, nullptr);
    // A second mesh, its pairs switched to gloo's synchronous mode, for the algorithm
    // objects of small vectors. In the default (asynchronous) mode every message a rank
    // receives is read by the device's event-loop thread, which then wakes the waiting
    // caller, and that thread takes the pair's lock with try_lock: while a caller holds
    // it, the level-triggered epoll returns at once and the loop spins. On a machine with
    // fewer cores than busy threads that costs milliseconds per call whatever the size
    // (4 KiB at 2 ranks on loopback: about 1 ms for halving_doubling, 5 ms for ring). A
    // synchronous pair is read and written by the calling thread itself (blocking socket
    // calls, SO_RCVTIMEO and SO_SNDTIMEO = options.timeout), so a call costs the socket
    // round trips. Only class-based algorithms can use it: gloo's unbound buffers (ring,
    // Send/Recv, Barrier) need the event loop, so they keep the first mesh. The second
    // mesh has its own keys in the store (a prefix) and its own slots.
    auto sync_context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    sync_context->setTimeout(options.timeout);
    gloo::rendezvous::PrefixStore sync_store("sync", store->store());
    sync_context->connectFullMesh(sync_store, device);
    for (int peer = 0; peer < options.size; ++peer) {
      if (peer != options.rank) sync_context->getPair(peer)->setSync(true, /*busyPoll=*/false);
    }
    return std::make_unique<GlooCollective>(options, std::move(context), std::move(sync_context));
  } catch (const gloo::Exception& e) {
    throw CollectiveError(options.rank, "connect (" + std::to_string(options.size) + " ranks)",
                          Describe(e));
  } catch (const gloo::EnforceNotMet& e) {
    throw CollectiveError(options.rank, "connect (" + std::to_string(options.size) + " ranks)",
                          Describe(e));
  }
}

}  // namespace asgd::collective
