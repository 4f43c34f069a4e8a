// Shared by the codec tests (message_test.cc, message_values_test.cc): headers to start
// from, a second MessagePack encoder that writes what EncodeHeader cannot (wrong types,
// widths, lengths), and the shape of every rejection.
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "ps/message.h"

namespace asgd::ps::codec_test {

inline constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
inline constexpr uint32_t kU32Max = std::numeric_limits<uint32_t>::max();
// DecodeHeader's sanity bound on count and offset (message.cc).
inline constexpr uint64_t kMaxElements = uint64_t{1} << 40;

// Field names in wire order, as the decoder names them in its messages.
inline const char* const kFieldNames[kHeaderFields] = {
    "protocol",      "op",      "flags", "role",  "sender", "shard",
    "request_id",    "version", "clock", "dtype", "offset", "count",
    "payload_bytes", "frames",  "code",  "aux",   "message"};

inline std::vector<std::byte> Encode(const Header& h) {
  std::vector<std::byte> buf(kMaxHeaderBytes);
  buf.resize(EncodeHeader(h, buf));
  return buf;
}

// A valid push request of 4 float32 elements in one frame, with a distinct value in
// every field, so a field read from the wrong position shows.
inline Header PushRequest() {
  Header h;
  h.op = Op::kPush;
  h.role = Role::kWorker;
  h.sender = 3;
  h.shard = 1;
  h.request_id = 77;
  h.version = 5;
  h.clock = 9;
  h.dtype = DType::kFloat32;
  h.offset = 2;
  h.count = 4;
  h.payload_bytes = 16;
  h.frames = 1;
  return h;
}

inline Header PullRequest() {
  Header h = PushRequest();
  h.op = Op::kPull;
  h.payload_bytes = 0;
  h.frames = 0;
  return h;
}

// ---- A second encoder, field by field, for headers EncodeHeader cannot produce -------

using Packer = msgpack::packer<msgpack::sbuffer>;
using FieldWriter = std::function<void(Packer&)>;

inline FieldWriter Uint(uint64_t v) {
  return [v](Packer& pk) { pk.pack_uint64(v); };
}
inline FieldWriter Int(int64_t v) {
  return [v](Packer& pk) { pk.pack_int64(v); };
}
inline FieldWriter Str(std::string s) {
  return [s](Packer& pk) {
    pk.pack_str(static_cast<uint32_t>(s.size()));
    pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
  };
}

// The header's 17 wire fields, in order.
inline std::vector<FieldWriter> WireFields(const Header& h) {
  return {Uint(h.protocol),
          Uint(static_cast<uint64_t>(h.op)),
          Uint(h.flags),
          Uint(static_cast<uint64_t>(h.role)),
          Uint(h.sender),
          Uint(h.shard),
          Uint(h.request_id),
          Uint(h.version),
          Int(h.clock),
          Uint(static_cast<uint64_t>(h.dtype)),
          Uint(h.offset),
          Uint(h.count),
          Uint(h.payload_bytes),
          Uint(h.frames),
          Uint(static_cast<uint64_t>(h.code)),
          Uint(h.aux),
          Str(h.message)};
}

inline std::vector<std::byte> PackArray(const std::vector<FieldWriter>& fields) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(static_cast<uint32_t>(fields.size()));
  for (const FieldWriter& f : fields) f(pk);
  std::vector<std::byte> out(buf.size());
  std::memcpy(out.data(), buf.data(), buf.size());
  return out;
}

inline std::vector<std::byte> WithField(const Header& h, uint32_t index, FieldWriter value) {
  std::vector<FieldWriter> fields = WireFields(h);
  fields[index] = std::move(value);
  return PackArray(fields);
}

inline DecodeError Decode(const std::vector<std::byte>& frame, Header* out = nullptr) {
  Header scratch;
  return DecodeHeader(frame, out != nullptr ? out : &scratch);
}

// Every rejection: the code, a detail naming the field, on one line.
inline void ExpectRejected(const DecodeError& e, ErrorCode code, const std::string& names) {
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.code, code) << "got " << ErrorCodeName(e.code) << ": " << e.detail;
  EXPECT_THAT(e.detail, ::testing::HasSubstr(names));
  EXPECT_THAT(e.detail, ::testing::Not(::testing::HasSubstr("\n")));
}

}  // namespace asgd::ps::codec_test
