// hogwild — lock-free shared-memory SGD (Recht, Ré, Wright, Niu, "Hogwild!", NIPS 2011;
// docs/algorithms.md#hogwild).
//
// Worker threads share one parameter vector with no lock: each reads it (element by
// element, so reads may mix versions), computes a mini-batch gradient at what it read and
// adds −η·g into the vector element by element. The per-epoch backoff β is
// algorithm.lr_decay.
//
// Dense step (every model but the sparse case below). With the plain sgd optimizer and no
// weight decay: g ← ∇L_B(θ); g ← −η·g in place; then one push-pull in place, which this
// store does in one pass over the vector (AddAndRead): each element gets its add and the
// gradient's buffer gets the value the add left, so the next θ is read in the same pass
// that writes (the worker's two buffers then swap roles). One worker is sequential SGD bit
// for bit (same −η·g, same add). Other optimizers (momentum, adam, weight decay, ...): the
// optimizer's step on the worker's θ, then a push-pull of its update into θ. Per step and
// worker the plain SGD step costs the gradient, the −η·g pass, the NaN/Inf check of the
// push and the fused pass (read and write g's buffer, read and write the shared vector).
// The fused pass is memory-bound: on the MNIST MLP the shared vector comes from L3 every
// step (results/bench/README.md, "Hogwild (issue 16)").
//
// Sparse models (logistic regression on LIBSVM data, with the plain sgd optimizer and no
// weight decay): a worker reads only the coordinates its mini-batch touches, and adds
// −η·g at those coordinates only, as the paper's sparse SVM/logistic experiments do.
//
// How a coordinate is added (algorithm.hogwild_add; the paper allows both,
// docs/algorithms.md#hogwild):
//   atomic  per-element atomic read-modify-write (a compare-and-swap loop on x86, which
//           has no float atomic add); zeros are skipped (never written): nothing is lost,
//           θ_final − θ_init = Σ pushed updates up to rounding order (invariant 3).
//   racy    load, add, store with no lock prefix: an add that another thread makes to the
//           same coordinate between the load and the store is overwritten (the
//           "overwrites" the paper allows; invariant 4: only statistical checks). The
//           push-pull's pass goes a vector at a time (16 floats with AVX-512, 8 with AVX,
//           as inline assembly: each aligned 4-byte element is read and written whole, as
//           the x86 guarantees for aligned doublewords); its tail, plain pushes, sparse
//           adds and builds without AVX use per-element relaxed atomic loads and stores. No data
//           race in C++'s sense, so ThreadSanitizer stays quiet either way (it does not see the
//           assembly). Every element is written, zeros included.
// On a dense model every step writes every coordinate, so atomic pays one CAS per
// parameter per step (on the MNIST MLP more than the gradient itself) and racy collides
// whenever two threads add at once; on sparse data the two rarely differ.
//
// Staleness: pushes by other threads between a worker's read and its write (the paper's
// delay τ), from a shared push counter; one record per push. A fused push-pull's read
// counts as made at its own push's version.
//
// Compression (compression.name, issue 17): refused: no push at all (one shared vector).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "algorithms/strategy.h"
#include "core/clock.h"
#include "ps/param_store.h"
#include "ps/staleness.h"

namespace asgd::algorithms {

class HogwildStore final : public ps::ParamStore {
 public:
  static constexpr std::size_t kCacheLine = 64;

  enum class AddMode { kAtomic, kRacy };
  // Parses algorithm.hogwild_add ("atomic" or "racy"); ConfigError otherwise.
  static AddMode ParseAddMode(const std::string& name);
  // The mode hogwild's setting algorithm.hogwild_add asks for.
  static AddMode AddModeOf(const StrategyOptions& o);

  HogwildStore(std::span<const float> initial, const Clock* clock, ps::StalenessSink* sink,
               AddMode mode = AddMode::kAtomic, bool sparse = false);
  AddMode mode() const { return mode_; }
  int64_t size() const override { return static_cast<int64_t>(n_); }
  // A copy (relaxed loads: a consistent snapshot only when no thread writes).
  std::vector<float> values() const;
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // A resumed run's version (the checkpoint's); call before any worker runs.
  void RestoreVersion(uint64_t version) { version_.store(version, std::memory_order_release); }

