// Outcomes of transport operations as values: expected outcomes are not exceptions
// (docs/architecture.md#errors).
//
// Timeouts, error replies from a server and stale pushes are normal events in
// asynchronous training, so the client reports them as a Status rather than throwing.
// Exceptions remain for setup failures (ConfigError, IoError) and bugs (InvariantError).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace asgd::ps {

// Error codes carried on the wire in error replies (Header::code). Values are part of the
// protocol: append new codes, never renumber.
enum class ErrorCode : uint16_t {
  kNone = 0,
  kTruncated = 1,          // a header frame too short to hold a message
  kMalformedHeader = 2,    // not MessagePack, or MessagePack of the wrong shape/type
  kProtocolVersion = 3,    // the header's protocol version is not ours
  kUnknownOp = 4,          // an op this server does not know or does not serve
  kWrongShard = 5,         // the request names another shard
  kOutOfRange = 6,         // [offset, offset + count) is outside the shard
  kBadDType = 7,           // a dtype other than float32
  kPayloadMismatch = 8,    // payload bytes disagree with the header (count, frames)
  kBadFrames = 9,          // wrong number of payload frames, or a frame not whole elements
  kTooLarge = 10,          // a claimed length above the configured maximum
  kNonFinite = 11,         // NaN or Inf in a push payload
  kRejectedByRule = 12,    // the server rule refused the request (message says why)
  kInternal = 13,          // the server failed while handling the request (a bug)
  kShuttingDown = 14,      // the server is stopping and dropped a held request
  kBadEncoding = 15,       // a compressed push whose encoding or frames do not decode
  // A chunked push whose chunks did not all reach this server in sequence (its first
  // went to a server that died, or its sequence broke): nothing of it was applied, and
  // sending the whole push again is safe (message.h, "Chunked pushes").
  kIncompletePush = 16,
};

// "none", "truncated", ..., or "code 123" for an unknown value.
std::string ErrorCodeName(ErrorCode code);

enum class StatusCode : uint8_t {
  kOk = 0,
  kTimeout = 1,      // no (complete) reply within the deadline; the request may still land
  kRemoteError = 2,  // the server answered with an error reply; error_code() says which
  kBadReply = 3,     // a reply that does not match its request (a protocol bug or a stray peer)
  kAborted = 4,      // the request was abandoned (connection reset, client closing)
};

class Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message, ErrorCode error = ErrorCode::kNone)
      : code_(code), error_(error), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status Timeout(std::string message) { return {StatusCode::kTimeout, std::move(message)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  bool timed_out() const { return code_ == StatusCode::kTimeout; }
  StatusCode code() const { return code_; }
  // For kRemoteError: the server's error code; kNone otherwise.
  ErrorCode error_code() const { return error_; }
  // One line, e.g. "shard 1 (tcp://127.0.0.1:5001): non_finite: push payload has NaN at 17".
  const std::string& message() const { return message_; }
  // "ok", or "<code>: <message>".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  ErrorCode error_ = ErrorCode::kNone;
  std::string message_;
};

std::string_view StatusCodeName(StatusCode code);

}  // namespace asgd::ps
