#include "ps/message.h"

#include <msgpack.hpp>

#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"

namespace asgd::ps {

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kPush: return "push";
    case Op::kPull: return "pull";
    case Op::kPushPull: return "push_pull";
    case Op::kRegister: return "register";
    case Op::kHeartbeat: return "heartbeat";
    case Op::kBarrier: return "barrier";
    case Op::kError: return "error";
    case Op::kClock: return "clock";
    case Op::kStop: return "stop";
    case Op::kCheckpoint: return "checkpoint";
  }
  return "unknown";
}

bool OpRequestHasPayload(Op op) { return op == Op::kPush || op == Op::kPushPull; }

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kUnknown: return "unknown";
    case Role::kCoordinator: return "coordinator";
    case Role::kPs: return "ps";
    case Role::kWorker: return "worker";
    case Role::kEvaluator: return "evaluator";
  }
  return "unknown";
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kNone: return "none";
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat64: return "float64";
  }
  return "unknown";
}

std::size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kNone: return 0;
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat64: return 8;
  }
  return 0;
}

std::string_view PushOutcomeName(PushOutcome outcome) {
  switch (outcome) {
    case PushOutcome::kApplied: return "applied";
    case PushOutcome::kAccepted: return "accepted";
    case PushOutcome::kDropped: return "dropped";
  }
  return "unknown";
}

namespace {

// A msgpack output stream over a caller-provided buffer: the header is built without a
// heap allocation, then copied once into the frame.
class FixedStream {
 public:
  explicit FixedStream(std::span<std::byte> out) : out_(out) {}
  void write(const char* data, std::size_t n) {
    ASGD_CHECK_LE(size_ + n, out_.size(), "header does not fit the encode buffer");
    std::memcpy(out_.data() + size_, data, n);
    size_ += n;
  }
  std::size_t size() const { return size_; }

 private:
  std::span<std::byte> out_;
  std::size_t size_ = 0;
};

}  // namespace

std::size_t EncodeHeader(const Header& h, std::span<std::byte> out) {
  ASGD_CHECK_GE(out.size(), kMaxHeaderBytes);
  FixedStream stream(out);
  msgpack::packer<FixedStream> pk(stream);
  const bool encoded = h.encoding != compression::Encoding::kDense;
  pk.pack_array(kHeaderFields + (h.oldest_version || encoded ? 1 : 0) + (encoded ? 1 : 0));
  pk.pack_uint32(h.protocol);
  pk.pack_uint8(static_cast<uint8_t>(h.op));
  pk.pack_uint32(h.flags);
  pk.pack_uint8(static_cast<uint8_t>(h.role));
  pk.pack_uint32(h.sender);
  pk.pack_uint32(h.shard);
  pk.pack_uint64(h.request_id);
  pk.pack_uint64(h.version);
  pk.pack_int64(h.clock);
  pk.pack_uint8(static_cast<uint8_t>(h.dtype));
  pk.pack_uint64(h.offset);
  pk.pack_uint64(h.count);
  pk.pack_uint64(h.payload_bytes);
  pk.pack_uint32(h.frames);
  pk.pack_uint16(static_cast<uint16_t>(h.code));
  pk.pack_uint64(h.aux);
  const std::size_t n = std::min(h.message.size(), kMaxErrorMessageBytes);
  pk.pack_str(static_cast<uint32_t>(n));
  pk.pack_str_body(h.message.data(), static_cast<uint32_t>(n));
  if (h.oldest_version || encoded) pk.pack_uint64(h.oldest_version.value_or(h.version));
  if (encoded) pk.pack_uint8(static_cast<uint8_t>(h.encoding));
  return stream.size();
}

