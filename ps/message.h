// The wire protocol (docs/architecture.md#wire-protocol): message layout, header codec and
// validation.
//
// A message is a multipart ZeroMQ message:
//
//   frame 0      header: one MessagePack array (below)
//   frame 1..n   payload: raw little-endian float32 bytes, n = header.frames
//
// Payload frames are sent zero-copy from the caller's buffer (see transport/zero_copy.h). A push
// of a shard that owns several non-contiguous ranges of the flat vector sends one frame
// per range, each pointing straight into the caller's flat buffer; the receiver treats
// the frames as one run of `count` elements in shard-local order, starting at the
// shard-local element `offset`. Frame boundaries carry no meaning beyond that.
//
// The header is a MessagePack array of kHeaderFields elements, optionally followed by
// kOptionalHeaderFields more (a peer that does not know them never sends them), in this
// order:
//
//   #  field          type    meaning
//   0  protocol       uint    kProtocolVersion
//   1  op             uint    Op
//   2  flags          uint    kFlag* bits (kFlagReply on every reply)
//   3  role           uint    sender's Role
//   4  sender         uint    sender id (worker index, shard id for replies)
//   5  shard          uint    the shard addressed (requests) or answering (replies)
//   6  request_id     uint    chosen by the client, echoed in the reply
//   7  version        uint    parameter version: push = version the worker computed from
//                             (its last pull); pull reply = version read; push reply =
//                             version after the push was handled
//   8  clock          int     worker clock (step); barrier: barrier id
//   9  dtype          uint    DType of the payload (kNone when there is none)
//  10  offset         uint    first shard-local element addressed
//  11  count          uint    number of elements addressed
//  12  payload_bytes  uint    total bytes over all payload frames
//  13  frames         uint    number of payload frames that follow the header
//  14  code           uint    ErrorCode (error replies), kNone otherwise
//  15  aux            uint    op-specific: push reply = PushOutcome; register reply = shard
//                             size in elements; barrier = number of participants
//  16  message        str     one-line error text (error replies), empty otherwise
//  optional:
//  17  oldest_version uint    push and push-pull requests only: the version of the oldest
//                             parameters the push's gradients were computed on, at most
//                             version (below it when the worker pulled again inside its
//                             push window: DOWNPOUR with n_fetch < n_push); clients leave
//                             it out when it equals version
//
//  18  encoding       uint    push and push-pull requests only: the compressed encoding of
//                             the payload (compression::Encoding, 1 to kEncodingEnd - 1);
//                             left out for a dense push. With it the payload is the
//                             encoding's kEncodedFrames frames (compression/compressor.h),
//                             payload_bytes their total and count the dense element count,
//                             and field 17 is sent (= version when no older)
//
// Compatibility: the optional fields keep the protocol version. A peer of before it decodes
// every message that leaves it out (all but a windowed push that fetched inside its window)
// and refuses the others as malformed ("header array has 18 elements"); a newer peer reads
// a 17-field push as oldest_version = version. Likewise a peer of before `encoding`
// refuses a compressed push as malformed ("header array has 19 elements"): only a worker
// configured to compress sends one.
//
// Chunked pushes: a client may send a large dense push (or push-pull) to one shard as
// several messages, "chunks", back to back on its connection, so that the server applies
// one chunk while the next is still on the wire (ClientOptions::chunk_bytes). Each chunk
// is a request of its own shape: offset and count name the chunk's elements, its payload
// frames hold them; every chunk repeats the push's op, request_id, version, clock and
// optional fields. Three fields say where it stands:
//   flags  kFlagMoreChunks on every chunk but the last; kFlagLaterChunk on every chunk
//          but the first;
//   aux    the elements of the push from this chunk's offset to the push's end, so the
//          first chunk's aux is the push's count and the last chunk's aux is its count.
// Chunks are contiguous and in order. The server answers once, after the last chunk,
// with the reply of the whole push (offset = the first chunk's, count = its aux), and
// applies it all or nothing. A dense push that is not chunked sends neither flag and
// aux = 0 or = count. A compressed push is never chunked (the codec refuses both flags
// with encoding).
// A later chunk that does not continue an open push of the same connection -- the rest
// of a push whose first chunks went to a server that died, queued by the client's
// connection and delivered to the server restarted at the same address -- is never
// applied (not even as a push of its own range): the server answers it with the error
// kIncompletePush. So is an open push whose sequence breaks (its next chunk does not
// come within ServerOptions::chunk_timeout, or the sender's next message is something
// else). A peer of before kFlagLaterChunk refuses every later chunk as malformed ("unknown
// flags"); such a server and a chunking client do not mix (cluster.chunk_bytes = 0).
//
// Chunked replies: a pull or push-pull request may carry kFlagChunkedReply, saying the
// client takes the values of its reply in chunks. A server then sends a reply whose
// payload exceeds its ServerOptions::reply_chunk_bytes as several reply messages, back
// to back on the connection, each a reply of its own shape: the whole reply's op,
// request_id, version, clock and aux (push-pull: the PushOutcome), offset and count naming
// the chunk's elements, its payload frames holding them; kFlagMoreChunks on every chunk
// but the last, kFlagLaterChunk on every chunk but the first. Chunks are contiguous and
// in order, from the request's offset to its end; the client copies each into place as
// it arrives and the request's part is done after the last one. A reply that fits in one
// chunk, and every reply to a request without the flag, is one message as before. (Over
// loopback ZeroMQ, 1 MiB messages move a 16-64 MiB reply 1.5-4x faster than one message:
// the receiver's buffer for each message is reused rather than mapped and faulted in.)
// A server of before kFlagChunkedReply refuses the flag as malformed ("unknown flags"):
// with one, cluster.chunk_bytes = 0.
//
// A fixed-position array keeps the header small (about 20-40 bytes) and lets the decoder
// check every field's type and range before it looks at a payload byte.
//
// Thread safety: all functions here are pure and may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "compression/compressor.h"
#include "ps/status.h"

