#include "ps/status.h"

namespace asgd::ps {

std::string ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNone: return "none";
    case ErrorCode::kTruncated: return "truncated";
    case ErrorCode::kMalformedHeader: return "malformed_header";
    case ErrorCode::kProtocolVersion: return "protocol_version";
    case ErrorCode::kUnknownOp: return "unknown_op";
    case ErrorCode::kWrongShard: return "wrong_shard";
    case ErrorCode::kOutOfRange: return "out_of_range";
    case ErrorCode::kBadDType: return "bad_dtype";
    case ErrorCode::kPayloadMismatch: return "payload_mismatch";
    case ErrorCode::kBadFrames: return "bad_frames";
    case ErrorCode::kTooLarge: return "too_large";
    case ErrorCode::kNonFinite: return "non_finite";
    case ErrorCode::kRejectedByRule: return "rejected_by_rule";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kShuttingDown: return "shutting_down";
    case ErrorCode::kBadEncoding: return "bad_encoding";
    case ErrorCode::kIncompletePush: return "incomplete_push";
  }
  return "code " + std::to_string(static_cast<unsigned>(code));
}

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kRemoteError: return "remote_error";
    case StatusCode::kBadReply: return "bad_reply";
    case StatusCode::kAborted: return "aborted";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  if (error_ != ErrorCode::kNone) out += " (" + ErrorCodeName(error_) + ")";
  if (!message_.empty()) out += ": " + message_;
  return out;
}

}  // namespace asgd::ps
