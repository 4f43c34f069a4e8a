#include "experiments/cluster/ps_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <signal.h>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/loader.h"
#include "experiments/cluster/cluster_common.h"
#include "experiments/cluster/keys.h"
#include "experiments/cluster/launch.h"
#include "experiments/config/setup.h"
#include "experiments/config/signals.h"
#include "experiments/run/server_bounds.h"
#include "models/factory.h"
#include "ps/placement.h"
#include "transport/context.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

namespace asgd::experiments {
namespace {

using ::asgd::internal::StrCat;
namespace tp = ::asgd::transport;

// The layout every process of the run derives from [model] and [data].
ParamLayout LayoutFor(const Config& config, const std::vector<std::string>& data_dirs) {
  datasets::TrainTest data = datasets::LoadDataset(BuildDataOptions(config, data_dirs));
  return models::NewModelOn(BuildModelOptions(config), InputSpecFor(data.train), models::Device{})
      ->layout();
}

ps::Placement PlacementFor(const ClusterPlan& plan, const ParamLayout& layout, int shards) {
  ps::PlacementOptions options;
  options.policy = ps::ParsePlacementPolicy(plan.placement);
  return ps::Placement::Build(layout, shards, options);
}

// Small integers in [-2, 2] (deltas) or [0, 16] (initial values), from a hash of the
// seed, the worker, the step and the element: sums of them are exact in float32.
float CheckValue(uint64_t seed, uint64_t stream, int64_t i, int range, int low) {
  const uint64_t h = SplitMix64(seed ^ SplitMix64(stream ^ SplitMix64(static_cast<uint64_t>(i))));
  return static_cast<float>(static_cast<int>(h % static_cast<uint64_t>(range)) + low);
}

void CheckOk(const ps::Status& status, int worker, const std::string& what) {
  if (!status.ok()) {
    throw InputError(StrCat("worker ", worker, ": ", what, ": ", status.ToString()));
  }
}

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ps-check's progress lines with check.seconds > 0 are due at every multiple of
// `every_s` of the wall clock, not of each process's own start, so the lines of all
// processes of a run fall into the same intervals and can be summed per interval.
class ProgressTicker {
 public:
  explicit ProgressTicker(double every_s) : every_s_(every_s), next_(NextAfter(UnixSeconds())) {}
  // The wall time (Unix seconds) when a line is due, and then the next one is scheduled.
  std::optional<double> Due() {
    const double now = UnixSeconds();
    if (now < next_) return std::nullopt;
    next_ = NextAfter(now);
    return now;
  }
  std::chrono::milliseconds UntilNext() const {
    const double left_ms = std::ceil((next_ - UnixSeconds()) * 1000.0);
    return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(left_ms)));
  }

 private:
  double NextAfter(double t) const { return (std::floor(t / every_s_) + 1.0) * every_s_; }
  double every_s_;
  double next_;
};

// "ps_check worker 2: MISMATCH at element 17: expected 3, got 4 (1 of 1899 elements
// differ)", or nothing when got == expected. Returns whether they differ.
bool ReportMismatch(const std::vector<float>& expected, const std::vector<float>& got, int worker,
                    std::ostream& out) {
  const auto diff = std::mismatch(expected.begin(), expected.end(), got.begin());
  if (diff.first == expected.end()) return false;
  const auto i = diff.first - expected.begin();
  const auto wrong = std::count_if(expected.begin(), expected.end(), [&](const float& e) {
    return e != got[static_cast<std::size_t>(&e - expected.data())];
  });
  out << "ps_check worker " << worker << ": MISMATCH at element " << i << ": expected "
      << *diff.first << ", got " << *diff.second << " (" << wrong << " of " << expected.size()
      << " elements differ)" << std::endl;
  return true;
}

// Pushes with up to kInFlight requests outstanding; each buffer stays untouched until
// its request is done (the client sends it without copying).
constexpr int kInFlight = 4;

