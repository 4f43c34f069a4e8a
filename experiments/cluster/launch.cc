#include "experiments/cluster/launch.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <set>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "algorithms/strategy.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "core/strings.h"
#include "experiments/cluster/cluster_env.h"
#include "experiments/cluster/cluster_run.h"
#include "experiments/cluster/keys.h"
#include "experiments/config/command_line.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/exit_status.h"
#include "experiments/config/setup.h"
#include "experiments/config/signals.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/collective_runner.h"

namespace asgd::experiments {
namespace {

namespace po = boost::program_options;
using ::asgd::internal::StrCat;
using Steady = std::chrono::steady_clock;

struct Parsed {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string resume_dir;  // launch --resume
  bool help = false;
};

Parsed ParseConfigArgs(const std::vector<std::string>& args, const std::string& command,
                       const std::string& usage, std::ostream& out) {
  po::options_description desc("Options");
  desc.add_options()("help,h", "describe this command")(
      "config", po::value<std::string>(), "the experiment config (INI); also positional")(
      "set", po::value<std::vector<std::string>>()->composing(),
      "override one key: --set section.key=value (repeatable)");
  if (command == "launch") {
    desc.add_options()("resume", po::value<std::string>(),
                       "continue the run in this folder from its newest valid checkpoint "
                       "(after the coordinator, or everything, was killed)");
  }
  po::positional_options_description pos;
  pos.add("config", 1);
  auto vm = ParseCommandLine(args, desc, pos, command);
  Parsed p;
  if (vm.count("help")) {
    out << CommandHelp(usage, desc);
    p.help = true;
    return p;
  }
  if (!vm.count("config")) {
    throw InputError("asgd " + command + ": missing CONFIG (see `asgd " + command + " --help`)");
  }
  p.config_path = vm["config"].as<std::string>();
  if (vm.count("set")) p.overrides = vm["set"].as<std::vector<std::string>>();
  if (vm.count("resume")) p.resume_dir = vm["resume"].as<std::string>();
  return p;
}

// A free tcp port on 127.0.0.1, as the kernel picks one for a bind to port 0. Another
// program could take it before the role binds it; the role's bind then retries for
// cluster.timeout_s and fails naming the address.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int e = errno;
    ::close(fd);
    throw IoError(std::string("cannot find a free port on 127.0.0.1: ") + std::strerror(e));
  }
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

struct Child {
  std::string name;  // "coordinator", "ps 0", ...
  std::string role;  // "coordinator", "ps", "evaluator", "worker"
  std::unique_ptr<ChildProcess> process;
  std::optional<int> status;
  bool reported = false;  // its failed exit was announced
};

// Prints a child's finished lines with its prefix.
void Drain(Child& c, std::ostream& out) {
  c.process->ReadLines(
      [&](std::string_view line) { out << "[" << c.name << "] " << line << "\n"; });
  out.flush();
}

// What `asgd launch` starts: a strategy on a collective runs the coordinator and the
// workers only (the workers are the ranks; the cluster's one ps address is generated but
// unused), one on the parameter server the shards and the evaluator too.
struct LaunchShape {
  bool collective = false;
  int workers = 0;
  int shards = 0;
  ClusterPlan cluster;  // the config's [cluster] keys
};

// The refusals, before any process starts (ConfigError: one line and exit 2).
LaunchShape CheckLaunchable(const Config& config) {
  const std::string name = config.String("algorithm.name");
  const algorithms::Strategy& strategy = algorithms::FindStrategy(name);
  LaunchShape shape;
  shape.cluster = ClusterPlan::FromConfig(config);
  shape.collective = strategy.family == algorithms::Family::kGroup;
  if (shape.collective) {
    RefuseCollectiveRole(config, "worker");
    // The worker rule's options (dpsgd's workers and topology, local_sgd's window).
    (void)strategy.worker_rule(BuildStrategyOptions(config, 0));
  }
  if (strategy.family == algorithms::Family::kSequential || strategy.shared_memory) {
    throw ConfigError("algorithm.name", name,
                      "a strategy over the parameter server for `asgd launch` (sgd and hogwild "
                      "run in one process with `asgd run`)");
  }
  shape.workers = static_cast<int>(config.Int("algorithm.workers"));
  shape.shards = shape.collective ? 1 : shape.cluster.shards;
  // Missing or malformed CURVE key files.
  (void)CurveFromPlan(shape.cluster, /*serves=*/true);
  return shape;
}

// The cluster the roles are told: the config's [cluster] addresses, or addresses generated
// on this machine and handed to every role as --set values.
struct LaunchCluster {
  std::vector<std::string> sets;  // cluster.ps=..., ...; empty: the config's own
  std::string ipc_dir;            // made for ipc:// addresses; removed when the run ends
  bool evaluator = true;          // whether an evaluator role is started
};

// Addresses for the generated cluster's roles: a fresh ipc folder (its path in *ipc_dir),
// or distinct free tcp ports on 127.0.0.1, one for each of `roles`.
std::function<std::string(const std::string& role)> RoleAddresses(const ClusterPlan& plan,
                                                                  int roles, std::string* ipc_dir) {
  if (plan.launch_transport == "ipc") {
    char dir[] = "/tmp/asgd-launch-XXXXXX";
    if (::mkdtemp(dir) == nullptr) throw IoError(std::string("mkdtemp: ") + std::strerror(errno));
    *ipc_dir = dir;
    return [folder = *ipc_dir](const std::string& role) { return "ipc://" + folder + "/" + role; };
  }
  auto ports = std::make_shared<std::vector<int>>(DistinctFreePorts(roles));
  return [ports](const std::string&) {
    const int port = ports->back();
    ports->pop_back();
    return StrCat("127.0.0.1:", port);
  };
}

// The cluster of the run: checks the config's, or generates one (applied to config, which
// validates it) and prints how to start a role again by hand (a lost worker rejoins so).
LaunchCluster PlanCluster(Config& config, const LaunchShape& shape, std::ostream& out) {
  LaunchCluster cluster;
  if (!shape.cluster.ps.empty()) {
    if (shape.cluster.coordinator.empty()) {
      throw ConfigError(ClusterPlan::kCoordinatorKey, "",
                        "the coordinator's address when [cluster] ps names the shards");
    }
    cluster.evaluator = !shape.cluster.evaluator.empty();
    return cluster;
  }
  // Distinct addresses for the shards, the workers, the coordinator and the evaluator.
  const auto address =
      RoleAddresses(shape.cluster, shape.shards + shape.workers + 2, &cluster.ipc_dir);
  std::string ps, worker;
  for (int i = 0; i < shape.shards; ++i) {
    if (i > 0) ps += ',';
    ps += address(StrCat("ps", i));
  }
  for (int i = 0; i < shape.workers; ++i) {
    if (i > 0) worker += ',';
    worker += address(StrCat("worker", i));
  }
  const std::string coordinator = address("coordinator");
  cluster.sets = ClusterPlan::AddressAssignments(ps, worker, coordinator, address("evaluator"));
  for (const std::string& s : cluster.sets) config.ApplyOverride(s);  // validates them
  std::string sets;
  for (const std::string& s : cluster.sets) sets += " --set " + s;
  out << "[launch] cluster:" << sets << std::endl;
  return cluster;
}

// Starts the roles as children of this process, the coordinator first (children[0]). The
// run token is handed to every role in its environment: never on a command line (other
// users can read those) and never printed.
std::vector<Child> StartRoles(const Parsed& p, const LaunchShape& shape,
                              const LaunchCluster& cluster, std::ostream& out) {
  const std::string self = SelfExecutable();
  std::string token = RunTokenFromEnvironment();
  if (token.empty()) token = NewRunToken();
  std::vector<Child> children;
  auto start = [&](const std::string& child_name, const std::string& role, int task) {
    ChildOptions o;
    o.argv = {self, role, "--config", p.config_path};
    if (task >= 0) {
      o.argv.push_back("--task");
      o.argv.push_back(std::to_string(task));
    }
    for (const std::string& s : p.overrides) o.argv.insert(o.argv.end(), {"--set", s});
    for (const std::string& s : cluster.sets) o.argv.insert(o.argv.end(), {"--set", s});
    o.argv.insert(o.argv.end(), {"--set", "experiment.progress=off"});
    if (role == "coordinator" && !p.resume_dir.empty()) {
      o.argv.insert(o.argv.end(), {"--resume", p.resume_dir});
    }
    o.unset_env = {"TF_CONFIG"};  // the cluster is the one above
    o.env = {StrCat(kRunTokenVariable, "=", token)};
    children.push_back(Child{child_name, role, ChildProcess::Start(o), std::nullopt});
    out << "[launch] " << child_name << ": pid " << children.back().process->pid() << std::endl;
  };
  start("coordinator", "coordinator", -1);
  if (!shape.collective) {
    for (int i = 0; i < shape.shards; ++i) start(StrCat("ps ", i), "ps", i);
    if (cluster.evaluator) start("evaluator", "evaluator", -1);
  }
  for (int i = 0; i < shape.workers; ++i) start(StrCat("worker ", i), "worker", i);
  return children;
}

// Which lost roles the run survives (the coordinator decides what follows), and how long
// roles may outlive the coordinator.
struct LossPolicy {
  bool collective = false;
  bool worker_loss_tolerated = false;
  bool ps_loss_tolerated = false;
  std::chrono::milliseconds grace{0};
};

LossPolicy LossPolicyOf(const Config& config, const LaunchShape& shape) {
  const ClusterPlan& plan = shape.cluster;
  LossPolicy policy;
  policy.collective = shape.collective;
  // On a collective every rank fails when one dies; the coordinator names the lost one.
  policy.worker_loss_tolerated = shape.collective || !plan.fail_on_worker_loss;
  // With checkpoints, a lost shard is restored when restarted: the coordinator decides.
  policy.ps_loss_tolerated = config.Int("experiment.checkpoint_every_steps") > 0 ||
                             config.Double("experiment.checkpoint_every_s") > 0;
  policy.grace = std::chrono::milliseconds(static_cast<int64_t>(plan.timeout_s * 1000.0));
  return policy;
}

// A role that failed while the coordinator still runs: the run stops now rather than wait
// for the coordinator to notice its silence -- unless the policy tolerates its loss (a
// worker with cluster.on_worker_loss = continue, a shard with checkpoints), which the
// coordinator then decides on once it has been silent for heartbeat_timeout_s. Returns
// whether the run was told to stop.
bool StopOnFailedRole(std::vector<Child>& children, const LossPolicy& policy, std::ostream& out) {
  Child& coordinator = children[0];
  for (std::size_t i = 1; i < children.size() && !coordinator.status; ++i) {
    Child& c = children[i];
    if (!c.status || *c.status == 0 || c.reported) continue;
    c.reported = true;
    if ((c.role == "worker" && policy.worker_loss_tolerated) ||
        (c.role == "ps" && policy.ps_loss_tolerated)) {
      out << "[launch] " << c.name << " exited with status " << *c.status
          << "; the coordinator decides what follows ("
          << (policy.collective ? "a collective cannot lose a member"
                                : StrCat(ClusterPlan::kOnWorkerLossKey, "; checkpoints"))
          << ")" << std::endl;
      continue;
    }
    out << "[launch] " << c.name << " exited with status " << *c.status << "; stopping the run"
        << std::endl;
    coordinator.process->Signal(SIGTERM);
    return true;
  }
  return false;
}

// Ends the roles still running `grace` after the coordinator ended.
void TerminateLeftovers(std::vector<Child>& children, std::chrono::milliseconds grace,
                        std::ostream& out) {
  for (Child& c : children) {
    if (c.status) continue;
    out << "[launch] " << c.name << " still running " << grace.count() / 1000
        << " s after the coordinator ended; terminating it" << std::endl;
    c.status = c.process->Terminate(std::chrono::milliseconds(2000));
    Drain(c, out);
  }
}

// Streams the children's output until they have all exited (or the coordinator ended
// more than the grace period ago): a stop signal is passed to the coordinator, a failed
// role stops the run as the policy says. Returns the exit status: the signal's (128 +
// signal), kExitBadInput for a failed role, else the coordinator's; -1 if none.
int Supervise(std::vector<Child>& children, BlockedStopSignals& signals, const LossPolicy& policy,
              std::ostream& out) {
  int result = -1;           // the exit status, once decided
  bool stopping = false;     // the coordinator was told to stop the run
  Steady::time_point ended;  // when the coordinator exited
  for (;;) {
    std::vector<pollfd> fds;
    for (const Child& c : children) {
      if (c.process->output_fd() >= 0) fds.push_back({c.process->output_fd(), POLLIN, 0});
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 100);
    for (Child& c : children) Drain(c, out);
    if (const int sig = signals.Wait(std::chrono::milliseconds(0))) {
      out << "[launch] " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ": stopping the run"
          << std::endl;
      result = 128 + sig;
      if (!children[0].status) children[0].process->Signal(SIGTERM);
      stopping = true;
    }
    bool all_done = true;
    for (Child& c : children) {
      if (!c.status) c.status = c.process->Poll();
      if (!c.status) all_done = false;
    }
    const Child& coordinator = children[0];
    if (coordinator.status && ended == Steady::time_point()) {
      ended = Steady::now();
      if (result < 0) result = *coordinator.status;
    }
    if (!stopping && StopOnFailedRole(children, policy, out)) {
      stopping = true;
      result = kExitBadInput;
    }
    if (all_done) return result;
    if (ended != Steady::time_point() && Steady::now() - ended > policy.grace) {
      TerminateLeftovers(children, policy.grace, out);
      return result;
    }
  }
}

}  // namespace

