// The ZeroMQ shard servers of one process as a ParamStore (ps/param_store.h): N
// ShardServers on their own threads, bound to inproc:// endpoints, and PsParamClients that
// reach them through a PsClient each. What `asgd run` uses with cluster.transport = inproc
// (the threads runner); processes run their shard servers as roles instead
// (experiments/cluster/ps_role.cc).
//
// Thread-safety: as ParamStore. The servers run until the store is destroyed.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ps/param_store.h"
#include "ps/placement.h"
#include "transport/context.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

namespace asgd::transport {

class ShardServerStore final : public ps::ParamStore {
 public:
  // Starts one server per shard of placement, shard s with rule_for(s) and
  // placement.Gather(s, initial), bound to endpoint_prefix + s (e.g.
  // "inproc://<run id>-ps-"); base supplies the other server options. Clients get
  // `client` with their id and role filled in; client.id is the id of Read's own client
  // (the evaluator's: the number of workers).
  ShardServerStore(ps::Placement placement, std::span<const float> initial,
                   const ps::ServerRuleFactory& rule_for, const std::string& endpoint_prefix,
                   const ServerOptions& base, const ClientOptions& client);
  ~ShardServerStore() override;

  std::string Describe() const override;
  std::string transport() const override { return "inproc"; }
  int ps_shards() const override { return static_cast<int>(servers_.size()); }
  int snapshot_count() const override { return static_cast<int>(servers_.size()); }
  int64_t size() const override { return placement_.total_elements(); }
  std::unique_ptr<ps::ParamClient> NewClient(uint32_t id, ps::Role role) override;
  // A pull through a client of its own, made on first use (role evaluator).
  ps::Status Read(std::span<float> out) override;
  std::vector<ps::ShardSnapshot> Snapshot(const std::function<void()>& while_held = {}) override;
  void Restore(const std::vector<ps::ShardSnapshot>& snapshots, const std::string& source) override;
  void Close() override;
  ps::StoreStats stats() const override;

  const std::vector<std::unique_ptr<ShardServer>>& servers() const { return servers_; }

 private:
  std::shared_ptr<Context> context_;
  ps::Placement placement_;
  ClientOptions client_;
  std::vector<std::unique_ptr<ShardServer>> servers_;
  std::unique_ptr<ps::ParamClient> reader_;  // Read's, made on first use
};

}  // namespace asgd::transport
