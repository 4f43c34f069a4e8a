#include "experiments/roles.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ostream>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/loader.h"
#include "experiments/cluster_run.h"
#include "experiments/keys.h"
#include "experiments/setup.h"
#include "experiments/signals.h"
#include "models/factory.h"
#include "transport/context.h"
#include "transport/placement.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

namespace asgd::experiments {
namespace {

using ::asgd::internal::StrCat;
namespace tp = ::asgd::transport;

// The layout every process of the run derives from [model] and [data].
ParamLayout LayoutFor(const Config& config, const std::vector<std::string>& data_dirs) {
  datasets::TrainTest data = datasets::LoadDataset(BuildDataOptions(config, data_dirs));
  return models::NewModel(BuildModelOptions(config), InputSpecFor(data.train))->layout();
}

tp::Placement PlacementFor(const Config& config, const ParamLayout& layout, int shards) {
  tp::PlacementOptions options;
  options.policy = tp::ParsePlacementPolicy(config.String("cluster.placement"));
  return tp::Placement::Build(layout, shards, options);
}

std::chrono::milliseconds TimeoutOf(const Config& config) {
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil(config.Double("cluster.timeout_s") * 1000.0)));
}

// Small integers in [-2, 2] (deltas) or [0, 16] (initial values), from a hash of the
// seed, the worker, the step and the element: sums of them are exact in float32.
float CheckValue(uint64_t seed, uint64_t stream, int64_t i, int range, int low) {
  const uint64_t h = SplitMix64(seed ^ SplitMix64(stream ^ SplitMix64(static_cast<uint64_t>(i))));
  return static_cast<float>(static_cast<int>(h % static_cast<uint64_t>(range)) + low);
}

}  // namespace

std::vector<float> PsCheckInitial(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  const uint64_t s = DeriveSeed(seed, "ps_check_initial");
  for (int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = CheckValue(s, 0, i, 17, 0);
  return v;
}

std::vector<float> PsCheckDelta(int64_t n, uint64_t seed, int worker, int64_t step) {
  std::vector<float> v(static_cast<std::size_t>(n));
  const uint64_t s = DeriveSeed(seed, "ps_check_delta", static_cast<uint64_t>(worker));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = CheckValue(s, static_cast<uint64_t>(step), i, 5, -2);
  }
  return v;
}

tp::ClusterSpec ResolveCluster(const Config& config, const RoleRequest& request,
                               const std::string& role) {
  tp::ClusterSpec spec;
  if (!config.String("cluster.ps").empty()) {
    spec = tp::ClusterSpec::FromStrings(config.String("cluster.ps"), config.String("cluster.worker"),
                                        config.String("cluster.coordinator"),
                                        config.String("cluster.evaluator"));
  } else if (!request.tf_config.empty()) {
    spec = tp::ClusterSpec::FromTfConfig(request.tf_config);
    if (!spec.task_type.empty() && spec.task_type != role && !request.task.has_value()) {
      throw ConfigError("TF_CONFIG.task.type", spec.task_type,
                        "\"" + role + "\" for `asgd " + role + "` (or pass --task)");
    }
  } else {
    throw ConfigError("cluster.ps", "",
                      "the shard servers (host:port,...), or a TF_CONFIG environment variable");
  }
  if (request.task.has_value()) {
    spec.task_type = role;
    spec.task_index = *request.task;
  } else if (role == "coordinator" || role == "evaluator") {
    spec.task_type = role;  // one of each: the index is 0
    spec.task_index = 0;
  } else if (spec.task_type.empty()) {
    throw ConfigError("--task", "", "this process's index among the " + role +
                                        " tasks (or a TF_CONFIG with a task)");
  }
  spec.Validate();
  if (role == "worker" && spec.num_workers() == 0) {
    throw ConfigError("cluster.worker", "", "at least one worker address");
  }
  return spec;
}

int RunPsRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  if (config.String("algorithm.name") != "ps_check") {
    return RunTrainingPsRole(config, request, out);
  }
  const tp::ClusterSpec spec = ResolveCluster(config, request, "ps");
  const int shard = spec.task_index;
  const ParamLayout layout = LayoutFor(config, request.data_dirs);
  const tp::Placement placement = PlacementFor(config, layout, spec.num_ps());
  const auto seed = static_cast<uint64_t>(config.Int("experiment.seed"));
  const std::vector<float> initial = PsCheckInitial(layout.size(), seed);

  BlockedStopSignals signals;  // before any thread starts, so all inherit the mask
  auto context = tp::NewContext();
  tp::ServerOptions options;
  options.shard = static_cast<uint32_t>(shard);
  options.endpoint = spec.PsBindAddress(shard, config.String("cluster.bind_host"));
  options.curve = CurveFromConfig(config, /*serves=*/true);
  tp::ShardServer server(context, options, placement.Gather(shard, initial), tp::NewAddRule());
  out << "ps " << shard << ": serving " << placement.shard_size(shard) << " of "
      << layout.size() << " parameters at " << server.endpoint() << std::endl;
  server.Start();
  int signal = 0;
  while (server.serving()) {
    signal = signals.Wait(std::chrono::milliseconds(100));
    if (signal != 0) {
      ASGD_LOG(kInfo, "ps ", shard, ": ", signal == SIGINT ? "SIGINT" : "SIGTERM",
               ", stopping");
      server.Stop();
      break;
    }
  }
  server.Join();
  const tp::ShardStats s = server.stats();
  out << "ps " << shard << ": stopped at version " << s.version << " after " << s.requests
      << " requests (" << s.pushes_applied << " pushes applied, " << s.pulls << " pulls, "
      << s.errors << " error replies)" << std::endl;
  return 0;
}

int RunWorkerRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  if (config.String("algorithm.name") != "ps_check") {
    return RunTrainingWorkerRole(config, request, out);
  }
  const tp::ClusterSpec spec = ResolveCluster(config, request, "worker");
  const int worker = spec.task_index;
  const ParamLayout layout = LayoutFor(config, request.data_dirs);
  const int64_t n = layout.size();
  const tp::Placement placement = PlacementFor(config, layout, spec.num_ps());
  const auto seed = static_cast<uint64_t>(config.Int("experiment.seed"));
  const int64_t pushes = config.Int("algorithm.check_pushes");
  const int workers = spec.num_workers();
  const auto timeout = TimeoutOf(config);

  auto context = tp::NewContext();
  tp::ClientOptions options;
  options.id = static_cast<uint32_t>(worker);
  options.timeout = timeout;
  options.curve = CurveFromConfig(config, /*serves=*/false);
  auto client = tp::PsClient::FromCluster(context, spec, placement, options);
  auto check = [&](const tp::Status& st, const std::string& what) {
    if (!st.ok()) {
      throw InputError(StrCat("worker ", worker, ": ", what, ": ", st.ToString()));
    }
  };
  check(client->WaitForServers(timeout), "waiting for the shard servers");

  // Pushes with up to kInFlight requests outstanding; each buffer stays untouched until
  // its request is done (the client sends it without copying).
  constexpr int kInFlight = 4;
  std::vector<std::vector<float>> buffers(kInFlight);
  std::vector<tp::RequestHandle> handles(kInFlight);
  for (int64_t step = 0; step < pushes; ++step) {
    const auto slot = static_cast<std::size_t>(step % kInFlight);
    if (handles[slot].valid()) check(handles[slot].Wait(), "push");
    buffers[slot] = PsCheckDelta(n, seed, worker, step);
    tp::PushOptions po;
    po.clock = step;
    handles[slot] = client->Push(buffers[slot], po);
  }
  for (auto& h : handles) {
    if (h.valid()) check(h.Wait(), "push");
  }
  check(client->Barrier(1, static_cast<uint32_t>(workers)).Wait(), "barrier after the pushes");

  std::vector<float> got(static_cast<std::size_t>(n));
  check(client->PullAndWait(got), "pull");
  std::vector<float> expected = PsCheckInitial(n, seed);
  for (int w = 0; w < workers; ++w) {
    for (int64_t step = 0; step < pushes; ++step) {
      const std::vector<float> d = PsCheckDelta(n, seed, w, step);
      for (std::size_t i = 0; i < d.size(); ++i) expected[i] += d[i];
    }
  }
  int status = 0;
  const auto diff = std::mismatch(expected.begin(), expected.end(), got.begin());
  if (diff.first != expected.end()) {
    const auto i = diff.first - expected.begin();
    const auto wrong = std::count_if(
        expected.begin(), expected.end(),
        [&](const float& e) { return e != got[static_cast<std::size_t>(&e - expected.data())]; });
    out << "ps_check worker " << worker << ": MISMATCH at element " << i << ": expected "
        << *diff.first << ", got " << *diff.second << " (" << wrong << " of " << n
        << " elements differ)" << std::endl;
    status = 1;
  } else {
    out << "ps_check worker " << worker << ": all " << n << " parameters equal the initial "
        << "values plus " << workers << " x " << pushes << " pushes exactly" << std::endl;
  }
  // Nobody stops the servers while another worker is still pulling.
  check(client->Barrier(2, static_cast<uint32_t>(workers)).Wait(), "barrier before stopping");
  if (worker == 0 && config.Bool("cluster.stop_servers")) {
    check(client->StopServers().Wait(), "stopping the servers");
  }
  return status;
}

}  // namespace asgd::experiments
