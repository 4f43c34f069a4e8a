#include "ps/param_client.h"

#include "core/check.h"
#include "ps/placement.h"

namespace asgd::ps {

Status ParamClient::Pull(std::span<float> out) {
  Status st = DoPull(out);
  if (st.ok()) traffic_.bytes_pulled += static_cast<int64_t>(out.size_bytes());
  return st;
}

Status ParamClient::Push(std::span<const float> update, int64_t step) {
  Status st = DoPush(update, step);
  if (st.ok()) {
    traffic_.bytes_pushed += static_cast<int64_t>(update.size_bytes());
    traffic_.dense_bytes_pushed += static_cast<int64_t>(update.size_bytes());
  }
  return st;
}

std::vector<PushPart> PushPartsOf(const Placement& placement) {
  std::vector<PushPart> parts(static_cast<std::size_t>(placement.num_shards()));
  for (int s = 0; s < placement.num_shards(); ++s) {
    PushPart& part = parts[static_cast<std::size_t>(s)];
    for (const Range& r : placement.ranges(s)) part.ranges.push_back(r);
    part.count = placement.shard_size(s);
  }
  return parts;
}

std::vector<PushPart> ParamClient::PushParts() const {
  return {PushPart{{Range{0, size()}}, size()}};
}

Status ParamClient::PushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                                int64_t step) {
  Status st = DoPushEncoded(parts, out, step);
  if (st.ok()) {
    for (const compression::Encoded& e : parts) {
      traffic_.bytes_pushed += e.bytes();
      traffic_.dense_bytes_pushed += e.count * static_cast<int64_t>(sizeof(float));
    }
    traffic_.bytes_pulled += static_cast<int64_t>(out.size_bytes());
  }
  return st;
}

Status ParamClient::DoPushEncoded(std::span<const compression::Encoded> /*parts*/,
                                  std::span<float> /*out*/, int64_t /*step*/) {
  ASGD_CHECK(false, "this ParamClient does not take compressed pushes (TakesEncodedPushes)");
}

Status ParamClient::PushPull(std::span<const float> update, std::span<float> out, int64_t step) {
  Status st = DoPushPull(update, out, step);
  if (st.ok()) {
    traffic_.bytes_pushed += static_cast<int64_t>(update.size_bytes());
    traffic_.dense_bytes_pushed += static_cast<int64_t>(update.size_bytes());
    traffic_.bytes_pulled += static_cast<int64_t>(out.size_bytes());
  }
  return st;
}

Status ParamClient::PullSparse(std::span<const int64_t> indices, std::span<float> out) {
  Status st = DoPullSparse(indices, out);
  if (st.ok()) traffic_.bytes_pulled += static_cast<int64_t>(indices.size() * sizeof(float));
  return st;
}

Status ParamClient::PushSparse(std::span<const int64_t> indices, std::span<const float> values,
                               int64_t step) {
  ASGD_CHECK_EQ(indices.size(), values.size(), "sparse push");
  Status st = DoPushSparse(indices, values, step);
  if (st.ok()) {
    traffic_.bytes_pushed +=
        static_cast<int64_t>(indices.size() * (sizeof(int64_t) + sizeof(float)));
    traffic_.dense_bytes_pushed +=
        static_cast<int64_t>(indices.size() * (sizeof(int64_t) + sizeof(float)));
  }
  return st;
}

Status ParamClient::DoPullSparse(std::span<const int64_t> indices, std::span<float> out) {
  (void)indices;  // a dense pull reads every coordinate, the listed ones included
  return DoPull(out);
}

Status ParamClient::DoPushSparse(std::span<const int64_t> indices, std::span<const float> values,
                                 int64_t step) {
  std::vector<float> dense(static_cast<std::size_t>(size()), 0.0f);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    ASGD_CHECK(indices[i] >= 0 && indices[i] < size(), "sparse index ", indices[i], " outside [0, ",
               size(), ")");
    dense[static_cast<std::size_t>(indices[i])] += values[i];
  }
  return DoPush(dense, step);
}

}  // namespace asgd::ps
