#include "datasets/idx.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <span>

#include "core/error.h"
#include "datasets/memory.h"

namespace asgd::datasets {
namespace {

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string DescribeMagic(uint32_t magic) {
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%08" PRIx32, magic);
  std::string out = std::to_string(magic) + " (" + hex + ")";
  if (magic == kIdxImagesMagic) out += ", an image file";
  if (magic == kIdxLabelsMagic) out += ", a label file";
  // The gzip signature in the first bytes of the content means the file was compressed
  // twice.
  if ((magic >> 16) == 0x1f8b) out += ", gzip data: is the file compressed twice?";
  return out;
}

// Reads the magic and the dimensions of an IDX header and checks them.
std::vector<uint32_t> ReadHeader(ContentReader& in, uint32_t expected_magic, int num_dims,
                                 const char* kind) {
  const std::size_t header_size = 4 + 4 * static_cast<std::size_t>(num_dims);
  std::array<uint8_t, 16> header{};
  std::size_t got = in.Read(std::span<uint8_t>(header.data(), 4));
  if (got < 4) {
    throw DataError(in.path(), got == 0 ? std::string("is empty: expected an IDX ") + kind + " file"
                                        : "ends inside the IDX header (" + std::to_string(got) +
                                              " of " + std::to_string(header_size) + " bytes)");
  }
  uint32_t magic = BigEndian32(header.data());
  if (magic != expected_magic) {
    throw DataError(in.path(), "expected IDX magic " + std::to_string(expected_magic) + " (" +
                                   kind + ": unsigned bytes, " + std::to_string(num_dims) +
                                   (num_dims == 1 ? " dimension" : " dimensions") + "), found " +
                                   DescribeMagic(magic));
  }
  got += in.Read(std::span<uint8_t>(header.data() + 4, header_size - 4));
  if (got < header_size) {
    throw DataError(in.path(), "ends inside the IDX header (" + std::to_string(got) + " of " +
                                   std::to_string(header_size) + " bytes)");
  }
  std::vector<uint32_t> dims;
  for (int d = 0; d < num_dims; ++d) {
    uint32_t v = BigEndian32(header.data() + 4 + 4 * static_cast<std::size_t>(d));
    if (v == 0) {
      throw DataError(in.path(), "IDX header dimension " + std::to_string(d) +
                                     " is 0: expected a positive size");
    }
    dims.push_back(v);
  }
  return dims;
}

[[noreturn]] void ThrowTruncated(const ContentReader& in, uint64_t size, uint64_t have,
                                 const std::string& what) {
  throw DataError(in.path(), "truncated: the IDX header promises " + std::to_string(size) +
                                 " bytes of " + what + ", the file has " + std::to_string(have));
}

// Reads exactly `size` payload bytes, then requires the end of the content. A size the
// content cannot hold is refused before anything is allocated for it; otherwise address
// space for up to kEagerReserve bytes is reserved at once (untouched, it costs nothing)
// and the buffer is filled, and beyond that grown, only with data actually read, so a
// header that lies about a large size cannot make us commit much more memory than the
// file holds.
std::vector<uint8_t> ReadPayload(ContentReader& in, uint64_t size, const std::string& what) {
  if (size > kMaxIdxPayloadBytes) {
    throw DataError(in.path(), "IDX header claims " + std::to_string(size) + " bytes of " + what +
                                   ", more than the " + std::to_string(kMaxIdxPayloadBytes) +
                                   "-byte limit: the header is corrupt");
  }
  // The reservation below used to follow the header alone: a 20-byte file claiming 2 GB
  // reserved 256 MiB (and std::bad_alloc, not DataError, where address space is limited).
  // Check the claim against what the content can hold first; to name the size it does
  // have, count the rest (bounded by the file, read in small chunks by FinishHex).
  if (size > in.MaxRemaining()) {
    const uint64_t before = in.bytes_read();
    (void)in.FinishHex();
    ThrowTruncated(in, size, in.bytes_read() - before, what);
  }
  constexpr uint64_t kStep = uint64_t{16} << 20;
  constexpr uint64_t kEagerReserve = uint64_t{256} << 20;
  std::vector<uint8_t> payload;
  payload.reserve(std::min(size, kEagerReserve));
  AdviseHugePages(payload.data(), payload.capacity());
  uint64_t have = 0;
  while (have < size) {
    uint64_t next = std::min(size, std::max(have * 2, have + kStep));
    payload.resize(next);
    std::size_t n = in.Read(std::span<uint8_t>(payload.data() + have, next - have));
    have += n;
    if (have < next) ThrowTruncated(in, size, have, what);
  }
  if (!in.AtEnd()) {
    throw DataError(in.path(), "has more data after the " + std::to_string(size) + " bytes of " +
                                   what +
                                   " its IDX header describes (trailing bytes or a wrong "
                                   "header)");
  }
  return payload;
}

}  // namespace

IdxImages ReadIdxImages(const std::string& path, const ContentCheck& check) {
  ContentReader in(path);
  return ReadIdxImages(in, check);
}

std::vector<uint8_t> ReadIdxLabels(const std::string& path, const ContentCheck& check) {
  ContentReader in(path);
  return ReadIdxLabels(in, check);
}

IdxImages ReadIdxImages(ContentReader& in, const ContentCheck& check) {
  std::vector<uint32_t> dims = ReadHeader(in, kIdxImagesMagic, 3, "images");
  IdxImages images;
  images.count = dims[0];
  images.rows = dims[1];
  images.cols = dims[2];
  // Each factor is below 2^32, so count × rows fits; the check keeps the product with
  // cols from overflowing.
  uint64_t per_image = uint64_t{dims[1]} * dims[2];
  uint64_t size =
      per_image > kMaxIdxPayloadBytes / dims[0] ? kMaxIdxPayloadBytes + 1 : per_image * dims[0];
  if (size > kMaxIdxPayloadBytes) {
    throw DataError(in.path(), "IDX header claims " + std::to_string(dims[0]) + " images of " +
                              std::to_string(dims[1]) + "x" + std::to_string(dims[2]) +
                              " pixels, more than the " + std::to_string(kMaxIdxPayloadBytes) +
                              "-byte limit: the header is corrupt");
  }
  images.pixels = ReadPayload(in, size,
                              "pixels (" + std::to_string(dims[0]) + " images of " +
                                  std::to_string(dims[1]) + "x" + std::to_string(dims[2]) + ")");
  in.Verify(check);
  return images;
}

std::vector<uint8_t> ReadIdxLabels(ContentReader& in, const ContentCheck& check) {
  std::vector<uint32_t> dims = ReadHeader(in, kIdxLabelsMagic, 1, "labels");
  std::vector<uint8_t> labels =
      ReadPayload(in, dims[0], "labels (" + std::to_string(dims[0]) + " examples)");
  in.Verify(check);
  return labels;
}

Dataset LoadIdxDataset(std::string name, const std::string& images_path,
                       const std::string& labels_path, const IdxLoadOptions& options) {
  ContentReader images(images_path);
  ContentReader labels(labels_path);
  return LoadIdxDataset(std::move(name), images, labels, options);
}

Dataset LoadIdxDataset(std::string name, ContentReader& images_in, ContentReader& labels_in,
                       const IdxLoadOptions& options) {
  IdxImages images = ReadIdxImages(images_in, options.images_check);
  std::vector<uint8_t> labels = ReadIdxLabels(labels_in, options.labels_check);
  const std::string& labels_path = labels_in.path();
  if (static_cast<int64_t>(labels.size()) != images.count) {
    throw DataError(labels_path, "has " + std::to_string(labels.size()) + " labels but " +
                                     images_in.path() + " has " + std::to_string(images.count) +
                                     " images: expected one label per image");
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= options.num_classes) {
      throw DataError(labels_path, "label " + std::to_string(labels[i]) + " of example " +
                                       std::to_string(i) + ": expected a class below " +
                                       std::to_string(options.num_classes));
    }
  }

  int64_t n = images.count;
  if (options.max_examples >= 0) n = std::min(n, options.max_examples);
  Dataset ds;
  ds.name = std::move(name);
  ds.num_examples = n;
  ds.num_features = images.rows * images.cols;
  ds.num_classes = options.num_classes;
  ds.example_shape = {1, images.rows, images.cols};
  ds.sparse = false;
  // A table makes the scaling exact (the same float as value / 255.0f) and cheap.
  std::array<float, 256> scale{};
  for (int v = 0; v < 256; ++v) scale[v] = static_cast<float>(v) / 255.0f;
  const std::size_t total = static_cast<std::size_t>(n * ds.num_features);
  ds.dense.reserve(total);
  AdviseHugePages(ds.dense.data(), total * sizeof(float));
  ds.dense.resize(total);
  const uint8_t* src = images.pixels.data();
  float* dst = ds.dense.data();
  for (std::size_t i = 0; i < total; ++i) dst[i] = scale[src[i]];
  ds.labels.assign(labels.begin(), labels.begin() + n);
  return ds;
}

}  // namespace asgd::datasets