namespace asgd::ps {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr uint32_t kHeaderFields = 17;           // always present
inline constexpr uint32_t kOptionalHeaderFields = 2;    // oldest_version, encoding
// An encoded header never exceeds this many bytes.
inline constexpr std::size_t kMaxHeaderBytes = 512;
// Longest error message carried on the wire; longer ones are cut.
inline constexpr std::size_t kMaxErrorMessageBytes = 300;
// Most payload frames one message may carry (one per range of a shard).
inline constexpr uint32_t kMaxPayloadFrames = 4096;

enum class Op : uint8_t {
  kPush = 1,       // apply a payload to the shard
  kPull = 2,       // read values and the version
  kPushPull = 3,   // push then reply with a rule-chosen payload, atomically
  kRegister = 4,   // announce a worker; reply carries the shard size
  kHeartbeat = 5,  // liveness; answered at once
  kBarrier = 6,    // held until `aux` participants arrived with the same barrier id
  kError = 7,      // reply only: code + message
  kClock = 8,      // a worker finished clock `clock` (SSP, rounds); the rule may hold it
  kStop = 9,       // ask the server to stop after replying
  kCheckpoint = 10,  // reserved: snapshot/restore over the wire
};
// One past the largest Op value; ops in [1, kOpEnd) are known.
inline constexpr uint32_t kOpEnd = 11;
std::string_view OpName(Op op);
// True when requests with this op carry a payload.
bool OpRequestHasPayload(Op op);

enum class Role : uint8_t {
  kUnknown = 0,
  kCoordinator = 1,
  kPs = 2,
  kWorker = 3,
  kEvaluator = 4,
};
inline constexpr uint32_t kRoleEnd = 5;
std::string_view RoleName(Role role);

// Element types. Only kFloat32 is served today; the others are reserved so that a peer
// speaking a newer protocol gets a clear "bad dtype" reply rather than garbage.
enum class DType : uint8_t { kNone = 0, kFloat32 = 1, kFloat16 = 2, kBFloat16 = 3, kFloat64 = 4 };
inline constexpr uint32_t kDTypeEnd = 5;
std::string_view DTypeName(DType dtype);

inline constexpr uint32_t kFlagReply = 1u << 0;
// On a push or push-pull request: more chunks of this push follow (see "Chunked pushes");
// on a pull or push-pull reply: more chunks of this reply follow ("Chunked replies").
inline constexpr uint32_t kFlagMoreChunks = 1u << 1;
// On a push or push-pull request, or a pull or push-pull reply: a chunk after the first.
inline constexpr uint32_t kFlagLaterChunk = 1u << 2;
inline constexpr uint32_t kChunkFlags = kFlagMoreChunks | kFlagLaterChunk;
// On a pull or push-pull request: the reply may come in chunks (see "Chunked replies").
// On a pull or push-pull reply, kFlagMoreChunks and kFlagLaterChunk mark its chunks.
inline constexpr uint32_t kFlagChunkedReply = 1u << 3;
inline constexpr uint32_t kKnownFlags = kFlagReply | kChunkFlags | kFlagChunkedReply;

// What a server did with a push (carried in the push reply's aux field).
enum class PushOutcome : uint8_t {
  kApplied = 0,   // changed the shard
  kAccepted = 1,  // taken in (e.g. buffered for aggregation) but not applied yet
  kDropped = 2,   // ignored as stale (e.g. a synchronous round already moved on); counted
};
std::string_view PushOutcomeName(PushOutcome outcome);

struct Header {
  uint32_t protocol = kProtocolVersion;
  Op op = Op::kHeartbeat;
  uint32_t flags = 0;
  Role role = Role::kUnknown;
  uint32_t sender = 0;
  uint32_t shard = 0;
  uint64_t request_id = 0;
  uint64_t version = 0;
  int64_t clock = 0;
  DType dtype = DType::kNone;
  uint64_t offset = 0;
  uint64_t count = 0;
  uint64_t payload_bytes = 0;
  uint32_t frames = 0;
  ErrorCode code = ErrorCode::kNone;
  uint64_t aux = 0;
  std::string message;
  // Optional field 17; set only on push and push-pull requests, and then <= version.
  std::optional<uint64_t> oldest_version;
  // Optional field 18; not kDense only on push and push-pull requests.
  compression::Encoding encoding = compression::Encoding::kDense;

