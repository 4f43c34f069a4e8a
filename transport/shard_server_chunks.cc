// ShardServer::Impl, continued: the replies to pushes, and chunked pushes (message.h,
// "Chunked pushes"; the Assembly in shard_server_impl.h).
//
// A chunked push is applied as it arrives when the rule is element-wise
// (ShardCore::BeginStaged): each chunk is added out of place into a staging block while
// the next chunk is still on the wire, and the block becomes current after the last one.
// Under any other rule the chunks' frames are kept (zero-copy) and the rule sees the
// whole push at the end, as if it had come in one message.
#include <algorithm>
#include <cstring>
#include <string>

#include "core/check.h"
#include "transport/shard_server_impl.h"

namespace asgd::transport {

using ps::ErrorCode;
using ps::Header;
using ps::kFlagLaterChunk;
using ps::kFlagMoreChunks;
using ps::NonFiniteResultsOnThisThread;
using ps::Op;
using ps::OpName;
using ps::Payload;
using ps::RequestInfo;
using ps::ShardCore;

using shard_server_internal::InfoFrom;
using shard_server_internal::RequestCopy;

void ShardServer::Impl::ReplyToPush(zmq::message_t& routing, const Header& h,
                                    ShardCore::Result& r, uint64_t overflows_before) {
  if (!r.ok()) {
    // A rule's add helper refused a result that would not be finite (server_rule.h):
    // the same refusal as a non-finite payload, and the shard is unchanged.
    const ErrorCode code =
        r.error == ErrorCode::kRejectedByRule && NonFiniteResultsOnThisThread() != overflows_before
            ? ErrorCode::kNonFinite
            : r.error;
    SendError(routing, h, code, r.message);
    return;
  }
  if (r.deferred) {
    held_[r.token] = Held{std::string(static_cast<const char*>(routing.data()), routing.size()),
                          RequestCopy(h)};
    return;
  }
  if (h.op == Op::kPush) {
    SendAck(routing, h, static_cast<uint64_t>(r.outcome));
  } else {
    SendValues(routing, h, r.reply.empty() ? nullptr : &r.reply, static_cast<uint64_t>(r.outcome));
  }
}

bool ShardServer::Impl::FromAssemblyPeer(const zmq::message_t& routing) const {
  return routing.size() == assembly_.routing_id.size() &&
         std::memcmp(routing.data(), assembly_.routing_id.data(), routing.size()) == 0;
}

bool ShardServer::Impl::IsNextChunk(const Header& h) const {
  const Header& first = assembly_.first;
  return (h.flags & kFlagLaterChunk) != 0 && h.op == first.op && h.request_id == first.request_id &&
         h.encoding == compression::Encoding::kDense && h.offset == assembly_.next_offset &&
         h.aux == first.offset + first.count - assembly_.next_offset;
}

void ShardServer::Impl::StartAssembly(const Header& h, std::size_t nparts) {
  Assembly& a = assembly_;
  a = Assembly{};
  a.active = true;
  a.routing_id.assign(static_cast<const char*>(parts_[0].data()), parts_[0].size());
  a.first = RequestCopy(h);
  a.first.flags &= ~kFlagMoreChunks;
  a.first.count = h.aux;  // the whole push
  a.first.payload_bytes = h.aux * sizeof(float);
  a.next_offset = h.offset;
  const auto size = static_cast<uint64_t>(size_);
  if (h.aux > size || h.offset > size - h.aux) {
    a.error = ErrorCode::kOutOfRange;
    a.message = ::asgd::internal::StrCat("chunked ", OpName(h.op), " of elements [", h.offset, ", ",
                                         h.offset + h.aux, ") is outside shard ", options_.shard,
                                         " of ", size_, " elements");
  } else if (closing_.load()) {
    a.error = ErrorCode::kShuttingDown;
    a.message = ::asgd::internal::StrCat("shard ", options_.shard, " is closed: the run is over");
  } else {
    a.staged = core_->BeginStaged(InfoFrom(a.first));
  }
  ContinueAssembly(h, nparts);
}

void ShardServer::Impl::ContinueAssembly(const Header& h, std::size_t nparts) {
  Assembly& a = assembly_;
  chunk_taken_ = true;
  a.next_offset += h.count;
  a.deadline = Steady::now() + options_.chunk_timeout;
  if (a.error == ErrorCode::kNone) {
    if (a.staged) {
      Payload payload;
      BuildPayload(h.offset, std::span(parts_).subspan(2, nparts - 2), &payload);
      for (const Payload::Piece& piece : payload.pieces()) core_->StagePiece(piece);
      ReleasePayloadFrames(nparts);
    } else {
      for (std::size_t i = 2; i < nparts; ++i) a.kept.push_back(std::move(parts_[i]));
    }
  }
  if ((h.flags & kFlagMoreChunks) == 0) FinishAssembly();
}

void ShardServer::Impl::FinishAssembly() {
  Assembly a = std::move(assembly_);
  assembly_ = Assembly{};
  zmq::message_t routing(a.routing_id.data(), a.routing_id.size());
  if (a.error != ErrorCode::kNone) {
    if (a.staged) core_->AbortStaged();
    SendError(routing, a.first, a.error, a.message);
    return;
  }
  Bump(counters_.chunked_pushes);
  ShardCore::Result r;
  const uint64_t overflows_before = NonFiniteResultsOnThisThread();
  if (a.staged) {
    r = core_->FinishStaged();
  } else {
    Payload payload;
    BuildPayload(a.first.offset, a.kept, &payload);
    ps::internal::ArmPayloadScans();
    try {
      const RequestInfo info = InfoFrom(a.first);
      r = a.first.op == Op::kPush ? core_->Push(info, std::move(payload))
                                  : core_->PushPull(info, std::move(payload));
    } catch (...) {
      ps::internal::DisarmPayloadScans();
      throw;
    }
    ps::internal::DisarmPayloadScans();
    a.kept.clear();
  }
  ReplyToPush(routing, a.first, r, overflows_before);
}

void ShardServer::Impl::FailAssembly(ErrorCode code, const std::string& why) {
  if (!assembly_.active) return;
  Assembly a = std::move(assembly_);
  assembly_ = Assembly{};
  if (a.staged) core_->AbortStaged();
  zmq::message_t routing(a.routing_id.data(), a.routing_id.size());
  SendError(routing, a.first, code,
            ::asgd::internal::StrCat("chunked ", OpName(a.first.op), " dropped after element ",
                                     a.next_offset, " of [", a.first.offset, ", ",
                                     a.first.offset + a.first.count, "): ", why));
}

}  // namespace asgd::transport