namespace {

enum Field : uint32_t {
  kFProtocol = 0,
  kFOp,
  kFFlags,
  kFRole,
  kFSender,
  kFShard,
  kFRequestId,
  kFVersion,
  kFClock,
  kFDType,
  kFOffset,
  kFCount,
  kFPayloadBytes,
  kFFrames,
  kFCode,
  kFAux,
  kFMessage,
  kFOldestVersion,  // optional
  kFEncoding,       // optional
};
constexpr uint32_t kMaxFields = kHeaderFields + kOptionalHeaderFields;

const char* FieldName(uint32_t i) {
  static constexpr const char* kNames[] = {
      "protocol", "op",     "flags", "role",          "sender", "shard", "request_id",
      "version",  "clock",  "dtype", "offset",        "count",  "payload_bytes",
      "frames",   "code",   "aux",   "message",       "oldest_version", "encoding"};
  return i < kMaxFields ? kNames[i] : "extra field";
}

// A msgpack-c visitor that reads the header array in one pass, without allocating, and
// stops at the first element of the wrong type. Type and shape only; ranges are checked
// afterwards so that the protocol version is judged first.
struct HeaderVisitor : msgpack::null_visitor {
  static constexpr uint32_t kMaxArray = 64;

  uint64_t u[kMaxFields] = {};
  bool set[kMaxFields] = {};
  int64_t clock = 0;
  const char* message = nullptr;
  uint32_t message_size = 0;

  int depth = 0;
  uint32_t array_size = 0;
  int64_t index = -1;
  bool insufficient = false;
  bool parse_failed = false;
  DecodeError error;

  bool Fail(std::string detail) {
    if (error.ok()) error = {ErrorCode::kMalformedHeader, std::move(detail)};
    return false;
  }
  bool WrongType(const char* type) {
    if (depth == 0) {
      return Fail(internal::StrCat("header is a msgpack ", type, ", expected an array"));
    }
    const bool vowel = type[0] != '\0' && std::strchr("aeiou", type[0]) != nullptr;
    const char* article = vowel ? "an " : "a ";
    return Fail(internal::StrCat("header field ", index, " (",
                                 FieldName(static_cast<uint32_t>(index)), ") is ", article, type));
  }
  bool InField() const { return depth == 1 && index >= 0; }

  bool visit_nil() { return WrongType("nil"); }
  bool visit_boolean(bool) { return WrongType("boolean"); }
  bool visit_float32(float) { return WrongType("float"); }
  bool visit_float64(double) { return WrongType("float"); }
  bool visit_bin(const char*, uint32_t) { return WrongType("bin"); }
  bool visit_ext(const char*, uint32_t) { return WrongType("ext"); }
  bool start_map(uint32_t) { return WrongType("map"); }

  bool visit_positive_integer(uint64_t v) {
    if (!InField()) return WrongType("integer");
    if (index >= static_cast<int64_t>(kMaxFields)) return true;  // judged by the count
    if (index == kFMessage) return WrongType("integer");
    u[index] = v;
    set[index] = true;
    if (index == kFClock) {
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Fail(internal::StrCat("header field clock = ", v, " does not fit int64"));
      }
      clock = static_cast<int64_t>(v);
    }
    return true;
  }
  // msgpack-c reports every signed format (int 8..64) here, whatever the value's sign.
  // MessagePack lets an encoder write a non-negative value in a signed format (several
  // do), so only a value below zero is negative.
  bool visit_negative_integer(int64_t v) {
    if (v >= 0) return visit_positive_integer(static_cast<uint64_t>(v));
    if (!InField()) return WrongType("integer");
    if (index >= static_cast<int64_t>(kMaxFields)) return true;
    if (index != kFClock) {
      return Fail(internal::StrCat("header field ", FieldName(static_cast<uint32_t>(index)),
                                   " = ", v, " is negative"));
    }
    clock = v;
    set[index] = true;
    return true;
  }
  bool visit_str(const char* p, uint32_t n) {
    if (!InField()) return WrongType("string");
    if (index >= static_cast<int64_t>(kMaxFields)) return true;
    if (index != kFMessage) return WrongType("string");
    if (n > kMaxErrorMessageBytes) {
      return Fail(internal::StrCat("header message is ", n, " bytes, limit ",
                                   kMaxErrorMessageBytes));
    }
    message = p;
    message_size = n;
    set[index] = true;
    return true;
  }
  bool start_array(uint32_t n) {
    if (depth != 0) return WrongType("array");
    if (n > kMaxArray) return Fail(internal::StrCat("header array has ", n, " elements"));
    ++depth;
    array_size = n;
    return true;
  }
  bool start_array_item() {
    ++index;
    return true;
  }
  bool end_array() {
    --depth;
    return true;
  }
  void parse_error(size_t, size_t) { parse_failed = true; }
  void insufficient_bytes(size_t, size_t) { insufficient = true; }
};

