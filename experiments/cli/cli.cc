#include "experiments/cli/cli.h"

#include <cstdlib>
#include <iostream>

#include <boost/program_options.hpp>

#include "core/build_info.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "datasets/fetch.h"
#include "datasets/locate.h"
#include "experiments/analysis/compare.h"
#include "experiments/batch/batch.h"
#include "experiments/cluster/cluster_run.h"
#include "experiments/cluster/keys.h"
#include "experiments/cluster/launch.h"
#include "experiments/cluster/ps_check.h"
#include "experiments/cluster/roles.h"
#include "experiments/config/command_line.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/setup.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/runner.h"

namespace asgd::experiments {
namespace po = boost::program_options;
namespace {

constexpr const char* kUsage =
    "usage: asgd <command> [arguments]\n"
    "\n"
    "Commands:\n"
    "  run CONFIG [--set section.key=value ...] [--resume RUN_DIR]\n"
    "                     train as CONFIG says; writes a run folder with CSVs (or\n"
    "                     continues RUN_DIR from its newest checkpoint)\n"
    "  compare RUN_DIR... --out DIR [--label section.key]\n"
    "                     compare run (or sweep, suite) folders: CSV, markdown, plots\n"
    "  sweep CONFIG --grid section.key=v1,v2 [--seeds N] [--parallel P] [--out DIR]\n"
    "                     run CONFIG over a grid of values and seeds, then compare\n"
    "                     (--backend slurm: as a SLURM job array; then sweep collect DIR)\n"
    "  suite FILE [--parallel P] [--out DIR]\n"
    "                     run the [run LABEL] entries of a suite file, then compare\n"
    "                     (--backend slurm: as a SLURM job array; then suite collect DIR)\n"
    "  tune CONFIG --grid section.key=log:LO:HI:N --metric M [--seeds N] [--out DIR]\n"
    "                     tune one comparison point: every grid value, the edge rule,\n"
    "                     then N seeds at the best with a 95 % interval\n"
    "                     (--backend slurm: as a SLURM job array; then tune collect DIR)\n"
    "  data fetch NAME [--dir DIR] [--url BASE]\n"
    "                     download mnist | fashion-mnist | a9a and verify its SHA-256\n"
    "  data find NAME [--dir DIR]\n"
    "                     print the folder a dataset would be loaded from\n"
    "  launch CONFIG [--set ...] [--resume RUN_DIR]\n"
    "                     run CONFIG as processes on this machine (coordinator, shards,\n"
    "                     workers, evaluator) over tcp or ipc; one run folder\n"
    "  coordinator|ps|worker|evaluator --config C [--task I] [--set ...]\n"
    "                     one role of a run placed by hand ([cluster] or TF_CONFIG)\n"
    "  ps-check ps|worker --config C [--task I] [--set ...]\n"
    "                     check a deployed parameter server: workers push small\n"
    "                     integers and verify the shards' sum exactly ([check])\n"
    "  task --config C [--set ...]\n"
    "                     the role of this rank under SLURM (srun) or Open MPI (mpirun)\n"
    "  keys generate DIR [--clients N] [--force]\n"
    "                     CURVE keys for a run as processes (cluster.curve, keys_dir)\n"
    "  version            print the build description and the CPU it runs on\n"
    "  help               this text\n"
    "\n"
    "`asgd <command> --help` describes a command; `asgd run --help-config` lists every\n"
    "configuration key with its default. Exit status: 0 success, 2 bad input (one line on\n"
    "stderr says what and what was expected), 1 other failure.\n";

// Subcommand arguments: ParseCommandLine and CommandHelp (experiments/config/command_line.h).
po::variables_map Parse(const std::vector<std::string>& args, const po::options_description& desc,
                        const po::positional_options_description& pos, const std::string& command) {
  return ParseCommandLine(args, desc, pos, command);
}

std::string Help(const std::string& usage, const po::options_description& desc) {
  return CommandHelp(usage, desc);
}

int RunCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  po::options_description desc("Options");
  desc.add_options()("help,h", "describe this command")(
      "help-config", "list every configuration key with its default and meaning")(
      "set", po::value<std::vector<std::string>>()->composing(),
      "override one key: --set section.key=value (repeatable)")("config", po::value<std::string>(),
                                                                "the experiment config (INI)")(
      "resume", po::value<std::string>(),
      "continue the run in this folder from its newest valid checkpoint, appending to its "
      "CSVs (CONFIG must train the same data, model, algorithm and shards)")(
      "strict", "an [algorithm] key the strategy does not read is an error, not a warning");
  po::positional_options_description pos;
  pos.add("config", 1);
  auto vm = Parse(args, desc, pos, "run");
  const std::string usage =
      "usage: asgd run CONFIG [--set section.key=value ...] [--resume RUN_DIR] [--strict]\n\n"
      "Trains as CONFIG says and writes a run folder (config.ini, provenance.json,\n"
      "convergence.csv) under [experiment] out_dir; with --resume, continues RUN_DIR.";
  if (vm.count("help")) {
    out << Help(usage, desc);
    return kExitOk;
  }
  if (vm.count("help-config")) {
    out << ExperimentSchema().Help();
    return kExitOk;
  }
  if (!vm.count("config")) throw InputError("asgd run: missing CONFIG (see `asgd run --help`)");
  const std::string path = vm["config"].as<std::string>();
  std::vector<std::string> overrides;
  if (vm.count("set")) overrides = vm["set"].as<std::vector<std::string>>();
  Config config = Config::FromFile(path, overrides, ExperimentSchema());
  RefuseCurveInOneProcess(config);
  // Refusals before warnings: linear_scaling with an asynchronous strategy is an error
  // even where the strategy does not read it.
  (void)BuildScheduleOptions(config);
  // A sweep across strategies sets keys only some read: a warning, unless --strict.
  if (const std::vector<std::string> ignored = IgnoredAlgorithmKeys(config); !ignored.empty()) {
    const std::string what =
        config.String("algorithm.name") + " does not read " + Join(ignored, ", ");
    if (vm.count("strict")) {
      throw ConfigError(ignored.front(), config.Raw(ignored.front()),
                        "the key left out: " + what + " (asgd run --strict)");
    }
    err << "asgd: warning: " << what << " (ignored; listed in provenance.json)\n";
  }

