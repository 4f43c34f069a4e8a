// ClusterSpec: who is where (docs/architecture.md#roles-and-processes), in the two forms users
// bring.
//
//   config [cluster]   ps = host:port,host:port        (strings handed over by the CLI)
//                      worker = host:port,...
//                      coordinator = host:port         (optional)
//                      evaluator = host:port           (optional)
//   TF_CONFIG          {"cluster": {"chief": ["h:p"], "ps": [...], "worker": [...],
//                                   "evaluator": ["h:p"]},
//                       "task": {"type": "worker", "index": 1}}
//
// An entry is HOST:PORT (tcp) or a full address: tcp://HOST:PORT, ipc://PATH,
// inproc://NAME, so the same spec can place processes on one machine over ipc. The CLI
// reads the TF_CONFIG environment variable and passes its text; nothing here reads the
// environment or files. TensorFlow's "chief" (or "master") is the coordinator.
//
// Bad specs throw ConfigError naming the key (e.g. "cluster.ps" or
// "TF_CONFIG.cluster.worker[2]"), the value and what was expected.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace asgd::transport {

struct ClusterSpec {
  std::vector<std::string> ps;      // one entry per shard, in shard order
  std::vector<std::string> worker;  // one entry per worker, in worker order
  std::string coordinator;          // empty: none
  std::string evaluator;            // empty: none
  // This process's task, when known: "ps", "worker", "coordinator", "evaluator" or ""
  // (not given); task_index is its index within that list.
  std::string task_type;
  int task_index = 0;

  // From the config's [cluster] strings (comma-separated lists; blanks around entries
  // are ignored). ps must name at least one shard.
  static ClusterSpec FromStrings(std::string_view ps, std::string_view worker,
                                 std::string_view coordinator = {},
                                 std::string_view evaluator = {});
  // From the text of a TF_CONFIG variable.
  static ClusterSpec FromTfConfig(std::string_view json);

  int num_ps() const { return static_cast<int>(ps.size()); }
  int num_workers() const { return static_cast<int>(worker.size()); }

  // The address to connect to ps shard i: "tcp://HOST:PORT" for a HOST:PORT entry,
  // other entries as written. Throws InvariantError for i out of range.
  std::string PsAddress(int i) const;
  std::string WorkerAddress(int i) const;
  // The address ps shard i binds: for tcp, the entry's port on bind_host (servers bind
  // to loopback unless configured otherwise; "*" binds every interface); other schemes
  // as written.
  std::string PsBindAddress(int i, std::string_view bind_host = "127.0.0.1") const;
  // The coordinator's address, and the address it binds (as PsBindAddress). REQUIRES: a
  // coordinator (InvariantError otherwise).
  std::string CoordinatorAddress() const;
  std::string CoordinatorBindAddress(std::string_view bind_host = "127.0.0.1") const;

  // Checks entries, duplicates and the task. FromStrings/FromTfConfig call it; call it
  // again after editing fields by hand. Throws ConfigError.
  void Validate() const;

  bool operator==(const ClusterSpec&) const = default;
};

}  // namespace asgd::transport
