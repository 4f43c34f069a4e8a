// The file one shard's checkpoint is saved in (sharded saving, as TensorFlow's
// Saver(sharded=True): every shard writes its own file; experiments/ writes the manifest
// that ties them together, last).
//
// Layout (little-endian):
//   "ASGDSHRD"            8 bytes, magic
//   format                u32, kCheckpointFormat
//   shard                 u32
//   version               u64, the shard's update counter
//   count                 u64, float32 values that follow
//   rule_name length      u32, then the rule's name (at most 256 bytes)
//   rule_state length     u64, then the rule's state (ServerRule::SaveState)
//   values                count × 4 bytes
//   SHA-256               32 bytes over everything above
//
// Decoding checks every length against what is left before touching a byte (a file from
// a stranger or a disk cannot make it read out of bounds or allocate more than the file
// holds), then the digest, so a truncated or altered file is refused with one line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ps/shard_core.h"

namespace asgd::ps {

inline constexpr uint32_t kCheckpointFormat = 1;

// The bytes of a shard's checkpoint.
std::string EncodeShardCheckpoint(const ShardSnapshot& snapshot, std::string_view rule_name);

struct ShardCheckpoint {
  ShardSnapshot snapshot;
  std::string rule_name;
};
// Decodes and verifies. Throws DataError("<what>: <problem>") naming `what` (e.g. the
// file) for anything malformed, truncated, of another format or with a wrong digest.
ShardCheckpoint DecodeShardCheckpoint(std::string_view bytes, std::string_view what);

}  // namespace asgd::ps