DecodeError Err(ErrorCode code, std::string detail) { return {code, std::move(detail)}; }

}  // namespace

DecodeError DecodeHeader(std::span<const std::byte> frame, Header* out) {
  *out = Header{};
  out->protocol = 0;
  if (frame.empty()) return Err(ErrorCode::kTruncated, "empty header frame");

  HeaderVisitor v;
  std::size_t off = 0;
  bool parsed = false;
  try {
    parsed = msgpack::parse(reinterpret_cast<const char*>(frame.data()), frame.size(), off, v);
  } catch (const std::exception& e) {
    // msgpack-c throws for a few impossible sizes (e.g. ext of 2^32-1 bytes).
    return Err(ErrorCode::kMalformedHeader, std::string("header: ") + e.what());
  }
  if (v.set[kFRequestId]) out->request_id = v.u[kFRequestId];
  // Judge the protocol version before the shape: a peer speaking another version may
  // well have another header layout.
  if (v.set[kFProtocol] && v.u[kFProtocol] != kProtocolVersion) {
    out->protocol = static_cast<uint32_t>(std::min<uint64_t>(v.u[kFProtocol], UINT32_MAX));
    return Err(ErrorCode::kProtocolVersion,
               internal::StrCat("protocol version ", v.u[kFProtocol], ", this server speaks ",
                                kProtocolVersion));
  }
  if (!v.error.ok()) return v.error;
  if (!parsed) {
    if (v.insufficient) {
      return Err(ErrorCode::kTruncated,
                 internal::StrCat("header frame of ", frame.size(), " bytes ends mid-message"));
    }
    return Err(ErrorCode::kMalformedHeader, "header is not MessagePack");
  }
  if (off != frame.size()) {
    return Err(ErrorCode::kMalformedHeader,
               internal::StrCat("header has ", frame.size() - off, " trailing bytes"));
  }
  if (v.array_size < kHeaderFields || v.array_size > kMaxFields) {
    return Err(ErrorCode::kMalformedHeader,
               internal::StrCat("header array has ", v.array_size, " elements, expected ",
                                kHeaderFields, " to ", kMaxFields));
  }

  // Range checks, field by field.
  auto too_big = [](uint32_t f, uint64_t value, uint64_t limit) {
    return Err(ErrorCode::kMalformedHeader,
               internal::StrCat("header field ", FieldName(f), " = ", value, " exceeds ", limit));
  };
  for (uint32_t f : {kFFlags, kFSender, kFShard, kFFrames}) {
    if (v.u[f] > UINT32_MAX) return too_big(f, v.u[f], UINT32_MAX);
  }
  out->protocol = kProtocolVersion;
  if (v.u[kFOp] == 0 || v.u[kFOp] >= kOpEnd) {
    return Err(ErrorCode::kUnknownOp, internal::StrCat("unknown op ", v.u[kFOp]));
  }
  out->op = static_cast<Op>(v.u[kFOp]);
  out->flags = static_cast<uint32_t>(v.u[kFFlags]);
  if ((out->flags & ~kKnownFlags) != 0) {
    return Err(ErrorCode::kMalformedHeader, internal::StrCat("unknown flags 0x", std::hex,
                                                             out->flags & ~kKnownFlags));
  }
  if (v.u[kFRole] >= kRoleEnd) {
    return Err(ErrorCode::kMalformedHeader, internal::StrCat("unknown role ", v.u[kFRole]));
  }
  out->role = static_cast<Role>(v.u[kFRole]);
  out->sender = static_cast<uint32_t>(v.u[kFSender]);
  out->shard = static_cast<uint32_t>(v.u[kFShard]);
  out->version = v.u[kFVersion];
  out->clock = v.clock;
  if (v.u[kFDType] >= kDTypeEnd) {
    return Err(ErrorCode::kBadDType, internal::StrCat("unknown dtype ", v.u[kFDType]));
  }
  out->dtype = static_cast<DType>(v.u[kFDType]);
  out->offset = v.u[kFOffset];
  out->count = v.u[kFCount];
  out->payload_bytes = v.u[kFPayloadBytes];
  out->frames = static_cast<uint32_t>(v.u[kFFrames]);
  if (v.u[kFCode] > UINT16_MAX) return too_big(kFCode, v.u[kFCode], UINT16_MAX);
  out->code = static_cast<ErrorCode>(v.u[kFCode]);
  out->aux = v.u[kFAux];
  if (v.message_size > 0) out->message.assign(v.message, v.message_size);
  if (v.set[kFOldestVersion]) {
    // Only a push request has gradients whose age it can state, and none older than
    // the newest parameters it names.
    if (out->is_reply() || !OpRequestHasPayload(out->op)) {
      return Err(ErrorCode::kMalformedHeader,
                 internal::StrCat("header field oldest_version on a ", OpName(out->op),
                                  out->is_reply() ? " reply" : " request",
                                  ", expected only on push and push_pull requests"));
    }
    if (v.u[kFOldestVersion] > out->version) {
      return Err(ErrorCode::kMalformedHeader,
                 internal::StrCat("header field oldest_version = ", v.u[kFOldestVersion],
                                  " exceeds version = ", out->version));
    }
    out->oldest_version = v.u[kFOldestVersion];
  }
  if (v.set[kFEncoding]) {
    if (out->is_reply() || !OpRequestHasPayload(out->op)) {
      return Err(ErrorCode::kMalformedHeader,
                 internal::StrCat("header field encoding on a ", OpName(out->op),
                                  out->is_reply() ? " reply" : " request",
                                  ", expected only on push and push_pull requests"));
    }
    const uint64_t e = v.u[kFEncoding];
    if (e == 0 || e >= compression::kEncodingEnd) {
      return Err(ErrorCode::kBadEncoding,
                 internal::StrCat("header field encoding = ", e, ", expected 1 to ",
                                  compression::kEncodingEnd - 1, " (a compressed encoding)"));
    }
    out->encoding = static_cast<compression::Encoding>(e);
  }
  const bool encoded = out->encoding != compression::Encoding::kDense;
  const bool returns_values = out->op == Op::kPull || out->op == Op::kPushPull;
  if ((out->flags & kFlagChunkedReply) != 0 && (out->is_reply() || !returns_values)) {
    return Err(ErrorCode::kMalformedHeader,
               internal::StrCat("flag chunked_reply on a ", OpName(out->op),
                                out->is_reply() ? " reply" : " request",
                                ", expected only on pull and push_pull requests"));
  }
  if ((out->flags & kChunkFlags) != 0 && out->is_reply()) {
    // A chunk of a reply (message.h, "Chunked replies"): only values are chunked.
    if (!returns_values) {
      return Err(ErrorCode::kMalformedHeader,
                 internal::StrCat("flag ",
                                  (out->flags & kFlagMoreChunks) != 0 ? "more_chunks" : "later_chunk",
                                  " on a ", OpName(out->op),
                                  " reply, expected only on pull and push_pull replies"));
    }
  } else if ((out->flags & kChunkFlags) != 0) {
    if (!OpRequestHasPayload(out->op) || encoded) {
      return Err(ErrorCode::kMalformedHeader,
                 internal::StrCat(
                     "flag ", (out->flags & kFlagMoreChunks) != 0 ? "more_chunks" : "later_chunk",
                     " on a ", encoded ? "compressed " : "", OpName(out->op),
                     " request, expected only on dense push and push_pull requests"));
    }
  }
  const bool push_chunk = (out->flags & kChunkFlags) != 0 && !out->is_reply();
  if (push_chunk && (out->flags & kFlagLaterChunk) != 0 && (out->flags & kFlagMoreChunks) == 0 &&
      out->aux != out->count) {
    return Err(
        ErrorCode::kPayloadMismatch,
        internal::StrCat("the last chunk of a push, of ", out->count, " elements, with ", out->aux,
                         " elements left in its push (aux), expected ", out->count));
  }
  if (push_chunk && (out->flags & kFlagMoreChunks) != 0) {
    if (out->aux <= out->count) {
      return Err(ErrorCode::kPayloadMismatch,
                 internal::StrCat("a chunk of ", out->count, " elements with more to come but ",
                                  out->aux, " elements left in its push (aux), expected more than ",
                                  out->count));
    }
  }

  // Lengths: everything that describes the payload must agree before anyone trusts it.
  constexpr uint64_t kMaxElements = uint64_t{1} << 40;  // 4 TiB of float32; a sanity bound
  if (out->count > kMaxElements) {
    return Err(ErrorCode::kTooLarge, internal::StrCat("count ", out->count, " exceeds ", kMaxElements));
  }
  if (out->offset > kMaxElements) {
    return Err(ErrorCode::kOutOfRange,
               internal::StrCat("offset ", out->offset, " exceeds ", kMaxElements));
  }
  if (out->frames > kMaxPayloadFrames) {
    return Err(ErrorCode::kBadFrames, internal::StrCat("frames ", out->frames, " exceeds ",
                                                        kMaxPayloadFrames));
  }
  const bool has_payload = out->frames > 0 || out->payload_bytes > 0;
  if (has_payload) {
    if (out->dtype != DType::kFloat32) {
      return Err(ErrorCode::kBadDType,
                 internal::StrCat("payload dtype ", DTypeName(out->dtype), ", expected float32"));
    }
    if (encoded) {
      if (out->frames != compression::kEncodedFrames) {
        return Err(
            ErrorCode::kBadFrames,
            internal::StrCat(compression::EncodingName(out->encoding), " push in ", out->frames,
                             " frames, expected ", compression::kEncodedFrames));
      }
      if (out->payload_bytes > MaxEncodedBytes(out->count)) {
        return Err(ErrorCode::kPayloadMismatch,
                   internal::StrCat(compression::EncodingName(out->encoding), " payload of ",
                                    out->payload_bytes, " bytes for ", out->count,
                                    " elements, at most ", MaxEncodedBytes(out->count)));
      }
    } else if (out->payload_bytes != out->count * DTypeSize(out->dtype)) {
      return Err(ErrorCode::kPayloadMismatch,
                 internal::StrCat("payload_bytes ", out->payload_bytes, " but count ", out->count,
                                  " x ", DTypeSize(out->dtype), " bytes"));
    }
    if (out->frames == 0) {
      return Err(ErrorCode::kBadFrames,
                 internal::StrCat("payload of ", out->payload_bytes, " bytes in 0 frames"));
    }
  } else if (encoded) {
    return Err(ErrorCode::kPayloadMismatch,
               internal::StrCat(compression::EncodingName(out->encoding), " push without payload"));
  } else if (out->dtype != DType::kNone && out->dtype != DType::kFloat32) {
    return Err(ErrorCode::kBadDType, internal::StrCat("dtype ", DTypeName(out->dtype),
                                                      ", expected float32"));
  }
  if (!out->is_reply()) {
    if (out->op == Op::kError) {
      return Err(ErrorCode::kUnknownOp, "error is a reply-only op");
    }
    const bool wants_payload = OpRequestHasPayload(out->op);
    if (wants_payload && out->count > 0 && !has_payload) {
      return Err(ErrorCode::kPayloadMismatch,
                 internal::StrCat(OpName(out->op), " of ", out->count, " elements without payload"));
    }
    if (!wants_payload && has_payload) {
      return Err(ErrorCode::kBadFrames,
                 internal::StrCat(OpName(out->op), " request carries ", out->frames,
                                  " payload frames, expected none"));
    }
  }
  return {};
}

