#include "transport/client_core.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "transport/zap_handler.h"

namespace asgd::transport {

using ps::DecodeError;
using ps::DecodeHeader;
using ps::DType;
using ps::ErrorCodeName;
using ps::Header;
using ps::kChunkFlags;
using ps::kFlagChunkedReply;
using ps::kFlagLaterChunk;
using ps::kFlagMoreChunks;
using ps::kMaxPayloadFrames;
using ps::Op;
using ps::OpName;
using ps::Placement;
using ps::PushOutcome;
using ps::Status;
using ps::StatusCode;

namespace internal {

ClientCore::ClientCore(std::shared_ptr<Context> context, std::vector<std::string> endpoints,
                       Placement placement, ClientOptions options)
    : context_(std::move(context)), placement_(std::move(placement)), options_(options) {
  ASGD_CHECK(context_ != nullptr, "PsClient needs a Context");
  CheckCurveClient(options_.curve);
  if (static_cast<int>(endpoints.size()) != placement_.num_shards()) {
    throw ConfigError("cluster.ps", ::asgd::Join(endpoints, ","),
                      ::asgd::internal::StrCat(placement_.num_shards(),
                                               " shard endpoints, one per shard of the placement"));
  }
  for (int s = 0; s < placement_.num_shards(); ++s) {
    if (placement_.ranges(s).size() > kMaxPayloadFrames) {
      throw ConfigError(
          ::asgd::internal::StrCat("placement: shard ", s, " owns ", placement_.ranges(s).size(),
                                   " separate ranges; a message carries at most ",
                                   kMaxPayloadFrames, " (use the even split policy)"));
    }
  }
  shards_.resize(endpoints.size());
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    shards_[i].endpoint = endpoints[i];
    shards_[i].parsed = ParseEndpoint(endpoints[i], "cluster.ps");
    Connect(shards_[i]);
  }
  pulled_versions_.assign(endpoints.size(), 0);
}

ClientCore::~ClientCore() {
  // Close every connection first: ZeroMQ then drops whatever it still queues and frees
  // (releases) those frames, so the waits below are short.
  for (Shard& s : shards_) s.socket.close();
  auto settle = [](RequestState& st) {
    if (!st.completion.WaitFor(std::chrono::seconds(30))) {
      ASGD_LOG(kError, "transport: ZeroMQ still holds ", st.completion.pending(),
               " payload frames of request ", st.id, " after the client closed");
    }
  };
  for (auto& [id, st] : pending_) {
    if (st->status.ok()) st->status = Status(StatusCode::kAborted, "the client was destroyed");
    st->outstanding = 0;
    st->abandoned = true;
    settle(*st);
    st->owner = nullptr;
  }
  for (auto& st : unreleased_) {
    settle(*st);
    st->owner = nullptr;
  }
}

void ClientCore::Connect(Shard& s) {
  try {
    s.socket = zmq::socket_t(context_->zmq_context(), zmq::socket_type::dealer);
    const SocketTuning tuning = s.parsed->Tuning();
    ConfigureSocket(s.socket, options_.send_hwm, options_.receive_hwm, tuning.send_buffer_bytes,
                    tuning.receive_buffer_bytes);
    if (options_.curve.enabled) ConfigureCurveClient(s.socket, options_.curve);
    s.rcvtimeo = -2;
  } catch (const zmq::error_t& e) {
    ThrowZmqError(e, "creating the client socket for", s.endpoint);
  }
  s.parsed->Connect(s.socket.handle());
}

std::shared_ptr<RequestState> ClientCore::NewRequest(Op op) {
  auto st = std::make_shared<RequestState>();
  st->owner = this;
  st->id = next_id_++;
  st->op = op;
  return st;
}

void ClientCore::SendPart(const std::shared_ptr<RequestState>& state, RequestPart part,
                          const Header& base, std::span<const std::span<const float>> payload) {
  RequestState& st = *state;
  Shard& shard = shards_[static_cast<std::size_t>(part.shard)];
  Header h = base;
  h.request_id = st.id;
  h.role = options_.role;
  h.sender = options_.id;
  h.shard = static_cast<uint32_t>(part.shard);
  h.offset = static_cast<uint64_t>(part.offset);
  h.count = static_cast<uint64_t>(part.count);
  std::size_t frames = 0;
  uint64_t payload_bytes = 0;
  for (const auto& piece : payload) {
    if (piece.empty()) continue;
    ++frames;
    payload_bytes += piece.size_bytes();
  }
  if (frames > 0) {
    h.dtype = DType::kFloat32;
    h.payload_bytes = payload_bytes;
    h.frames = static_cast<uint32_t>(frames);
  }
  ShardResult result;
  result.shard = part.shard;
  st.parts.push_back(part);
  st.results.push_back(result);
  const std::size_t index = st.parts.size() - 1;

  const auto chunk_bytes = static_cast<uint64_t>(std::max<int64_t>(options_.chunk_bytes, 0));
  const bool on_wire = chunk_bytes > 0 && shard.parsed->Scheme() != "inproc";
  const bool chunked = (h.op == Op::kPush || h.op == Op::kPushPull) &&
                       h.encoding == compression::Encoding::kDense && on_wire &&
                       payload_bytes > chunk_bytes;
  // Values above the chunk size may come back in chunks too ("Chunked replies").
  if ((h.op == Op::kPull || h.op == Op::kPushPull) && on_wire &&
      h.count * sizeof(float) > chunk_bytes) {
    h.flags |= kFlagChunkedReply;
  }
  uint64_t bytes = payload_bytes;
  bool sent = false;
  ChunksSent chunks;
  try {
    AnnotateSend();
    if (chunked) {
      chunks = SendChunks(shard, h, payload, chunk_bytes, &st.completion, &bytes);
      sent = chunks.queued == chunks.total;
    } else {
      zmq::message_t header = HeaderMessage(h);
      bytes += header.size();
      sent = static_cast<bool>(shard.socket.send(
          header, frames > 0 ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                             : zmq::send_flags::dontwait));
      if (sent) {
        // ZeroMQ takes a multipart message whole once it accepted the first frame.
        std::size_t left = frames;
        for (const auto& piece : payload) {
          if (piece.empty()) continue;
          --left;
          zmq::message_t m = ZeroCopyMessage(piece.data(), piece.size_bytes(), &st.completion);
          (void)shard.socket.send(m, left > 0 ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                              : zmq::send_flags::dontwait);
        }
      }
    }
  } catch (const zmq::error_t& e) {
    ThrowZmqError(e, "send to", shard.endpoint);
  }
  ++st.outstanding;
  pending_[st.id] = state;
  if (!sent) {
    // A push cut after some chunks is never applied: the server drops it when its next
    // chunk does not come (message.h, "Chunked pushes"); its error reply is a stray.
    const std::string cut =
        chunks.queued > 0 ? ::asgd::internal::StrCat(" after ", chunks.queued, " of ", chunks.total,
                                                     " chunks (the server drops the push)")
                          : "";
    FinishPart(state, index,
               Status(StatusCode::kTimeout,
                      ::asgd::internal::StrCat(OpName(h.op), " to shard ", part.shard, " (",
                                               shard.endpoint, "): ", options_.send_hwm,
                                               " messages already queued", cut,
                                               "; the server is not reading")));
    return;
  }
  ++shard.outstanding;
  ++stats_.requests;
  stats_.bytes_sent += bytes;
}

ClientCore::ChunksSent ClientCore::SendChunks(Shard& shard, const Header& whole,
                                              std::span<const std::span<const float>> payload,
                                              uint64_t chunk_bytes, SendCompletion* completion,
                                              uint64_t* bytes) {
  const uint64_t per_chunk = std::max<uint64_t>(1, chunk_bytes / sizeof(float));
  const uint64_t end = whole.offset + whole.count;
  ChunksSent sent;
  sent.total = (whole.count + per_chunk - 1) / per_chunk;
  // The frames of one chunk: sub-spans of the pieces, at most kMaxPayloadFrames.
  std::vector<std::span<const float>> frames;
  std::size_t piece = 0;
  std::size_t within = 0;  // elements of payload[piece] already sent
  uint64_t at = whole.offset;
  while (at < end) {
    const uint64_t count = std::min(per_chunk, end - at);
    frames.clear();
    for (uint64_t need = count; need > 0;) {
      const std::span<const float>& p = payload[piece];
      if (within == p.size()) {
        ++piece;
        within = 0;
        continue;
      }
      const std::size_t take = static_cast<std::size_t>(std::min<uint64_t>(need, p.size() - within));
      frames.push_back(p.subspan(within, take));
      within += take;
      need -= take;
    }
    Header h = whole;
    h.offset = at;
    h.count = count;
    h.payload_bytes = count * sizeof(float);
    h.frames = static_cast<uint32_t>(frames.size());
    h.aux = end - at;
    if (at + count < end) h.flags |= kFlagMoreChunks;
    if (at != whole.offset) h.flags |= kFlagLaterChunk;
    zmq::message_t header = HeaderMessage(h);
    // A full queue refuses a chunk whole; the server drops a push whose rest never comes.
    if (!shard.socket.send(header, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return sent;
    }
    *bytes += header.size();
    for (std::size_t f = 0; f < frames.size(); ++f) {
      zmq::message_t m = ZeroCopyMessage(frames[f].data(), frames[f].size_bytes(), completion);
      (void)shard.socket.send(m, f + 1 < frames.size()
                                     ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                     : zmq::send_flags::dontwait);
    }
    at += count;
    ++sent.queued;
  }
  return sent;
}

std::string ClientCore::ShardName(int shard) const {
  return ::asgd::internal::StrCat("shard ", shard, " (", endpoint(shard), ")");
}

void ClientCore::FinishPart(const std::shared_ptr<RequestState>& state, std::size_t part,
                            Status status) {
  RequestState& st = *state;
  ShardResult& r = st.results[part];
  if (r.replied) return;
  r.replied = true;
  r.status = status;
  if (!status.ok() && st.status.ok()) st.status = status;
  --st.outstanding;
  if (st.outstanding > 0) return;
  pending_.erase(st.id);
  // The reply can arrive before ZeroMQ's I/O thread let go of the payload frames (tcp,
  // ipc): keep the state, whose SendCompletion the free callback touches, until then.
  if (!st.completion.done()) unreleased_.push_back(state);
}

void ClientCore::Sweep() {
  std::erase_if(unreleased_, [](const std::shared_ptr<RequestState>& st) {
    if (!st->completion.done()) return false;
    st->owner = nullptr;
    return true;
  });
}

bool ClientCore::ReceiveFrom(int shard, bool block) {
  Shard& s = shards_[static_cast<std::size_t>(shard)];
  std::size_t n = 0;
  try {
    for (;;) {
      if (parts_.size() <= n) parts_.emplace_back();
      zmq::message_t& m = parts_[n];
      m.rebuild();
      const auto got =
          s.socket.recv(m, (block || n > 0) ? zmq::recv_flags::none : zmq::recv_flags::dontwait);
      if (!got) return false;  // nothing queued (only possible for the first frame)
      ++n;
      stats_.bytes_received += m.size();
      if (!m.more()) break;
      if (n > kMaxPayloadFrames + 1) {
        // Drain the rest of an absurd message without keeping it.
        zmq::message_t sink;
        while (s.socket.recv(sink, zmq::recv_flags::none) && sink.more()) {
        }
        ++stats_.bad_replies;
        return true;
      }
    }
  } catch (const zmq::error_t& e) {
    ThrowZmqError(e, "receive from", s.endpoint);
  }
  AnnotateReceive();
  HandleReply(shard, n);
  return true;
}

void ClientCore::HandleReply(int shard, std::size_t nparts) {
  Header h;
  const DecodeError decoded = DecodeHeader(Bytes(parts_[0]), &h);
  auto it = pending_.find(h.request_id);
  if (it == pending_.end()) {
    ++stats_.stray_replies;
    return;
  }
  std::shared_ptr<RequestState> state = it->second;
  RequestState& st = *state;
  std::size_t index = st.parts.size();
  for (std::size_t i = 0; i < st.parts.size(); ++i) {
    if (st.parts[i].shard == shard && !st.results[i].replied) {
      index = i;
      break;
    }
  }
  if (index == st.parts.size()) {
    ++stats_.stray_replies;
    return;
  }
  Shard& conn = shards_[static_cast<std::size_t>(shard)];
  // The part's reply is complete (one message, the last of its chunks, an error or a bad
  // message): one reply less for the connection to wait for.
  auto finish = [&](Status status) {
    if (conn.outstanding > 0) --conn.outstanding;
    ++stats_.replies;
    FinishPart(state, index, std::move(status));
  };
  auto bad = [&](const std::string& why) {
    ++stats_.bad_replies;
    finish(Status(StatusCode::kBadReply, ShardName(shard) + ": " + why));
  };
  if (!decoded.ok()) return bad("undecodable reply: " + decoded.detail);
  if (!h.is_reply()) return bad("got a request where a reply was expected");
  if (h.op == Op::kError) {
    ++stats_.error_replies;
    finish(Status(StatusCode::kRemoteError,
                  ShardName(shard) + ": " + ErrorCodeName(h.code) + ": " + h.message, h.code));
    return;
  }
  if (h.op != st.op) {
    return bad(std::string("reply op ") + std::string(OpName(h.op)) + " to a " +
               std::string(OpName(st.op)) + " request");
  }
  if (static_cast<int>(h.shard) != shard) {
    return bad(::asgd::internal::StrCat("reply names shard ", h.shard));
  }
  const RequestPart& part = st.parts[index];
  ShardResult& result = st.results[index];
  result.version = h.version;
  result.aux = h.aux;
  if (st.op == Op::kPush || st.op == Op::kPushPull) {
    if (h.aux > static_cast<uint64_t>(PushOutcome::kDropped)) {
      return bad(::asgd::internal::StrCat("unknown push outcome ", h.aux));
    }
    result.outcome = static_cast<PushOutcome>(h.aux);
  }
  if (st.op == Op::kPull || st.op == Op::kPushPull) {
    const auto count = static_cast<uint64_t>(part.count);
    std::size_t bytes = 0;
    bool whole_elements = true;
    for (std::size_t i = 1; i < nparts; ++i) {
      bytes += parts_[i].size();
      whole_elements = whole_elements && parts_[i].size() % sizeof(float) == 0;
    }
    if (!whole_elements || bytes != h.count * sizeof(float) || nparts - 1 != h.frames) {
      return bad(::asgd::internal::StrCat("reply carries ", bytes, " payload bytes in ", nparts - 1,
                                          " frames for ", h.count, " elements"));
    }
    RequestPart& into = st.parts[index];
    if ((h.flags & kChunkFlags) != 0 || into.received > 0) {
      // One chunk of the reply (message.h, "Chunked replies"): the next run of the part's
      // elements, from its first chunk's version; the part is done after the last one.
      const auto received = static_cast<uint64_t>(into.received);
      const bool first = received == 0;
      const bool last = (h.flags & kFlagMoreChunks) == 0;
      if (((h.flags & kFlagLaterChunk) == 0) != first ||
          h.offset != static_cast<uint64_t>(part.offset) + received || h.count == 0 ||
          h.count > count - received || (last && h.count != count - received) ||
          (!first && h.version != into.chunk_version)) {
        return bad(::asgd::internal::StrCat(
            "reply chunk of elements [", h.offset, ", ", h.offset + h.count, ") at version ",
            h.version, ", expected the next of ", count - received, " elements left from ",
            static_cast<uint64_t>(part.offset) + received, first ? "" : " at version ",
            first ? "" : std::to_string(into.chunk_version)));
      }
      if (first) into.chunk_version = h.version;
      if (!st.abandoned) CopyValues(shard, into, nparts);
      into.received += static_cast<int64_t>(h.count);
      if (!last) return;  // the part waits for its next chunk
    } else {
      if (h.count != count || h.payload_bytes != count * sizeof(float)) {
        return bad(::asgd::internal::StrCat("reply carries ", bytes, " payload bytes in ",
                                            nparts - 1, " frames for ", count,
                                            " requested elements"));
      }
      if (!st.abandoned) CopyValues(shard, into, nparts);
    }
    pulled_versions_[static_cast<std::size_t>(shard)] = h.version;
  }
  finish(Status::Ok());
}

void ClientCore::CopyValues(int shard, RequestPart& part, std::size_t nparts) {
  if (!part.flat) {
    // The shard-local run from offset + received, contiguous in the destination.
    float* to = part.out + part.received;
    for (std::size_t i = 1; i < nparts; ++i) {
      std::memcpy(to, parts_[i].data(), parts_[i].size());
      to += parts_[i].size() / sizeof(float);
    }
    return;
  }
  // Whole-vector request: the shard's ranges in order, continuing where the previous
  // chunk stopped; frames may cut anywhere.
  const std::vector<Range>& ranges = placement_.ranges(shard);
  for (std::size_t i = 1; i < nparts; ++i) {
    const auto* src = static_cast<const float*>(parts_[i].data());
    auto n = static_cast<int64_t>(parts_[i].size() / sizeof(float));
    while (n > 0) {
      const Range& range = ranges[part.range];
      const int64_t take = std::min(n, range.count - part.into_range);
      std::memcpy(part.out + range.begin + part.into_range, src,
                  static_cast<std::size_t>(take) * sizeof(float));
      src += take;
      n -= take;
      part.into_range += take;
      if (part.into_range == range.count) {
        ++part.range;
        part.into_range = 0;
      }
    }
  }
}

bool ClientCore::Drain() {
  bool any = false;
  for (int s = 0; s < num_shards(); ++s) {
    while (ReceiveFrom(s, /*block=*/false)) any = true;
  }
  Sweep();
  return any;
}

bool ClientCore::WaitForReply(Steady::time_point deadline) {
  poll_items_.clear();
  poll_shards_.clear();
  for (int s = 0; s < num_shards(); ++s) {
    if (shards_[static_cast<std::size_t>(s)].outstanding == 0) continue;
    poll_items_.push_back({shards_[static_cast<std::size_t>(s)].socket.handle(), 0, ZMQ_POLLIN, 0});
    poll_shards_.push_back(s);
  }
  if (poll_items_.empty()) return false;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Steady::now());
  // Single-shard fast path: a blocking receive with a timeout saves the poll call.
  if (poll_items_.size() == 1) {
    Shard& s = shards_[static_cast<std::size_t>(poll_shards_[0])];
    const int ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
    if (s.rcvtimeo != ms) {
      s.socket.set(zmq::sockopt::rcvtimeo, ms);
      s.rcvtimeo = ms;
    }
    return ReceiveFrom(poll_shards_[0], /*block=*/true);
  }
  int ready = 0;
  try {
    ready = zmq::poll(poll_items_.data(), poll_items_.size(),
                      std::max<std::chrono::milliseconds>(left, std::chrono::milliseconds(0)));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    ThrowZmqError(e, "poll on", "shard sockets");
  }
  if (ready <= 0) return false;
  bool any = false;
  for (std::size_t i = 0; i < poll_items_.size(); ++i) {
    if ((poll_items_[i].revents & ZMQ_POLLIN) == 0) continue;
    while (ReceiveFrom(poll_shards_[i], /*block=*/false)) any = true;
  }
  return any;
}

Status ClientCore::Wait(RequestState& st, Duration timeout) {
  const auto deadline = Steady::now() + std::chrono::duration_cast<Steady::duration>(timeout);
  while (!st.replied()) {
    Drain();
    if (st.replied()) break;
    if (Steady::now() >= deadline) break;
    WaitForReply(deadline);
  }
  if (!st.replied()) {
    ++stats_.timeouts;
    std::string missing;
    for (std::size_t i = 0; i < st.parts.size(); ++i) {
      if (st.results[i].replied) continue;
      if (!missing.empty()) missing += ", ";
      missing += ShardName(st.parts[i].shard);
    }
    return Status::Timeout(::asgd::internal::StrCat(
        OpName(st.op), " request ", st.id, ": no reply within ",
        std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count(), " ms from ",
        missing));
  }
  // Replied: the payload frames are released within microseconds of the last byte
  // written (tcp, ipc), or already (inproc).
  const auto left = deadline - Steady::now();
  if (!st.completion.WaitFor(std::max<Duration>(std::chrono::duration_cast<Duration>(left),
                                                std::chrono::milliseconds(1)))) {
    ++stats_.timeouts;
    return Status::Timeout(::asgd::internal::StrCat(OpName(st.op), " request ", st.id,
                                                    ": replied, but ZeroMQ still holds ",
                                                    st.completion.pending(), " payload frames"));
  }
  Sweep();
  return st.status;
}

void ClientCore::Poll() { Drain(); }

void ClientCore::ResetShard(int shard) {
  ++stats_.resets;
  Shard& s = shards_[static_cast<std::size_t>(shard)];
  // Closing with linger 0 drops (and frees) every message still queued to the shard.
  s.socket.close();
  s.outstanding = 0;
  // Requests that were waiting on this connection will never hear back.
  std::vector<std::shared_ptr<RequestState>> hit;
  for (auto& [id, st] : pending_) hit.push_back(st);
  for (auto& st : hit) {
    for (std::size_t i = 0; i < st->parts.size(); ++i) {
      if (st->parts[i].shard != shard || st->results[i].replied) continue;
      FinishPart(st, i,
                 Status(StatusCode::kAborted,
                        ShardName(shard) + ": connection reset to reclaim an abandoned request"));
    }
  }
  Connect(s);
}

void ClientCore::Abandon(const std::shared_ptr<RequestState>& st) {
  st->abandoned = true;  // late replies are read and dropped; destinations never written
  if (st->completion.done()) return;
  if (st->completion.WaitFor(options_.release_grace)) return;
  // ZeroMQ still holds the source buffer: the message is queued to a shard that is not
  // reading (down or stalled). Reset those connections, which drops and frees it.
  for (std::size_t i = 0; i < st->parts.size(); ++i) {
    if (!st->results[i].replied) ResetShard(st->parts[i].shard);
  }
  if (!st->completion.WaitFor(std::chrono::seconds(30))) {
    ASGD_LOG(kError, "transport: ZeroMQ still holds ", st->completion.pending(),
             " payload frames of abandoned request ", st->id);
  }
}

}  // namespace internal

}  // namespace asgd::transport