  bool is_reply() const { return (flags & kFlagReply) != 0; }
  bool operator==(const Header&) const = default;
};

// Encodes h into out and returns the number of bytes written: kHeaderFields fields, then
// oldest_version when set or when encoding is not kDense (as version if not set), then
// encoding when not kDense. message is cut to kMaxErrorMessageBytes.
// REQUIRES: out.size() >= kMaxHeaderBytes.
std::size_t EncodeHeader(const Header& h, std::span<std::byte> out);

// The result of decoding or validating: kNone, or a code and a one-line reason naming
// the field and the values involved.
struct DecodeError {
  ErrorCode code = ErrorCode::kNone;
  std::string detail;
  bool ok() const { return code == ErrorCode::kNone; }
};

// Decodes one header frame into *out and validates each field on its own: the array
// shape, every field's type, protocol version, op, role, dtype and flag values, lengths
// (count * element size == payload_bytes, frames <= kMaxPayloadFrames, a payload only
// for ops that carry one, count and offset + count without overflow), and the optional
// oldest_version (a push or push-pull request only, at most version) and encoding (a
// push or push-pull request only, a known compressed encoding, kEncodedFrames frames,
// payload_bytes at most MaxEncodedBytes(count)). The frames' contents are the shard's
// to decode (ShardCore), before anything is applied. Never reads past
// frame.size() and never allocates more than the message string.
// On failure *out may be partly filled: out->request_id is set whenever the frame was
// well-formed enough to read it (so the error reply can be matched), else 0.
DecodeError DecodeHeader(std::span<const std::byte> frame, Header* out);

// Checks the payload frames that followed a decoded header: their number equals
// h.frames, each is a whole number of elements (and not empty), and their sizes sum to
// h.payload_bytes. max_payload_bytes bounds what this receiver accepts at all.
DecodeError CheckPayloadFrames(const Header& h, std::span<const std::size_t> frame_sizes,
                               uint64_t max_payload_bytes);

// Checks a request against the shard that received it: shard id, and
// [offset, offset + count) inside [0, shard_size).
DecodeError CheckRequestForShard(const Header& h, uint32_t shard, uint64_t shard_size);

// The most bytes a compressed encoding of count elements may take: 9 count + 16, above
// each form's largest (compression/compressor.h): sparse pairs at k = count, 8 count;
// terngrad with a piece per element, 4 + 8 count (the piece table) + 2 bits per element
// in whole words; qsgd with buckets of 1, 8 + 4 count (the norms) + 17 bits per element.
uint64_t MaxEncodedBytes(uint64_t count);

// Bytes per element of dtype (0 for kNone and unknown values).
std::size_t DTypeSize(DType dtype);

// Decodes a whole multipart message as a server would: the header, then the payload
// frames against it, then (if shard_size >= 0) the shard checks. Exposed for the fuzz
// target and tests; the server runs the same three steps.
DecodeError DecodeMessage(std::span<const std::span<const std::byte>> frames, Header* out,
                          uint64_t max_payload_bytes, uint32_t shard, int64_t shard_size);

}  // namespace asgd::ps
