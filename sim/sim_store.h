// The simulated parameter store (issue 13): shard servers and worker clients in virtual
// time. SimStore is the third adapter of ps::ShardCore, after the ZeroMQ
// ShardServer and the in-process MemoryStore; SimParamClient is the ParamClient of one
// simulated worker (a task of a sim::Scheduler). The worker rules and the server rules
// are the real ones, unchanged; only time is simulated.
//
// The shards. One ShardCore per shard of `placement` (cluster.shards, cluster.placement:
// the same split as the shard servers), each running the strategy's ServerRule for that
// shard on its part of the vector, with the scheduler's VirtualClock as its clock (so
// staleness records and rules that read time see virtual time).
//
// A call (sim/README.md's round trip). For each shard s, in shard order, the worker hands
// a request to the network (NetworkModel::SendToShard, the asynchronous one: its NIC, then
// the shard's, FIFO or, with network.sharing = fair, shared as flows);
// when it has arrived, the shard's server thread takes it (NetworkModel::Serve: FIFO
// behind the shard's earlier requests, per-message + per-element cost); when the service
// ends, the rule runs (ShardCore) and the reply is handed to the network
// (SendToWorker). The calling task is suspended until the last shard's reply arrives. So
// the rule sees requests in the order their service ends, and a pull's reply carries the
// values at that instant.
//
// Deferred replies. A rule that holds a request (synchronous rounds, SSP clocks) leaves
// it in the core; when the rule releases it — while serving another worker's request —
// the reply leaves at that instant and the waiting task resumes when it arrives.
//
// Zero-cost network (latency 0, infinite bandwidth, free server: the `zero` preset). A
// request then arrives, is served and is answered at the instant it was sent, so the
// client serves it inline (with network.sharing = fifo; under fair every message goes
// through the model's events), shard by shard, and the task does not suspend (unless the
// rule holds the request). A worker's call is atomic and workers interleave only where
// they sleep (their compute time). Consequences the tests rely on: with constant compute
// time, an asynchronous strategy's pushes arrive in worker order every round and each
// one's staleness is exactly workers - 1 after the first round; and the values equal, bit
// for bit, those of the same workers run round-robin against a MemoryStore.
//
// Bytes on the wire: a request carries 4 bytes per pushed element of the shard (a
// compressed push, SimParamClient::PushEncoded: its encoded frames for that shard), a
// reply 4 per element read; pull requests, acks and clocks carry 0 payload bytes (their
// cost is the latency and the per-message server cost). Protocol headers are not counted
// (as in Traffic). So the network model charges a compressed push for the bytes it moves,
// and the shard decodes it in ShardCore, validating every field, as the ZeroMQ server
// does.
//
// Server time (ServedElements): the shard's server is charged per element it touches, not
// per byte received: a pull the shard's n elements it reads into the reply, a push the n it
// writes (a compressed push decodes into all n before the add, so it costs the server what
// a dense push costs, however few bytes it moved), a push-pull 2n, a clock 0. A held
// request is charged all of it when it is served, before the rule holds it (a held
// push-pull's read happens at its release, but its server time was paid on arrival).
//
// The transport's CPU (ChargeTransportCpu: sim.transport_us_per_message,
// sim.transport_ns_per_byte, on the sim.cores pool the gradients use). Each message costs
// CPU at both of its ends, c(b) = per_message + b x ns_per_byte for its b payload bytes
// (the bytes above), and each charge is a request to the CorePool, first come first
// served with the workers' steps. A round trip to shard s is four charges:
//   1. client send: the calling task holds a core for c(request) (waiting for one if all
//      are busy), shard after shard; each request goes on the wire when its CPU ends;
//   2. shard receive: when a request has fully arrived, the shard's I/O thread holds a
//      core for c(request); then the request queues for the shard's server thread
//      (network.server_*: its own time, not a core's) and the rule runs;
//   3. shard reply send: the I/O thread holds a core for c(reply), then the reply goes on
//      the wire;
//   4. client receive: when a reply has arrived, a core for c(reply) (several shards'
//      replies may take different cores at once); the call returns when the last reply's
//      receive CPU ends.
// Each shard has one I/O thread (as a ZeroMQ context has by default) that does its
// receives and reply sends one at a time, in the order they were asked for, beside the
// server thread that runs the rule: so a shard receives one request while its server
// thread serves the previous one, and a rule that releases several held requests at once
// sends their replies one after the other. The wire (the network model) and the cores
// are different resources: a message's CPU at its sender precedes its wire time, the
// receiver's CPU follows its arrival, and the NICs are booked only while the message
// moves. With sim.cores = 0 (a machine per worker and per shard server) every charge
// still adds its time but none waits for a core: each end's CPU is its own machine's
// (a shard's I/O thread stays one thread). Pulls, acks and clocks carry 0 payload bytes,
// so they cost per_message at each end. Without a charge (both zero, the default) none
// of this happens: the code path, the events and so every result are the same as before
// the charge existed.
//
// Shutdown fails every held request (kShuttingDown, the reply sent at once) and answers
// every later request the same way without touching the network; values() still reads.
//
// Thread safety: none. A SimStore, its clients and the scheduler belong to one thread;
// client calls must come from a task of that scheduler (they suspend it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "compression/compressor.h"
#include "ps/param_client.h"
#include "ps/param_store.h"
#include "ps/placement.h"
#include "ps/shard_core.h"
#include "ps/staleness.h"
#include "sim/core_pool.h"
#include "sim/network_model.h"
#include "sim/scheduler.h"

