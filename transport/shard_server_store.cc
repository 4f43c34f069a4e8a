#include "transport/shard_server_store.h"

#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "transport/ps_param_client.h"

namespace asgd::transport {

using ps::Accumulate;
using ps::ParamClient;
using ps::Placement;
using ps::Role;
using ps::ServerRuleFactory;
using ps::ShardSnapshot;
using ps::Status;
using ps::StoreStats;

ShardServerStore::ShardServerStore(Placement placement, std::span<const float> initial,
                                   const ServerRuleFactory& rule_for,
                                   const std::string& endpoint_prefix, const ServerOptions& base,
                                   const ClientOptions& client)
    : context_(NewContext()), placement_(std::move(placement)), client_(client) {
  servers_ = StartShardServers(
      context_, placement_, initial, rule_for,
      [&](int s) { return endpoint_prefix + std::to_string(s); }, base);
}

ShardServerStore::~ShardServerStore() {
  reader_.reset();  // its sockets before the servers and the context
  servers_.clear();
}

std::string ShardServerStore::Describe() const {
  const std::size_t n = servers_.size();
  return ::asgd::internal::StrCat(n, " shard server", n > 1 ? "s" : "", " over inproc://");
}

std::unique_ptr<ParamClient> ShardServerStore::NewClient(uint32_t id, Role role) {
  ClientOptions co = client_;
  co.id = id;
  co.role = role;
  return std::make_unique<PsParamClient>(
      std::make_unique<PsClient>(context_, Endpoints(servers_), placement_, co));
}

Status ShardServerStore::Read(std::span<float> out) {
  if (!reader_) reader_ = NewClient(client_.id, Role::kEvaluator);
  return reader_->Pull(out);
}

std::vector<ShardSnapshot> ShardServerStore::Snapshot(const std::function<void()>& while_held) {
  return SnapshotTogether(
      servers_, while_held ? while_held : [] {});
}

void ShardServerStore::Restore(const std::vector<ShardSnapshot>& snapshots,
                               const std::string& source) {
  if (snapshots.size() != servers_.size()) {
    throw DataError(source, ::asgd::internal::StrCat("holds ", snapshots.size(),
                                                     " shards, the run has ", servers_.size()));
  }
  // Every shard checked before any is touched.
  for (std::size_t s = 0; s < servers_.size(); ++s) {
    const auto want = static_cast<std::size_t>(placement_.shard_size(static_cast<int>(s)));
    if (snapshots[s].values.size() != want) {
      throw DataError(source,
                      ::asgd::internal::StrCat("shard ", s, " holds ", snapshots[s].values.size(),
                                               " values, the placement gives it ", want));
    }
  }
  for (std::size_t s = 0; s < servers_.size(); ++s) servers_[s]->Restore(snapshots[s]);
}

void ShardServerStore::Close() {
  for (auto& server : servers_) server->Close();
}

StoreStats ShardServerStore::stats() const {
  StoreStats total;
  for (const auto& server : servers_) Accumulate(total, server->core_stats());
  return total;
}

}  // namespace asgd::transport