// ps_check with a number of pushes: every push is different, and the expected sum replays
// them all.
int CountedCheck(tp::PsClient& client, int worker, int workers, int64_t n, uint64_t seed,
                 int64_t pushes, std::ostream& out) {
  std::vector<std::vector<float>> buffers(kInFlight);
  std::vector<tp::RequestHandle> handles(kInFlight);
  for (int64_t step = 0; step < pushes; ++step) {
    const auto slot = static_cast<std::size_t>(step % kInFlight);
    if (handles[slot].valid()) CheckOk(handles[slot].Wait(), worker, "push");
    buffers[slot] = PsCheckDelta(n, seed, worker, step);
    tp::PushOptions po;
    po.clock = step;
    handles[slot] = client.Push(buffers[slot], po);
  }
  for (auto& h : handles) {
    if (h.valid()) CheckOk(h.Wait(), worker, "push");
  }
  CheckOk(client.Barrier(1, static_cast<uint32_t>(workers)).Wait(), worker,
          "barrier after the pushes");

  std::vector<float> got(static_cast<std::size_t>(n));
  CheckOk(client.PullAndWait(got), worker, "pull");
  std::vector<float> expected = PsCheckInitial(n, seed);
  for (int w = 0; w < workers; ++w) {
    for (int64_t step = 0; step < pushes; ++step) {
      const std::vector<float> d = PsCheckDelta(n, seed, w, step);
      for (std::size_t i = 0; i < d.size(); ++i) expected[i] += d[i];
    }
  }
  if (ReportMismatch(expected, got, worker, out)) return 1;
  out << "ps_check worker " << worker << ": all " << n << " parameters equal the initial "
      << "values plus " << workers << " x " << pushes << " pushes exactly" << std::endl;
  return 0;
}

// A timed run makes an unknown and possibly large number of pushes (millions in a soak),
// so it cannot replay them (pushes x parameters) nor let random deltas pile up: float32
// sums of integers are exact only below 2^24. Its pushes are therefore built so that every
// sum stays small except exact counters:
//   - Counter elements: the w-th element that shard s owns, counters[w][s], gets +1 from
//     each push of worker w and nothing from any other push. After the pushes it holds
//     its initial value (at most 16) plus the number of worker w's pushes that shard s
//     applied, exact up to 2^24 - 1; a worker stops at kMaxTimedPushes so it cannot
//     overflow. Every shard's count of every worker's pushes is thus read back exactly:
//     a lost or repeated push shows as a count one off, on the shard that lost it.
//   - Every other element gets +D_w from worker w's even-numbered pushes and -D_w from
//     its odd ones (D_w: the worker's small integers in [-2, 2], PsCheckDelta's step 0),
//     so it never leaves initial +- 2 per worker however long the run. A worker stops
//     after an odd number of pushes, so each worker's D_w is in the final values and a
//     misplaced or corrupted element still shows, as in the counted check.
constexpr int64_t kMaxTimedPushes = (int64_t{1} << 24) - 17;  // odd; 16 + this < 2^24

// counters[w][s]: the flat index of the w-th element shard s owns.
std::vector<std::vector<int64_t>> CheckCounters(const ps::Placement& placement, int workers,
                                                double seconds) {
  std::vector<std::vector<int64_t>> counters(static_cast<std::size_t>(workers));
  for (int s = 0; s < placement.num_shards(); ++s) {
    if (placement.shard_size(s) < workers) {
      throw ConfigError("check.seconds", StrCat(seconds),
                        StrCat("0, or shards of at least one parameter per worker (shard ", s,
                               " has ", placement.shard_size(s), " for ", workers,
                               " workers): a larger model, fewer shards or another placement"));
    }
    int w = 0;
    for (const Range& r : placement.ranges(s)) {
      for (int64_t i = r.begin; i < r.end() && w < workers; ++i, ++w) {
        counters[static_cast<std::size_t>(w)].push_back(i);
      }
    }
  }
  return counters;
}

// Worker w's D_w: small integers, 0 at every counter element.
std::vector<float> TimedDelta(int64_t n, uint64_t seed, int worker,
                              const std::vector<std::vector<int64_t>>& counters) {
  std::vector<float> d = PsCheckDelta(n, seed, worker, 0);
  for (const auto& of_worker : counters) {
    for (int64_t i : of_worker) d[static_cast<std::size_t>(i)] = 0.0f;
  }
  return d;
}

