#include "transport/ps_client.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "transport/client_core.h"
#include "transport/endpoint.h"
#include "transport/zero_copy.h"
#include "transport/zmq_util.h"

namespace asgd::transport {

using ps::Header;
using ps::Op;
using ps::Placement;
using ps::Status;
using ps::StatusCode;

// ---- RequestHandle -----------------------------------------------------------------

RequestHandle& RequestHandle::operator=(RequestHandle&& other) noexcept {
  if (this != &other) {
    RequestHandle old(std::move(*this));  // abandoned by its destructor
    state_ = std::move(other.state_);
  }
  return *this;
}

RequestHandle::~RequestHandle() {
  if (state_ == nullptr || done()) return;
  if (state_->owner != nullptr) state_->owner->Abandon(state_);
}

bool RequestHandle::done() const {
  return state_ != nullptr && state_->replied() && state_->completion.done();
}

Status RequestHandle::Wait(Duration timeout) {
  ASGD_CHECK(state_ != nullptr, "Wait on an empty RequestHandle");
  if (done()) return state_->status;
  if (state_->owner == nullptr) {
    return state_->status.ok() ? Status(StatusCode::kAborted, "the client was destroyed")
                               : state_->status;
  }
  return state_->owner->Wait(*state_, timeout);
}

Status RequestHandle::Wait() {
  ASGD_CHECK(state_ != nullptr, "Wait on an empty RequestHandle");
  if (done() || state_->owner == nullptr) return Wait(Duration::zero());
  return Wait(std::chrono::duration_cast<Duration>(state_->owner->options().timeout));
}

bool RequestHandle::Poll() {
  ASGD_CHECK(state_ != nullptr, "Poll on an empty RequestHandle");
  if (!done() && state_->owner != nullptr) state_->owner->Poll();
  return done();
}

Status RequestHandle::status() const {
  ASGD_CHECK(state_ != nullptr, "status of an empty RequestHandle");
  return state_->status;
}

std::span<const ShardResult> RequestHandle::results() const {
  ASGD_CHECK(state_ != nullptr, "results of an empty RequestHandle");
  return state_->results;
}

const ShardResult* RequestHandle::result(int shard) const {
  for (const ShardResult& r : results()) {
    if (r.shard == shard) return &r;
  }
  return nullptr;
}

// ---- PsClient ----------------------------------------------------------------------

PsClient::PsClient(std::shared_ptr<Context> context, std::vector<std::string> shard_endpoints,
                   Placement placement, ClientOptions options)
    : core_(std::make_unique<internal::ClientCore>(std::move(context), std::move(shard_endpoints),
                                                   std::move(placement), options)) {}

std::unique_ptr<PsClient> PsClient::FromCluster(std::shared_ptr<Context> context,
                                                const ClusterSpec& spec, Placement placement,
                                                ClientOptions options) {
  std::vector<std::string> endpoints;
  for (int i = 0; i < spec.num_ps(); ++i) endpoints.push_back(spec.PsAddress(i));
  return std::make_unique<PsClient>(std::move(context), std::move(endpoints), std::move(placement),
                                    options);
}

PsClient::~PsClient() = default;

int PsClient::num_shards() const { return core_->num_shards(); }
const Placement& PsClient::placement() const { return core_->placement(); }
const std::string& PsClient::endpoint(int shard) const { return core_->endpoint(shard); }
const ClientOptions& PsClient::options() const { return core_->options(); }
std::span<const uint64_t> PsClient::pulled_versions() const { return core_->pulled_versions(); }
ClientStats PsClient::stats() const { return core_->stats(); }

namespace {

void CheckFlat(const Placement& p, std::size_t size, const char* what) {
  ASGD_CHECK_EQ(static_cast<int64_t>(size), p.total_elements(), what,
                " buffer size vs the placement's total elements");
}

void CheckShardRange(const Placement& p, int shard, int64_t offset, std::size_t count) {
  ASGD_CHECK(shard >= 0 && shard < p.num_shards(), "shard ", shard, " of ", p.num_shards());
  ASGD_CHECK(offset >= 0 && offset + static_cast<int64_t>(count) <= p.shard_size(shard),
             "elements [", offset, ", ", offset + static_cast<int64_t>(count), ") of shard ", shard,
             " (size ", p.shard_size(shard), ")");
}

void CheckOldestVersions(const PushOptions& o, int num_shards) {
  ASGD_CHECK(o.oldest_versions.empty() || static_cast<int>(o.oldest_versions.size()) == num_shards,
             "push oldest versions: ", o.oldest_versions.size(), " for ", num_shards, " shards");
}

// The header's optional field: sent only where it says something (below the version), so
// that every other push stays readable by a peer that does not know the field.
std::optional<uint64_t> OldestVersion(const PushOptions& o, int shard, uint64_t version) {
  if (o.oldest_versions.empty()) return std::nullopt;
  const uint64_t oldest = o.oldest_versions[static_cast<std::size_t>(shard)];
  if (oldest >= version) return std::nullopt;
  return oldest;
}

// The versions a whole-vector push carries, one per shard (checked), and its oldest ones.
std::span<const uint64_t> PushVersions(const PushOptions& o, std::span<const uint64_t> pulled,
                                       int num_shards) {
  const std::span<const uint64_t> versions = o.versions.empty() ? pulled : o.versions;
  ASGD_CHECK_EQ(static_cast<int>(versions.size()), num_shards, "push versions per shard");
  CheckOldestVersions(o, num_shards);
  return versions;
}

// The header fields every part of a push shares.
Header PushHeader(bool pull, const PushOptions& o) {
  Header base;
  base.op = pull ? Op::kPushPull : Op::kPush;
  base.clock = o.clock;
  return base;
}

// Shard s's version and oldest version into the header of its part.
void StampVersions(Header* h, const PushOptions& o, std::span<const uint64_t> versions, int s) {
  h->version = versions[static_cast<std::size_t>(s)];
  h->oldest_version = OldestVersion(o, s, h->version);
}

}  // namespace

RequestHandle PsClient::Push(std::span<const float> values, const PushOptions& options) {
  return PushPull(values, {}, options);
}

RequestHandle PsClient::Pull(std::span<float> out) {
  const Placement& p = placement();
  CheckFlat(p, out.size(), "pull");
  auto st = core_->NewRequest(Op::kPull);
  Header base;
  base.op = Op::kPull;
  for (int s = 0; s < p.num_shards(); ++s) {
    if (p.shard_size(s) == 0) continue;
    internal::RequestPart part{s, 0, p.shard_size(s), out.data(), true};
    core_->SendPart(st, part, base, {});
  }
  return RequestHandle(std::move(st));
}

RequestHandle PsClient::PushPull(std::span<const float> values, std::span<float> out,
                                 const PushOptions& options) {
  const Placement& p = placement();
  const bool pull = !out.empty();
  CheckFlat(p, values.size(), "push");
  if (pull) {
    CheckFlat(p, out.size(), "push-pull destination");
    ASGD_CHECK(
        values.data() + values.size() <= out.data() || out.data() + out.size() <= values.data(),
        "push-pull source and destination overlap");
  }
  const std::span<const uint64_t> versions =
      PushVersions(options, pulled_versions(), p.num_shards());
  Header base = PushHeader(pull, options);
  auto st = core_->NewRequest(base.op);
  std::vector<std::span<const float>> pieces;
  for (int s = 0; s < p.num_shards(); ++s) {
    if (p.shard_size(s) == 0) continue;
    pieces.clear();
    for (const Range& r : p.ranges(s)) {
      pieces.push_back(
          values.subspan(static_cast<std::size_t>(r.begin), static_cast<std::size_t>(r.count)));
    }
    StampVersions(&base, options, versions, s);
    internal::RequestPart part{s, 0, p.shard_size(s), pull ? out.data() : nullptr, pull};
    core_->SendPart(st, part, base, pieces);
  }
  return RequestHandle(std::move(st));
}

RequestHandle PsClient::PushEncoded(std::span<const compression::Encoded> parts,
                                    std::span<float> out, const PushOptions& options) {
  const Placement& p = placement();
  const bool pull = !out.empty();
  ASGD_CHECK_EQ(static_cast<int>(parts.size()), p.num_shards(), "compressed push parts");
  if (pull) CheckFlat(p, out.size(), "push-pull destination");
  const std::span<const uint64_t> versions =
      PushVersions(options, pulled_versions(), p.num_shards());
  Header base = PushHeader(pull, options);
  auto st = core_->NewRequest(base.op);
  std::vector<std::span<const float>> frames;
  for (int s = 0; s < p.num_shards(); ++s) {
    if (p.shard_size(s) == 0) continue;
    const compression::Encoded& e = parts[static_cast<std::size_t>(s)];
    ASGD_CHECK_EQ(e.count, p.shard_size(s), "compressed part of shard ", s);
    // The frames travel as they are; SendPart counts them in 4-byte words.
    frames.clear();
    for (const std::vector<std::byte>& f : e.frames) {
      ASGD_CHECK(f.size() % sizeof(float) == 0, "encoded frame of ", f.size(), " bytes");
      frames.emplace_back(reinterpret_cast<const float*>(f.data()), f.size() / sizeof(float));
    }
    base.encoding = e.encoding;
    StampVersions(&base, options, versions, s);
    internal::RequestPart part{s, 0, p.shard_size(s), pull ? out.data() : nullptr, pull};
    core_->SendPart(st, part, base, frames);
  }
  return RequestHandle(std::move(st));
}

RequestHandle PsClient::PushShard(int shard, int64_t offset, std::span<const float> values,
                                  const PushOptions& options) {
  return PushPullShard(shard, offset, values, {}, options);
}

RequestHandle PsClient::PullShard(int shard, int64_t offset, std::span<float> out) {
  CheckShardRange(placement(), shard, offset, out.size());
  auto st = core_->NewRequest(Op::kPull);
  Header base;
  base.op = Op::kPull;
  internal::RequestPart part{shard, offset, static_cast<int64_t>(out.size()), out.data(), false};
  core_->SendPart(st, part, base, {});
  return RequestHandle(std::move(st));
}

RequestHandle PsClient::PushPullShard(int shard, int64_t offset, std::span<const float> values,
                                      std::span<float> out, const PushOptions& options) {
  CheckShardRange(placement(), shard, offset, values.size());
  const bool pull = !out.empty();
  if (pull) {
    ASGD_CHECK_EQ(out.size(), values.size(), "push-pull destination size");
  }
  std::span<const uint64_t> versions =
      options.versions.empty() ? pulled_versions() : options.versions;
  ASGD_CHECK_EQ(static_cast<int>(versions.size()), num_shards(), "push versions per shard");
  CheckOldestVersions(options, num_shards());
  const Op op = pull ? Op::kPushPull : Op::kPush;
  auto st = core_->NewRequest(op);
  Header base;
  base.op = op;
  base.clock = options.clock;
  base.version = versions[static_cast<std::size_t>(shard)];
  base.oldest_version = OldestVersion(options, shard, base.version);
  internal::RequestPart part{shard, offset, static_cast<int64_t>(values.size()),
                             pull ? out.data() : nullptr, false};
  const std::span<const float> pieces[1] = {values};
  core_->SendPart(st, part, base, pieces);
  return RequestHandle(std::move(st));
}

namespace {

std::vector<int> AllShards(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

}  // namespace

RequestHandle PsClient::Control(Op op, const std::vector<int>& shards, int64_t clock, uint64_t aux,
                                const std::string& message) {
  auto st = core_->NewRequest(op);
  Header base;
  base.op = op;
  base.clock = clock;
  base.aux = aux;
  base.message = message;
  for (int s : shards) {
    core_->SendPart(st, internal::RequestPart{s, 0, 0, nullptr, false}, base, {});
  }
  return RequestHandle(std::move(st));
}

RequestHandle PsClient::SendClock(int64_t clock) {
  return Control(Op::kClock, AllShards(num_shards()), clock, 0);
}
RequestHandle PsClient::Register() { return Control(Op::kRegister, AllShards(num_shards()), 0, 0); }
RequestHandle PsClient::Heartbeat() {
  return Control(Op::kHeartbeat, AllShards(num_shards()), 0, 0);
}
RequestHandle PsClient::Barrier(int64_t id, uint32_t participants) {
  return Control(Op::kBarrier, {0}, id, participants);
}
RequestHandle PsClient::StopServers(const std::string& token) {
  return Control(Op::kStop, AllShards(num_shards()), 0, 0, token);
}

Status PsClient::PushAndWait(std::span<const float> values, const PushOptions& options) {
  return Push(values, options).Wait();
}
Status PsClient::PullAndWait(std::span<float> out) { return Pull(out).Wait(); }
Status PsClient::PushPullAndWait(std::span<const float> values, std::span<float> out,
                                 const PushOptions& options) {
  return PushPull(values, out, options).Wait();
}

Status PsClient::WaitForServers(Duration timeout) {
  RequestHandle h = Register();
  Status st = h.Wait(timeout);
  if (!st.ok()) return st;
  for (const ShardResult& r : h.results()) {
    const auto expected = static_cast<uint64_t>(placement().shard_size(r.shard));
    if (r.aux != expected) {
      return Status(StatusCode::kBadReply,
                    ::asgd::internal::StrCat("shard ", r.shard, " (", endpoint(r.shard), ") holds ",
                                             r.aux, " elements, the placement says ", expected,
                                             ": the servers were started with "
                                             "another model or placement"));
    }
  }
  return Status::Ok();
}

}  // namespace asgd::transport