  // out = the values (relaxed loads, element by element).
  void Copy(std::span<float> out) const;
  // values += update and out = the values each element was left at by this add (the
  // add's own result: other threads' adds to the element before it are in it, later ones
  // are not), in one pass over the vector: the push and the pull of a worker step
  // together. As Add with a Read after it, except that the read sees no add made after
  // this one's element. REQUIRES: update and out of size(); out is update itself
  // (each element is read before it is written) or does not overlap it.
  uint64_t AddAndRead(std::span<const float> update, std::span<float> out);
  // out[i] = values[i] for i in indices (relaxed loads). REQUIRES: indices < size().
  void ReadAt(std::span<const int64_t> indices, std::span<float> out) const;
  // Adds update element by element (atomic, relaxed); returns the version at the write.
  uint64_t Add(std::span<const float> update);
  // values[indices[i]] += update[i] (atomic, relaxed); returns the version at the write.
  uint64_t AddAt(std::span<const int64_t> indices, std::span<const float> update);
  void Record(uint32_t worker, int64_t step, uint64_t pulled, uint64_t applied);

  int64_t records() const { return records_.load(); }
  int64_t staleness_sum() const { return staleness_sum_.load(); }

  // ParamStore: "one shared vector (lock-free[, sparse updates])", transport "shared", no
  // server (ps_shards 0), one snapshot: the vector copied after while_held ran (workers may
  // write meanwhile: Hogwild's own racy view). Close does nothing (no rule holds a worker).
  std::string Describe() const override;
  std::string transport() const override { return "shared"; }
  int ps_shards() const override { return 0; }
  int snapshot_count() const override { return 1; }
  std::unique_ptr<ps::ParamClient> NewClient(uint32_t id, ps::Role role) override;
  ps::Status Read(std::span<float> out) override {
    Copy(out);
    return ps::Status::Ok();
  }
  std::vector<ps::ShardSnapshot> Snapshot(const std::function<void()>& while_held = {}) override;
  void Restore(const std::vector<ps::ShardSnapshot>& snapshots, const std::string& source) override;
  void Close() override {}
  // Pushes (the version), staleness records and their sum; no rule: nothing dropped.
  ps::StoreStats stats() const override;

 private:
  struct AlignedDelete {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{kCacheLine}); }
  };

  // Read by every access and never written after construction: a line of their own, so
  // the counters' writes do not evict them from the other cores.
  std::size_t n_;
  AddMode mode_;
  bool sparse_;
  std::unique_ptr<float[], AlignedDelete> values_;
  const Clock* clock_;
  ps::StalenessSink* sink_;
  // Written by every push.
  alignas(kCacheLine) std::atomic<uint64_t> version_{0};
  std::atomic<int64_t> records_{0};
  std::atomic<int64_t> staleness_sum_{0};
};

// One per worker thread; on a line of its own (its traffic counters and pulled version
// are written every step).
class alignas(HogwildStore::kCacheLine) HogwildClient final : public ps::ParamClient {
 public:
  HogwildClient(HogwildStore* store, uint32_t worker) : store_(store), worker_(worker) {}
  int64_t size() const override { return store_->size(); }
  int64_t dropped_pushes() const override { return 0; }

 protected:
  ps::Status DoPull(std::span<float> out) override;
  ps::Status DoPush(std::span<const float> update, int64_t step) override;
  ps::Status DoPushPull(std::span<const float> update, std::span<float> out, int64_t step) override;
  ps::Status DoSendClock(int64_t) override { return ps::Status::Ok(); }
  // Only the listed coordinates are read or written.
  ps::Status DoPullSparse(std::span<const int64_t> indices, std::span<float> out) override;
  ps::Status DoPushSparse(std::span<const int64_t> indices, std::span<const float> values,
                          int64_t step) override;

 private:
  HogwildStore* store_;
  uint32_t worker_;
  uint64_t pulled_ = 0;
};

}  // namespace asgd::algorithms