int TimedCheck(tp::PsClient& client, int worker, int workers, uint64_t seed, double seconds,
               double report_every_s, std::ostream& out) {
  const ps::Placement& placement = client.placement();
  const int64_t n = placement.total_elements();
  const auto counters = CheckCounters(placement, workers, seconds);
  const std::vector<float> d = TimedDelta(n, seed, worker, counters);
  // Two fixed buffers, only ever read: several pushes in flight may share one.
  std::vector<float> plus = d;
  std::vector<float> minus(d.size());
  std::transform(d.begin(), d.end(), minus.begin(), [](float x) { return -x; });
  for (int64_t i : counters[static_cast<std::size_t>(worker)]) {
    plus[static_cast<std::size_t>(i)] = 1.0f;
    minus[static_cast<std::size_t>(i)] = 1.0f;
  }

  // A common start, so that all workers push over the same interval.
  CheckOk(client.Barrier(0, static_cast<uint32_t>(workers)).Wait(), worker,
          "barrier before the pushes");
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(seconds));
  ProgressTicker ticker(report_every_s);
  auto progress = [&](double unix_s, int64_t pushes) {
    out << "ps_check worker " << worker << " progress: unix_s=" << std::fixed
        << std::setprecision(3) << unix_s << std::defaultfloat << " pushes=" << pushes << std::endl;
  };
  progress(UnixSeconds(), 0);
  std::vector<tp::RequestHandle> handles(kInFlight);
  int64_t sent = 0;
  int64_t acknowledged = 0;
  for (;; ++sent) {
    if (sent % 2 == 1 &&
        (sent == kMaxTimedPushes || std::chrono::steady_clock::now() >= deadline)) {
      break;
    }
    const auto slot = static_cast<std::size_t>(sent % kInFlight);
    if (handles[slot].valid()) {
      CheckOk(handles[slot].Wait(), worker, "push");
      ++acknowledged;
    }
    if (const auto now = ticker.Due()) progress(*now, acknowledged);
    tp::PushOptions po;
    po.clock = sent;
    handles[slot] = client.Push(sent % 2 == 0 ? plus : minus, po);
  }
  for (auto& h : handles) {
    if (h.valid()) {
      CheckOk(h.Wait(), worker, "push");
      ++acknowledged;
    }
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress(UnixSeconds(), acknowledged);
  out << "ps_check worker " << worker << " done: pushes=" << acknowledged
      << " seconds=" << std::fixed << std::setprecision(3) << elapsed << std::defaultfloat
      << (sent == kMaxTimedPushes ? " (stopped early: counters exact only below 2^24)" : "")
      << std::endl;
  CheckOk(client.Barrier(1, static_cast<uint32_t>(workers)).Wait(), worker,
          "barrier after the pushes");

  std::vector<float> got(static_cast<std::size_t>(n));
  CheckOk(client.PullAndWait(got), worker, "pull");
  const std::vector<float> initial = PsCheckInitial(n, seed);
  auto at = [](const std::vector<float>& v, int64_t i) { return v[static_cast<std::size_t>(i)]; };
  int status = 0;
  std::vector<float> expected = initial;
  int64_t total = 0;
  for (int v = 0; v < workers; ++v) {
    const auto& of_v = counters[static_cast<std::size_t>(v)];
    // Shard 0's count of worker v's pushes; the others must agree, and all must equal
    // this worker's own count for its pushes.
    const float c0 = at(got, of_v[0]) - at(initial, of_v[0]);
    const auto count0 = std::isfinite(c0) ? static_cast<int64_t>(c0) : int64_t{-1};
    for (std::size_t s = 0; s < of_v.size(); ++s) {
      const float c = at(got, of_v[s]) - at(initial, of_v[s]);
      const auto count = std::isfinite(c) ? static_cast<int64_t>(c) : int64_t{-1};
      const int64_t made = v == worker ? acknowledged : count0;
      if (count != made) {
        out << "ps_check worker " << worker << ": MISMATCH: shard " << s << " applied " << count
            << " pushes of worker " << v << ", "
            << (v == worker ? "which made " : "shard 0 applied ") << made << " ("
            << (count < made ? "lost " : "duplicated ")
            << (count < made ? made - count : count - made) << ")" << std::endl;
        status = 1;
      }
      expected[static_cast<std::size_t>(of_v[s])] =
          at(initial, of_v[s]) + static_cast<float>(count0);
    }
    total += count0;
    if (count0 % 2 != 0) {
      const std::vector<float> dv = TimedDelta(n, seed, v, counters);
      for (std::size_t i = 0; i < dv.size(); ++i) expected[i] += dv[i];
    }
  }
  if (ReportMismatch(expected, got, worker, out)) status = 1;
  if (status == 0) {
    out << "ps_check worker " << worker << ": all " << n << " parameters equal the initial "
        << "values plus the " << workers << " workers' " << total << " pushes exactly, and "
        << "every shard applied each of this worker's " << acknowledged << " pushes once"
        << std::endl;
  }
  return status;
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

int RunPsCheckServer(const Config& config, const RoleRequest& request, std::ostream& out) {
  const ClusterPlan plan = ClusterPlan::FromConfig(config);
  const tp::ClusterSpec spec = ResolveCluster(plan, request, "ps");
  const int shard = spec.task_index;
  const ParamLayout layout = LayoutFor(config, request.data_dirs);
  const ps::Placement placement = PlacementFor(plan, layout, spec.num_ps());
  const auto seed = static_cast<uint64_t>(config.Int("experiment.seed"));
  const std::vector<float> initial = PsCheckInitial(layout.size(), seed);

  BlockedStopSignals signals;  // before any thread starts, so all inherit the mask
  auto context = tp::NewContext();
  tp::ServerOptions options;
  options.shard = static_cast<uint32_t>(shard);
  options.endpoint = spec.PsBindAddress(shard, plan.bind_host);
  options.curve = CurveFromPlan(plan, /*serves=*/true);
  options.allow_plain_remote = plan.allow_plain_remote;
  ApplyServerBounds(ServerBounds::FromConfig(config), ChunkBytes(config), &options);
  options.stop_token = RunTokenFromEnvironment();  // worker 0's stop must carry it
  tp::ShardServer server(context, options, placement.Gather(shard, initial), ps::NewAddRule());
  if (options.stop_token.empty() && plan.stop_servers &&
      server.endpoint().rfind("inproc://", 0) != 0) {
    out << "ps " << shard << ": no " << kRunTokenVariable
        << " in the environment, so no stop request will be obeyed: end this process with "
           "SIGTERM"
        << std::endl;
  }
  out << "ps " << shard << ": serving " << placement.shard_size(shard) << " of " << layout.size()
      << " parameters at " << server.endpoint() << std::endl;
  // A timed check (a soak) also reports the pushes applied so far, on the workers'
  // schedule, so that both sides' counts can be compared interval by interval.
  std::optional<ProgressTicker> ticker;
  if (config.Double("check.seconds") > 0) {
    ticker.emplace(config.Double("check.report_every_s"));
  }
  auto progress = [&](double unix_s) {
    const tp::ShardStats s = server.stats();
    out << "ps " << shard << " progress: unix_s=" << std::fixed << std::setprecision(3) << unix_s
        << std::defaultfloat << " pushes_applied=" << s.pushes_applied << " requests=" << s.requests
        << " bytes_received=" << s.bytes_received << " errors=" << s.errors << std::endl;
  };
  server.Start();
  if (ticker) progress(UnixSeconds());
  int signal = 0;
  while (server.serving()) {
    auto wait = std::chrono::milliseconds(100);
    if (ticker) wait = std::min(wait, ticker->UntilNext());
    signal = signals.Wait(wait);
    if (signal != 0) {
      ASGD_LOG(kInfo, "ps ", shard, ": ", signal == SIGINT ? "SIGINT" : "SIGTERM", ", stopping");
      server.Stop();
      break;
    }
    if (ticker) {
      if (const auto now = ticker->Due()) progress(*now);
    }
  }
  server.Join();
  if (ticker) progress(UnixSeconds());
  const tp::ShardStats s = server.stats();
  out << "ps " << shard << ": stopped at version " << s.version << " after " << s.requests
      << " requests (" << s.pushes_applied << " pushes applied, " << s.pulls << " pulls, "
      << s.errors << " error replies)" << std::endl;
  out << cluster::PeerBoundsLine(shard, s) << std::endl;
  return 0;
}

int RunPsCheckWorker(const Config& config, const RoleRequest& request, std::ostream& out) {
  const ClusterPlan plan = ClusterPlan::FromConfig(config);
  const tp::ClusterSpec spec = ResolveCluster(plan, request, "worker");
  const int worker = spec.task_index;
  const ParamLayout layout = LayoutFor(config, request.data_dirs);
  const ps::Placement placement = PlacementFor(plan, layout, spec.num_ps());
  const auto seed = static_cast<uint64_t>(config.Int("experiment.seed"));
  const int workers = spec.num_workers();
  const auto timeout = cluster::Ms(plan.timeout_s);
  const double seconds = config.Double("check.seconds");

  auto context = tp::NewContext();
  tp::ClientOptions options;
  options.id = static_cast<uint32_t>(worker);
  options.timeout = timeout;
  options.curve = CurveFromPlan(plan, /*serves=*/false);
  options.chunk_bytes = ChunkBytes(config);
  auto client = tp::PsClient::FromCluster(context, spec, placement, options);
  CheckOk(client->WaitForServers(timeout), worker, "waiting for the shard servers");

  const int status = seconds > 0 ? TimedCheck(*client, worker, workers, seed, seconds,
                                              config.Double("check.report_every_s"), out)
                                 : CountedCheck(*client, worker, workers, layout.size(), seed,
                                                config.Int("check.pushes"), out);
  // Nobody stops the servers while another worker is still pulling.
  CheckOk(client->Barrier(2, static_cast<uint32_t>(workers)).Wait(), worker,
          "barrier before stopping");
  if (worker == 0 && plan.stop_servers) {
    CheckOk(client->StopServers(RunTokenFromEnvironment()).Wait(), worker,
            "stopping the servers (they obey only a stop with the same ASGD_RUN_TOKEN)");
  }
  return status;
}

}  // namespace asgd::experiments
