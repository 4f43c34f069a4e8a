// The flat parameter vector (docs/architecture.md#the-flat-parameter-vector).
//
// Every model exposes its parameters as one contiguous float32 buffer described by a
// ParamLayout: an ordered list of named tensors, each a contiguous [offset, offset+size)
// range of the buffer. Gradients use the same layout. Everything that moves parameters
// (push, pull, checkpoints, sharding, GPU copies) works on ranges of that buffer.
//
// Tensors are packed without padding, in the order they were added, so the layout is a
// pure function of the model's architecture and two processes that build the same model
// agree on every offset.
//
// Thread safety: a ParamLayout is immutable once built and may be shared freely.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace asgd {

struct TensorSpec {
  std::string name;            // unique within the layout, e.g. "fc1.weight"
  std::vector<int64_t> shape;  // row-major; empty means a scalar
  int64_t offset = 0;          // first element in the flat buffer
  int64_t size = 0;            // product of shape (1 for a scalar)
};

// A contiguous element range [begin, begin + count) of the flat buffer.
struct Range {
  int64_t begin = 0;
  int64_t count = 0;
  int64_t end() const { return begin + count; }
  bool operator==(const Range&) const = default;
};

class ParamLayout {
 public:
  ParamLayout() = default;

  // Appends a tensor and returns its index. REQUIRES: name not used yet, every
  // dimension > 0. Throws InvariantError otherwise.
  int Add(std::string name, std::vector<int64_t> shape);

  int64_t size() const { return size_; }
  int64_t size_bytes() const { return size_ * static_cast<int64_t>(sizeof(float)); }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const TensorSpec& tensor(int index) const;

  // Returns the index of the named tensor, or -1.
  int Find(std::string_view name) const;
  // Returns the named tensor. Throws InvariantError if there is none.
  const TensorSpec& Get(std::string_view name) const;

  // Views of one tensor inside a flat buffer of exactly size() elements.
  std::span<float> View(std::span<float> flat, int index) const;
  std::span<const float> View(std::span<const float> flat, int index) const;

  // A one-line description, e.g. "3 tensors, 203530 floats: fc1.weight[784x256]@0 ...".
  std::string Describe() const;

  // A stable 64-bit fingerprint of names, shapes and offsets. Peers compare it to make
  // sure they agree on the layout before exchanging ranges.
  uint64_t Fingerprint() const;

  bool operator==(const ParamLayout& other) const;

 private:
  std::vector<TensorSpec> tensors_;
  int64_t size_ = 0;
};

std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace asgd