  RunRequest request;
  request.name = config.String("experiment.name").empty() ? ConfigStem(path)
                                                          : config.String("experiment.name");
  request.command_line = {"asgd", "run"};
  request.command_line.insert(request.command_line.end(), args.begin(), args.end());
  request.data_dirs = DataSearchDirs(config.String("data.dir"));
  if (vm.count("resume")) request.resume_dir = vm["resume"].as<std::string>();
  RunResult result = RunExperiment(config, request, out);
  return result.exit_status;
}

// `asgd coordinator|ps|worker|evaluator`: one role of a multi-process run; with check,
// `asgd ps-check ps|worker`: one process of the check of a deployed parameter server.
int RoleCommand(const std::string& role, const std::vector<std::string>& args, std::ostream& out,
                bool check = false) {
  const std::string command = check ? "ps-check " + role : role;
  po::options_description desc("Options");
  const std::string task_doc =
      "this process's index among the " + role + " tasks (default: TF_CONFIG's task.index)";
  desc.add_options()("help,h", "describe this command")(
      "config", po::value<std::string>(), "the experiment config (INI); also positional")(
      "task", po::value<int>(), task_doc.c_str())(
      "set", po::value<std::vector<std::string>>()->composing(),
      "override one key: --set section.key=value (repeatable)");
  if (role == "coordinator") {
    desc.add_options()("resume", po::value<std::string>(),
                       "continue the run in this folder from its newest valid checkpoint");
  }
  po::positional_options_description pos;
  pos.add("config", 1);
  auto vm = Parse(args, desc, pos, command);
  std::string usage;
  if (check && role == "ps") {
    usage =
        "usage: asgd ps-check ps --config CONFIG --task I [--set section.key=value ...]\n\n"
        "Serves shard I of a check of the parameter server (an additive rule, no\n"
        "training, no coordinator) on the address [cluster] ps lists at position I (or\n"
        "TF_CONFIG's cluster.ps), until worker 0 of `asgd ps-check worker` stops it, or\n"
        "SIGINT/SIGTERM. With check.seconds > 0, prints the pushes applied so far every\n"
        "check.report_every_s.";
  } else if (check) {
    usage =
        "usage: asgd ps-check worker --config CONFIG --task I [--set section.key=value ...]\n\n"
        "Worker I of a check of the parameter server: pushes check.pushes vectors of\n"
        "small integers to the shards of [cluster] ps (or TF_CONFIG), meets the other\n"
        "workers at a barrier, pulls, and verifies the sum exactly (with check.seconds\n"
        "> 0: pushes for that long, then verifies the sum and every shard's count of\n"
        "every worker's pushes). Worker 0 then stops the servers. Exit 0 when exact, 1\n"
        "on a mismatch, 2 when a server does not answer or answers with an error.";
  } else if (role == "ps") {
    usage =
        "usage: asgd ps --config CONFIG --task I [--set section.key=value ...]\n\n"
        "Serves shard I of the parameter vector on the address [cluster] ps lists at\n"
        "position I (or TF_CONFIG's cluster.ps), bound to [cluster] bind_host, until\n"
        "the coordinator stops it, or SIGINT/SIGTERM.";
  } else if (role == "worker") {
    usage =
        "usage: asgd worker --config CONFIG --task I [--set section.key=value ...]\n\n"
        "Runs worker I against the shard servers of [cluster] ps (or TF_CONFIG),\n"
        "reporting to [cluster] coordinator.";
  } else if (role == "coordinator") {
    usage =
        "usage: asgd coordinator --config CONFIG [--set section.key=value ...]\n\n"
        "Coordinates a training run across processes: waits for every shard, worker\n"
        "(and the evaluator) to register at [cluster] coordinator, decides when to\n"
        "evaluate and stop, and writes the run folder. Exit 2 if the run failed.";
  } else {
    usage =
        "usage: asgd evaluator --config CONFIG [--set section.key=value ...]\n\n"
        "Evaluates the centre on the test set whenever the coordinator asks.";
  }
  if (vm.count("help")) {
    out << Help(usage, desc);
    return kExitOk;
  }
  if (!vm.count("config")) {
    throw InputError("asgd " + command + ": missing --config (see `asgd " + command + " --help`)");
  }
  const std::string path = vm["config"].as<std::string>();
  std::vector<std::string> overrides;
  if (vm.count("set")) overrides = vm["set"].as<std::vector<std::string>>();
  Config config = Config::FromFile(path, overrides, ExperimentSchema());
  LogLevel level = LogLevel::kInfo;
  ParseLogLevel(config.String("experiment.log_level"), &level);
  SetLogLevel(level);
  RoleRequest request;
  if (vm.count("task")) {
    const int task = vm["task"].as<int>();
    if (task < 0) throw ConfigError("--task", std::to_string(task), "an index >= 0");
    request.task = task;
  }
  const char* tf_config = std::getenv("TF_CONFIG");
  if (tf_config != nullptr) request.tf_config = tf_config;
  request.data_dirs = DataSearchDirs(config.String("data.dir"));
  request.name = config.String("experiment.name").empty() ? ConfigStem(path)
                                                          : config.String("experiment.name");
  request.command_line = {"asgd", role};
  if (check) request.command_line = {"asgd", "ps-check", role};
  request.command_line.insert(request.command_line.end(), args.begin(), args.end());
  if (vm.count("resume")) request.resume_dir = vm["resume"].as<std::string>();
  if (check) {
    return role == "ps" ? RunPsCheckServer(config, request, out)
                        : RunPsCheckWorker(config, request, out);
  }
  if (role == "coordinator") return RunCoordinatorRole(config, request, out);
  if (role == "evaluator") return RunEvaluatorRole(config, request, out);
  return role == "ps" ? RunPsRole(config, request, out) : RunWorkerRole(config, request, out);
}

// `asgd ps-check ps|worker ...`: the process of the check named by the first argument.
int PsCheckCommand(const std::vector<std::string>& args, std::ostream& out) {
  const std::string usage =
      "usage: asgd ps-check ps --config CONFIG --task I [--set section.key=value ...]\n"
      "       asgd ps-check worker --config CONFIG --task I [--set section.key=value ...]\n\n"
      "Checks a deployed parameter server, without training: one `ps` process per shard\n"
      "serves it with an additive rule, one `worker` process per worker pushes small\n"
      "integers and verifies the shards' sum exactly; worker 0 then stops the servers.\n"
      "The processes are placed as a training run's are ([cluster] ps and worker, or\n"
      "TF_CONFIG; --task), the parameter count comes from [model] and [data], and the\n"
      "[check] keys say how much to push (`asgd run --help-config`).\n"
      "`asgd ps-check ps --help` and `asgd ps-check worker --help` describe each process.\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << usage;
    return args.empty() ? kExitBadInput : kExitOk;
  }
  const std::string& role = args[0];
  if (role != "ps" && role != "worker") {
    throw InputError("asgd ps-check: unknown process " + QuoteForMessage(role) +
                     ": expected ps or worker (see `asgd ps-check --help`)");
  }
  return RoleCommand(role, std::vector<std::string>(args.begin() + 1, args.end()), out,
                     /*check=*/true);
}