namespace asgd::sim {

class SimStore final : public ps::ParamStore {
 public:
  using RuleFactory = std::function<std::unique_ptr<ps::ServerRule>(uint32_t shard)>;

  // sched and network are not owned and must outlive the store; sink may be null.
  // network must have been built for placement.num_shards() shards (and the workers'
  // ids). REQUIRES: initial.size() == placement.total_elements().
  SimStore(sim::Scheduler* sched, sim::NetworkModel* network, ps::Placement placement,
           std::span<const float> initial, const RuleFactory& rules,
           ps::StalenessSink* sink = nullptr);
  ~SimStore() override;
  SimStore(const SimStore&) = delete;
  SimStore& operator=(const SimStore&) = delete;

  int64_t size() const override { return placement_.total_elements(); }
  int num_shards() const { return placement_.num_shards(); }
  const ps::Placement& placement() const { return placement_; }
  // The virtual clock the shards use (the scheduler's time).
  const Clock& clock() const { return clock_; }
  // True when requests are served inline (the zero-cost network above, no transport
  // CPU).
  bool inline_service() const { return inline_; }

  // Charges each message's CPU at its two ends on `cores` (the header comment; not owned,
  // must outlive the store; the pool the workers' steps use). Without a charge
  // (!cpu.active()) nothing changes. REQUIRES: before the first request; cores != null.
  void ChargeTransportCpu(CorePool* cores, const TransportCpu& cpu);

  // The whole vector, gathered from the shards (no simulated time passes).
  void ReadValues(std::span<float> out) const;
  std::vector<float> values() const;
  uint64_t version(int shard) const;
  // Summed over shards.
  ps::StoreStats stats() const override;

  void Shutdown();

  // ParamStore: "N simulated shards", transport "sim". Read gathers the shards (no
  // virtual time passes); Snapshot and Restore are the shards' own (no time passes, and
  // nothing is held: one thread runs the simulation); Close is Shutdown.
  std::string Describe() const override;
  std::string transport() const override { return "sim"; }
  int ps_shards() const override { return num_shards(); }
  int snapshot_count() const override { return num_shards(); }
  std::unique_ptr<ps::ParamClient> NewClient(uint32_t id, ps::Role role) override;
  ps::Status Read(std::span<float> out) override {
    ReadValues(out);
    return ps::Status::Ok();
  }
  std::vector<ps::ShardSnapshot> Snapshot(const std::function<void()>& while_held = {}) override;
  void Restore(const std::vector<ps::ShardSnapshot>& snapshots, const std::string& source) override;
  void Close() override { Shutdown(); }
  bool shut_down() const { return shut_down_; }

  // One client call (SimParamClient's). versions[s]: the version of shard s the worker
  // last pulled; oldest[s]: its window mark, for pushes. On success a read fills out and
  // *reply_versions (per shard, the version read). Suspends the calling task.
  struct Call;
  ps::Status Request(Call& call);

  // The parameter elements shard s touches to serve a request of op (the server time's
  // unit, see the header comment).
  int64_t ServedElements(int shard, ps::Op op) const;

