// Internal to the worker-side client (transport/ps_client.h): ClientCore, the state
// machine behind PsClient and RequestHandle -- one DEALER socket per shard, requests split
// into per-shard parts, replies matched by request id, timeouts and reconnects.
// Definitions in client_core.cc. Not part of the API.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/placement.h"
#include "transport/endpoint.h"
#include "transport/ps_client.h"
#include "transport/zero_copy.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

namespace internal {

// Where one shard's part of a request goes.
struct RequestPart {
  int shard = -1;
  int64_t offset = 0;  // shard-local
  int64_t count = 0;
  // Destination of returned values (pull, push-pull): `out` is either the caller's flat
  // buffer (flat = true: scatter over the shard's ranges) or a contiguous buffer.
  float* out = nullptr;
  bool flat = false;
  // A reply in chunks (message.h, "Chunked replies"): elements received so far, the
  // version the first chunk reported, and (flat) where the next element goes: the
  // shard's range and the position inside it.
  int64_t received = 0;
  uint64_t chunk_version = 0;
  std::size_t range = 0;
  int64_t into_range = 0;
};

struct RequestState {
  ClientCore* owner = nullptr;  // null once the request no longer needs its client
  uint64_t id = 0;
  ps::Op op = ps::Op::kPush;
  std::vector<ShardResult> results;  // parallel to parts
  std::vector<RequestPart> parts;
  int outstanding = 0;  // parts without a reply
  bool abandoned = false;
  ps::Status status;
  // Payload frames ZeroMQ still references (zero_copy.h). Must outlive them: the client
  // keeps the state alive until done.
  SendCompletion completion;

  bool replied() const { return outstanding == 0; }
};

using Steady = std::chrono::steady_clock;

class ClientCore {
 public:
  ClientCore(std::shared_ptr<Context> context, std::vector<std::string> endpoints,
             ps::Placement placement, ClientOptions options);
  ~ClientCore();

  std::shared_ptr<RequestState> NewRequest(ps::Op op);
  // Sends one part. payload: pieces of the source (may be empty).
  void SendPart(const std::shared_ptr<RequestState>& st, RequestPart part, const ps::Header& base,
                std::span<const std::span<const float>> payload);
  ps::Status Wait(RequestState& st, Duration timeout);
  void Poll();
  void Abandon(const std::shared_ptr<RequestState>& st);

  int num_shards() const { return static_cast<int>(shards_.size()); }
  const ps::Placement& placement() const { return placement_; }
  const std::string& endpoint(int s) const { return shards_[static_cast<std::size_t>(s)].endpoint; }
  const ClientOptions& options() const { return options_; }
  std::span<const uint64_t> pulled_versions() const { return pulled_versions_; }
  const ClientStats& stats() const { return stats_; }
  void CountTimeout() { ++stats_.timeouts; }

 private:
  struct Shard {
    std::string endpoint;
    std::unique_ptr<Endpoint> parsed;
    zmq::socket_t socket;
    int outstanding = 0;  // parts awaiting a reply on this connection
    int rcvtimeo = -2;    // cached ZMQ_RCVTIMEO
  };

  void Connect(Shard& s);
  struct ChunksSent {
    uint64_t queued = 0;  // chunks ZeroMQ took, in order
    uint64_t total = 0;   // chunks of the push
  };
  // Sends a dense push as chunks of at most chunk_bytes (message.h, "Chunked pushes")
  // until one finds the queue full; adds the bytes queued to *bytes.
  ChunksSent SendChunks(Shard& shard, const ps::Header& whole,
                        std::span<const std::span<const float>> payload, uint64_t chunk_bytes,
                        SendCompletion* completion, uint64_t* bytes);
  void ResetShard(int shard);
  // Reads every reply already queued; true if any was read.
  bool Drain();
  // Blocks until a reply arrives or deadline; true if one was read.
  bool WaitForReply(Steady::time_point deadline);
  // Receives one multipart reply from shard (first frame already known to be there if
  // block is false). Returns false if none.
  bool ReceiveFrom(int shard, bool block);
  void HandleReply(int shard, std::size_t nparts);
  // Copies the reply's payload frames (parts_[1..nparts)) to part's destination from the
  // part's `received` element on, and advances it.
  void CopyValues(int shard, RequestPart& part, std::size_t nparts);
  void FinishPart(const std::shared_ptr<RequestState>& st, std::size_t part, ps::Status status);
  // Forgets released requests in unreleased_.
  void Sweep();
  std::string ShardName(int shard) const;

  std::shared_ptr<Context> context_;
  ps::Placement placement_;
  ClientOptions options_;
  std::vector<Shard> shards_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<RequestState>> pending_;
  // Replied or abandoned requests whose buffers ZeroMQ still holds.
  std::vector<std::shared_ptr<RequestState>> unreleased_;
  std::vector<uint64_t> pulled_versions_;
  std::vector<zmq::message_t> parts_;
  std::vector<zmq_pollitem_t> poll_items_;
  std::vector<int> poll_shards_;
  ClientStats stats_;
};

}  // namespace internal

}  // namespace asgd::transport