std::string DefaultDataDir() {
  const char* env = std::getenv("ASGD_DATA_DIR");
  return (env != nullptr && *env != '\0') ? env : "data";
}

int DataCommand(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description desc("Options");
  desc.add_options()("help,h", "describe this command")(
      "dir", po::value<std::string>(),
      "data folder (fetch: default $ASGD_DATA_DIR, else ./data; find: searched first)")(
      "url", po::value<std::string>(),
      "fetch: base URL to download from instead of the canonical location (file:// works)")(
      "action", po::value<std::string>(), "fetch | find")("name", po::value<std::string>(),
                                                          "mnist | fashion-mnist | a9a | cifar10");
  po::positional_options_description pos;
  pos.add("action", 1).add("name", 1);
  auto vm = Parse(args, desc, pos, "data");
  const std::string usage =
      "usage: asgd data fetch NAME [--dir DIR] [--url BASE]\n"
      "       asgd data find NAME [--dir DIR]\n\n"
      "fetch downloads every file of NAME (mnist, fashion-mnist, a9a, cifar10) into DIR/NAME/,\n"
      "verifying each file's SHA-256; files already present and valid are kept. cifar10 is\n"
      "fetched as its archive, cifar-10-binary.tar.gz, checked against the MD5 its authors\n"
      "publish and its SHA-256, kept in DIR/cifar10/, and the six .bin files extracted.";
  if (vm.count("help") || !vm.count("action")) {
    out << Help(usage, desc);
    return vm.count("help") ? kExitOk : kExitBadInput;
  }
  const std::string action = vm["action"].as<std::string>();
  if (!vm.count("name"))
    throw InputError("asgd data " + action +
                     ": missing NAME (mnist, fashion-mnist, a9a or cifar10)");
  const std::string name = vm["name"].as<std::string>();
  if (action == "fetch") {
    const std::string dir = vm.count("dir") ? vm["dir"].as<std::string>() : DefaultDataDir();
    datasets::FetchOptions options;
    options.data_dir = dir;
    if (vm.count("url")) options.base_url = vm["url"].as<std::string>();
    datasets::FetchDataset(name, options);
    out << "fetched " << name << " into " << dir << "/" << name << "\n";
    return kExitOk;
  }
  if (action == "find") {
    const std::string dir = vm.count("dir") ? vm["dir"].as<std::string>() : "";
    out << datasets::FindDatasetDir(name, DataSearchDirs(dir)) << "\n";
    return kExitOk;
  }
  throw InputError("asgd data: unknown action " + QuoteForMessage(action) +
                   ": expected fetch or find");
}