std::string RunTokenFromEnvironment() {
  const char* v = std::getenv(kRunTokenVariable);
  return v != nullptr ? std::string(v) : std::string();
}

std::string NewRunToken() {
  std::random_device device;  // the kernel's entropy on Linux
  std::string token;
  constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 4; ++i) {
    const uint32_t r = device();
    for (int b = 0; b < 8; ++b) token += kHex[(r >> (4 * b)) & 0xf];
  }
  return token;
}

int LaunchCommand(const std::vector<std::string>& args, std::ostream& out) {
  const std::string usage =
      "usage: asgd launch CONFIG [--set section.key=value ...] [--resume RUN_DIR]\n\n"
      "Runs CONFIG as processes on this machine: a coordinator, cluster.shards shard\n"
      "servers, algorithm.workers workers and an evaluator, over tcp on 127.0.0.1 or ipc\n"
      "(cluster.launch_transport), streaming their output with a role prefix. One run\n"
      "folder, as `asgd run` writes. allreduce_sgd, local_sgd and dpsgd start the\n"
      "coordinator and the workers only (the ranks of a gloo group; a lost one fails\n"
      "the run). Ctrl-C stops the run and every process. A lost\n"
      "worker is left to the coordinator (cluster.on_worker_loss), and with checkpoints\n"
      "on a lost shard too: restart it with the `[launch] cluster:` line's --set values.";
  const Parsed p = ParseConfigArgs(args, "launch", usage, out);
  if (p.help) return kExitOk;
  Config config = Config::FromFile(p.config_path, p.overrides, ExperimentSchema());
  const LaunchShape shape = CheckLaunchable(config);
  const LaunchCluster cluster = PlanCluster(config, shape, out);

  BlockedStopSignals signals;  // before any child: SIGINT stops the run, not just launch
  std::vector<Child> children = StartRoles(p, shape, cluster, out);
  const int result = Supervise(children, signals, LossPolicyOf(config, shape), out);
  for (Child& c : children) Drain(c, out);
  if (!cluster.ipc_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(cluster.ipc_dir, ec);
  }
  return result < 0 ? kExitFailure : result;
}