uint64_t MaxEncodedBytes(uint64_t count) { return 9 * count + 16; }

DecodeError CheckPayloadFrames(const Header& h, std::span<const std::size_t> frame_sizes,
                               uint64_t max_payload_bytes) {
  if (frame_sizes.size() != h.frames) {
    return Err(ErrorCode::kBadFrames, internal::StrCat("header says ", h.frames,
                                                       " payload frames, message has ",
                                                       frame_sizes.size()));
  }
  if (h.payload_bytes > max_payload_bytes) {
    return Err(ErrorCode::kTooLarge, internal::StrCat("payload_bytes ", h.payload_bytes,
                                                      " exceeds the limit ", max_payload_bytes));
  }
  const std::size_t elem = DTypeSize(h.dtype);
  uint64_t total = 0;
  for (std::size_t i = 0; i < frame_sizes.size(); ++i) {
    const std::size_t n = frame_sizes[i];
    if (n == 0 || elem == 0 || n % elem != 0) {
      return Err(ErrorCode::kBadFrames,
                 internal::StrCat("payload frame ", i, " has ", n, " bytes, not a whole number of ",
                                  DTypeName(h.dtype), " elements"));
    }
    total += n;  // frames are bounded by memory, so no overflow
  }
  if (total != h.payload_bytes) {
    return Err(ErrorCode::kPayloadMismatch, internal::StrCat("payload frames hold ", total,
                                                             " bytes, header says ",
                                                             h.payload_bytes));
  }
  return {};
}

