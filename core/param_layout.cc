#include "core/param_layout.h"

#include <sstream>

#include "core/check.h"

namespace asgd {

int ParamLayout::Add(std::string name, std::vector<int64_t> shape) {
  ASGD_CHECK(!name.empty(), "tensor name must not be empty");
  ASGD_CHECK(Find(name) < 0, "duplicate tensor name ", name);
  int64_t n = 1;
  for (int64_t d : shape) {
    ASGD_CHECK_GT(d, 0, "in shape of tensor ", name);
    n *= d;
  }
  TensorSpec spec{std::move(name), std::move(shape), size_, n};
  size_ += n;
  tensors_.push_back(std::move(spec));
  return static_cast<int>(tensors_.size()) - 1;
}

const TensorSpec& ParamLayout::tensor(int index) const {
  ASGD_CHECK(index >= 0 && index < static_cast<int>(tensors_.size()), "tensor index ", index);
  return tensors_[static_cast<std::size_t>(index)];
}

int ParamLayout::Find(std::string_view name) const {
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const TensorSpec& ParamLayout::Get(std::string_view name) const {
  int i = Find(name);
  ASGD_CHECK(i >= 0, "no tensor named ", name, " in layout: ", Describe());
  return tensors_[static_cast<std::size_t>(i)];
}

std::span<float> ParamLayout::View(std::span<float> flat, int index) const {
  ASGD_CHECK_EQ(static_cast<int64_t>(flat.size()), size_, "flat buffer size vs layout size");
  const TensorSpec& t = tensor(index);
  return flat.subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.size));
}

std::span<const float> ParamLayout::View(std::span<const float> flat, int index) const {
  ASGD_CHECK_EQ(static_cast<int64_t>(flat.size()), size_, "flat buffer size vs layout size");
  const TensorSpec& t = tensor(index);
  return flat.subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.size));
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? "x" : "") << shape[i];
  return os.str();
}

std::string ParamLayout::Describe() const {
  std::ostringstream os;
  os << tensors_.size() << " tensors, " << size_ << " floats:";
  for (const auto& t : tensors_) os << " " << t.name << "[" << ShapeToString(t.shape) << "]@" << t.offset;
  return os.str();
}

uint64_t ParamLayout::Fingerprint() const {
  // FNV-1a over a canonical text form; stable across platforms and builds.
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ULL;
    }
  };
  for (const auto& t : tensors_) {
    mix(t.name);
    mix("|");
    mix(ShapeToString(t.shape));
    mix("|");
    mix(std::to_string(t.offset));
    mix(";");
  }
  return h;
}

bool ParamLayout::operator==(const ParamLayout& other) const {
  if (size_ != other.size_ || tensors_.size() != other.tensors_.size()) return false;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const auto& a = tensors_[i];
    const auto& b = other.tensors_[i];
    if (a.name != b.name || a.shape != b.shape || a.offset != b.offset) return false;
  }
  return true;
}

}  // namespace asgd