int TaskCommand(const std::vector<std::string>& args, std::ostream& out) {
  const std::string usage =
      "usage: asgd task --config CONFIG [--set section.key=value ...]\n\n"
      "One rank of a run started by srun (SLURM) or mpirun (Open MPI): rank 0 is the\n"
      "coordinator, the next cluster.shards ranks the shards (none for allreduce_sgd,\n"
      "local_sgd and dpsgd), the rest the workers, each\n"
      "on cluster.base_port + rank of its host (the scheduler's node list; under Open\n"
      "MPI on several hosts, cluster.hosts).";
  const Parsed p = ParseConfigArgs(args, "task", usage, out);
  if (p.help) return kExitOk;
  Config config = Config::FromFile(p.config_path, p.overrides, ExperimentSchema());
  const auto info = RankFromEnvironment(ProcessEnvironment());
  if (!info) {
    throw InputError(
        "asgd task: neither SLURM_PROCID nor OMPI_COMM_WORLD_RANK is set; run it "
        "under srun or mpirun (or use `asgd launch` on one machine)");
  }
  const ClusterPlan plan = ClusterPlan::FromConfig(config);
  std::vector<std::string> hosts = info->hosts;
  if (!plan.hosts.empty()) {
    hosts.clear();
    for (const std::string& h : Split(plan.hosts, ',')) hosts.push_back(std::string(Trim(h)));
  }
  if (static_cast<int>(hosts.size()) != info->size) {
    throw ConfigError(ClusterPlan::kHostsKey, plan.hosts,
                      StrCat("the host of each of the ", info->size, " ranks (", info->manager,
                             " does not say where they run)"));
  }
  // A strategy on a collective has no shards: rank 0 is the coordinator, the rest workers.
  const std::string name = config.String("algorithm.name");
  const bool collective = algorithms::FindStrategy(name).family == algorithms::Family::kGroup;
  const transport::ClusterSpec spec =
      ClusterForRanks(hosts, info->rank, collective ? 0 : plan.shards, plan.base_port);
  ClusterPlan::SetAddresses(config, Join(spec.ps, ","), Join(spec.worker, ","), spec.coordinator,
                            "");
  config.Set("algorithm.workers", std::to_string(spec.num_workers()));
  config.Set("experiment.progress", "off");
  LogLevel level = LogLevel::kInfo;
  ParseLogLevel(config.String("experiment.log_level"), &level);
  SetLogLevel(level);
  RoleRequest request;
  request.task = spec.task_index;
  request.data_dirs = DataSearchDirs(config.String("data.dir"));
  request.name = config.String("experiment.name").empty() ? ConfigStem(p.config_path)
                                                          : config.String("experiment.name");
  request.command_line = {"asgd", "task"};
  request.command_line.insert(request.command_line.end(), args.begin(), args.end());
  out << "task: " << info->manager << " rank " << info->rank << " of " << info->size << " is "
      << spec.task_type << " " << spec.task_index << std::endl;
  if (spec.task_type == "coordinator") return RunCoordinatorRole(config, request, out);
  if (spec.task_type == "ps") return RunTrainingPsRole(config, request, out);
  return RunTrainingWorkerRole(config, request, out);
}

std::vector<int> DistinctFreePorts(int n) {
  std::set<int> seen;
  std::vector<int> ports;
  for (int attempt = 0; static_cast<int>(ports.size()) < n; ++attempt) {
    if (attempt >= 100 + 10 * n) {
      throw IoError(StrCat("cannot find ", n, " distinct free ports on 127.0.0.1"));
    }
    const int port = FreePort();
    if (seen.insert(port).second) ports.push_back(port);
  }
  return ports;
}

}  // namespace asgd::experiments