DecodeError CheckRequestForShard(const Header& h, uint32_t shard, uint64_t shard_size) {
  if (h.shard != shard) {
    return Err(ErrorCode::kWrongShard,
               internal::StrCat("request for shard ", h.shard, " reached shard ", shard));
  }
  // offset and count are each below 2^40 after DecodeHeader, so the sum cannot overflow.
  if (h.offset > shard_size || h.count > shard_size - h.offset) {
    return Err(ErrorCode::kOutOfRange,
               internal::StrCat("elements [", h.offset, ", ", h.offset + h.count,
                                ") outside shard ", shard, " of ", shard_size, " elements"));
  }
  return {};
}

DecodeError DecodeMessage(std::span<const std::span<const std::byte>> frames, Header* out,
                          uint64_t max_payload_bytes, uint32_t shard, int64_t shard_size) {
  if (frames.empty()) return Err(ErrorCode::kTruncated, "message has no frames");
  DecodeError e = DecodeHeader(frames[0], out);
  if (!e.ok()) return e;
  std::size_t sizes_buf[64];
  std::vector<std::size_t> sizes_vec;
  std::span<std::size_t> sizes;
  const std::size_t n = frames.size() - 1;
  if (n <= std::size(sizes_buf)) {
    sizes = std::span<std::size_t>(sizes_buf, n);
  } else {
    sizes_vec.resize(n);
    sizes = sizes_vec;
  }
  for (std::size_t i = 0; i < n; ++i) sizes[i] = frames[i + 1].size();
  e = CheckPayloadFrames(*out, sizes, max_payload_bytes);
  if (!e.ok()) return e;
  if (shard_size >= 0) {
    e = CheckRequestForShard(*out, shard, static_cast<uint64_t>(shard_size));
    if (!e.ok()) return e;
  }
  return {};
}

}  // namespace asgd::ps