int Dispatch(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) {
    out << kUsage;
    return kExitBadInput;
  }
  const std::string& command = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "help" || command == "--help" || command == "-h") {
    out << kUsage;
    return kExitOk;
  }
  if (command == "version" || command == "--version") {
    out << BuildDescription() << "\n"
        << "running on " << DescribeRunningCpu(DetectRunningCpu()) << "\n";
    return kExitOk;
  }
  if (command == "run") return RunCommand(rest, out, err);
  if (command == "data") return DataCommand(rest, out);
  if (command == "compare") return CompareCommand(rest, out);
  if (command == "sweep") return SweepCommand(rest, out);
  if (command == "suite") return SuiteCommand(rest, out);
  if (command == "tune") return TuneCommand(rest, out);
  if (command == "launch") return LaunchCommand(rest, out);
  if (command == "task") return TaskCommand(rest, out);
  if (command == "keys") return KeysCommand(rest, out);
  if (command == "ps" || command == "worker" || command == "coordinator" ||
      command == "evaluator") {
    return RoleCommand(command, rest, out);
  }
  if (command == "ps-check") return PsCheckCommand(rest, out);
  std::string guess = ClosestMatch(
      command, {"run", "compare", "sweep", "suite", "tune", "data", "ps", "worker", "coordinator",
                "evaluator", "ps-check", "launch", "task", "keys", "version", "help"});
  throw InputError("asgd: unknown command " + QuoteForMessage(command) +
                   (guess.empty() ? "" : " (did you mean " + guess + "?)") +
                   "; run `asgd help` for the list");
}

}  // namespace

int Main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    return Dispatch(args, out, err);
  } catch (const InvariantError& e) {
    err << "asgd: internal error (please report): " << e.what() << "\n";
    return kExitInternal;
  } catch (const InputError& e) {
    err << "asgd: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const Error& e) {
    err << "asgd: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    err << "asgd: failure: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace asgd::experiments