  // One request as a shard served it, for traces and tests: reported at the virtual
  // instant its service ended and the rule ran (a push's apply), after the rule (so a
  // staleness record of the push comes first). version: the shard's version after the
  // rule; for a read that was not held, the version its reply carries.
  struct Service {
    int shard = 0;
    ps::Op op = ps::Op::kPull;
    uint32_t worker = 0;
    Duration sent{};    // when the worker made the call (Call::sent)
    Duration served{};  // now
    int64_t request_bytes = 0;
    int64_t elements = 0;  // ServedElements
    uint64_t version = 0;
    bool held = false;  // the rule holds the reply
  };
  // Empty: none (the default).
  void SetServiceObserver(std::function<void(const Service&)> observer) {
    observer_ = std::move(observer);
  }

 private:
  class Replies;
  struct Shard;

  void Handle(int shard, Call& call);
  void Reply(int shard, Call& call, int64_t bytes);
  // With a transport charge: a job for shard s's I/O thread (FIFO, one at a time): hold a
  // core for `cpu`, then run `then`.
  void ShardIo(int shard, Duration cpu, std::function<void()> then);
  void NextShardIo(int shard);
  void Fill(int shard, Call& call, const ps::ReplyBuffer* payload) const;
  int64_t RequestBytes(int shard, const Call& call) const;

  sim::Scheduler* sched_;
  sim::NetworkModel* network_;
  sim::VirtualClock clock_;
  ps::Placement placement_;
  bool inline_ = false;
  bool shut_down_ = false;
  CorePool* cores_ = nullptr;  // with a transport charge only
  TransportCpu cpu_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::function<void(const Service&)> observer_;
};

// What one SimParamClient call carries (internal to SimStore and its client; public so
// that both can name it).
struct SimStore::Call {
  ps::Op op = ps::Op::kPull;
  uint32_t worker = 0;
  uint64_t request_id = 0;
  int64_t step = 0;
  std::span<const float> update;
  // A compressed push: one part per shard (PushParts()), instead of update. Empty: dense.
  std::span<const compression::Encoded> encoded;
  std::span<float> out;
  std::span<const uint64_t> versions;               // per shard
  std::span<const std::optional<uint64_t>> oldest;  // per shard (pushes)
  std::vector<uint64_t>* reply_versions = nullptr;  // per shard
  ps::Status status;
  bool dropped = false;
  sim::Completion* done = nullptr;
  sim::TaskId task = sim::kNoTask;
  Duration sent{};  // when the worker made the call (its send CPU, if any, follows)
};

// A simulated worker's client: SimStore::Request per call, versions kept per shard (as
// the ZeroMQ client does).
class SimParamClient final : public ps::ParamClient {
 public:
  // store is not owned. REQUIRES: worker < the network model's workers.
  SimParamClient(SimStore* store, uint32_t worker);
  int64_t size() const override { return store_->size(); }
  int64_t dropped_pushes() const override { return dropped_; }
  const std::vector<uint64_t>& pulled_versions() const { return pulled_; }
  // One part per shard of the store's placement, as the ZeroMQ client splits a push.
  std::vector<ps::PushPart> PushParts() const override;
  bool TakesEncodedPushes() const override { return true; }

 protected:
  ps::Status DoPull(std::span<float> out) override;
  ps::Status DoPush(std::span<const float> update, int64_t step) override;
  ps::Status DoPushPull(std::span<const float> update, std::span<float> out, int64_t step) override;
  ps::Status DoPushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                           int64_t step) override;
  ps::Status DoSendClock(int64_t clock) override;
  void DoMarkWindowStart() override;

 private:
  ps::Status Send(ps::Op op, int64_t step, std::span<const float> update, std::span<float> out,
                  std::span<const compression::Encoded> encoded = {});

  SimStore* store_;
  uint32_t worker_;
  uint64_t next_request_ = 1;
  std::vector<uint64_t> pulled_;                 // per shard
  std::vector<std::optional<uint64_t>> window_;  // per shard: the mark, if any
  std::vector<std::optional<uint64_t>> oldest_;  // scratch: this push's oldest versions
  std::vector<uint64_t> reply_;                  // scratch
  int64_t dropped_ = 0;
};

}  // namespace asgd::sim
