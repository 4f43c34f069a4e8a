#include "datasets/cifar.h"

#include <algorithm>
#include <array>
#include <span>

#include "core/check.h"
#include "core/error.h"
#include "datasets/memory.h"

namespace asgd::datasets {
namespace {

std::string Records(int64_t n) { return std::to_string(n) + (n == 1 ? " record" : " records"); }

// What the file should hold, for messages.
std::string Expected(const CifarReadOptions& options) {
  if (options.records_per_file == 0) return "expected at least one record";
  return "expected " + Records(options.records_per_file) + " (" +
         std::to_string(options.records_per_file * kCifarRecordBytes) + " bytes)";
}

}  // namespace

CifarRecords ReadCifarFile(const std::string& path, const CifarReadOptions& options,
                           const ContentCheck& check) {
  ContentReader in(path);
  return ReadCifarFile(in, options, check);
}

CifarRecords ReadCifarFile(ContentReader& in, const CifarReadOptions& options,
                           const ContentCheck& check) {
  ASGD_CHECK(
      options.records_per_file >= 0 && options.num_classes >= 1 && options.num_classes <= 256,
      "CifarReadOptions");
  // Read at most one record more than expected: enough to tell a file that is too long
  // without holding an arbitrarily large one in memory.
  const bool any = options.records_per_file == 0;
  // Without a record count, a file is bounded by what the format can address (2^31 bytes,
  // as for IDX payloads).
  const uint64_t cap =
      any ? (uint64_t{1} << 31)
          : static_cast<uint64_t>((options.records_per_file + 1) * kCifarRecordBytes);
  std::vector<uint8_t> bytes;
  bytes.reserve(static_cast<std::size_t>(std::min<uint64_t>(cap, in.MaxRemaining())));
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  for (;;) {
    const std::size_t old = bytes.size();
    const std::size_t want = static_cast<std::size_t>(std::min<uint64_t>(kChunk, cap - old));
    if (want == 0) break;
    bytes.resize(old + want);
    const std::size_t n = in.Read(std::span<uint8_t>(bytes.data() + old, want));
    bytes.resize(old + n);
    if (n < want) break;
  }
  // The size named in messages: what was read, plus the rest of a file that is too long.
  uint64_t size = bytes.size();
  const bool too_long = !in.AtEnd();
  if (too_long) {
    const uint64_t before = in.bytes_read();
    (void)in.FinishHex();
    size += in.bytes_read() - before;
  }
  const auto record = static_cast<uint64_t>(kCifarRecordBytes);
  if (size % record != 0) {
    throw DataError(in.path(), std::to_string(size) + " bytes are not a whole number of " +
                                   std::to_string(kCifarRecordBytes) +
                                   "-byte CIFAR records (a label byte, then " +
                                   std::to_string(kCifarImageBytes) +
                                   " pixel bytes): " + Expected(options));
  }
  const auto count = static_cast<int64_t>(size / record);
  if (count == 0 || (!any && count != options.records_per_file)) {
    throw DataError(in.path(), "holds " + Records(count) + " (" + std::to_string(size) +
                                   " bytes) of CIFAR data: " + Expected(options) + " of " +
                                   std::to_string(kCifarRecordBytes) + " bytes");
  }
  if (too_long) {
    throw DataError(in.path(), "holds more than " + std::to_string(cap) +
                                   " bytes of CIFAR data: " + Expected(options));
  }
  in.Verify(check);

  CifarRecords out;
  out.labels.resize(static_cast<std::size_t>(count));
  out.pixels.resize(static_cast<std::size_t>(count * kCifarImageBytes));
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* rec = bytes.data() + i * kCifarRecordBytes;
    if (rec[0] >= options.num_classes) {
      throw DataError(in.path(),
                      "label " + std::to_string(rec[0]) + " of record " + std::to_string(i) +
                          " (byte offset " + std::to_string(i * kCifarRecordBytes) +
                          "): expected a class below " + std::to_string(options.num_classes));
    }
    out.labels[static_cast<std::size_t>(i)] = rec[0];
    std::copy(rec + 1, rec + kCifarRecordBytes, out.pixels.data() + i * kCifarImageBytes);
  }
  return out;
}

Dataset LoadCifarDataset(std::string name, const std::vector<std::string>& paths,
                         const CifarLoadOptions& options) {
  ASGD_CHECK(options.checks.empty() || options.checks.size() == paths.size(),
             "one check per CIFAR file");
  Dataset ds;
  ds.name = std::move(name);
  ds.num_features = kCifarImageBytes;
  ds.num_classes = options.read.num_classes;
  ds.example_shape = {kCifarChannels, kCifarSide, kCifarSide};
  ds.sparse = false;
  // With a known record count the whole split is reserved at once (no regrowth of a
  // 600 MB buffer), and each file's bytes are converted and dropped before the next.
  if (options.read.records_per_file > 0) {
    int64_t n = options.read.records_per_file * static_cast<int64_t>(paths.size());
    if (options.max_examples >= 0) n = std::min(n, options.max_examples);
    const auto values = static_cast<std::size_t>(n * kCifarImageBytes);
    ds.dense.reserve(values);
    AdviseHugePages(ds.dense.data(), values * sizeof(float));
  }
  // The same table as the IDX reader: exactly value / 255.0f.
  std::array<float, 256> scale{};
  for (int v = 0; v < 256; ++v) scale[v] = static_cast<float>(v) / 255.0f;
  int64_t n = 0;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    const ContentCheck check = options.checks.empty() ? ContentCheck{} : options.checks[f];
    const CifarRecords file = ReadCifarFile(paths[f], options.read, check);
    int64_t take = static_cast<int64_t>(file.labels.size());
    if (options.max_examples >= 0)
      take = std::max<int64_t>(0, std::min(take, options.max_examples - n));
    ds.labels.insert(ds.labels.end(), file.labels.begin(), file.labels.begin() + take);
    const std::size_t at = ds.dense.size();
    const auto values = static_cast<std::size_t>(take * kCifarImageBytes);
    ds.dense.resize(at + values);
    float* dst = ds.dense.data() + at;
    for (std::size_t k = 0; k < values; ++k) dst[k] = scale[file.pixels[k]];
    n += take;
  }
  ds.num_examples = n;
  return ds;
}

}  // namespace asgd::datasets
