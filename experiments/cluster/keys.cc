#include "experiments/cluster/keys.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <sstream>

#include <sys/stat.h>

#include "core/check.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/strings.h"
#include "experiments/config/command_line.h"
#include "experiments/config/exit_status.h"
#include "experiments/run/collective_runner.h"

namespace asgd::experiments {
namespace {

namespace po = boost::program_options;
namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

constexpr const char* kServerKey = "server.key";
constexpr const char* kServerPub = "server.pub";
constexpr const char* kAuthorized = "authorized_clients";

std::string PathIn(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir) / name).string();
}

// "client" for a single pair, "client-1" ... "client-N" otherwise.
std::vector<std::string> ClientNames(int clients) {
  if (clients == 1) return {"client"};
  std::vector<std::string> names;
  for (int i = 1; i <= clients; ++i) names.push_back(StrCat("client-", i));
  return names;
}

std::string SecretFile(const tp::CurveKeyPair& pair, const std::string& what) {
  return StrCat("# asgd CURVE key pair (", what, "): keep it private (mode 0600)\n",
                "public-key = ", pair.public_key, "\n", "secret-key = ", pair.secret_key, "\n");
}

std::string PublicFile(const tp::CurveKeyPair& pair, const std::string& what) {
  return StrCat("# asgd CURVE public key (", what, ")\n", "public-key = ", pair.public_key, "\n");
}

// A line of a key file that carries something: not blank, not a "# " comment. (Z85 has
// '#' but no space, so a key never starts with "# ".)
bool IsContent(std::string_view line) {
  return !line.empty() && line != "#" && !StartsWith(line, "# ");
}

// The lines of a file, or the reason it cannot be read.
std::optional<std::vector<std::string>> ReadLines(const std::string& path, std::string* why) {
  std::ifstream in(path);
  if (!in) {
    *why = StrCat(path, ": cannot read (", std::strerror(errno), ")");
    return std::nullopt;
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.emplace_back(Trim(line));
  if (in.bad()) {
    *why = StrCat(path, ": read error");
    return std::nullopt;
  }
  return lines;
}

// A key file: "public-key = K" and, when secret, "secret-key = K", keys checked (and the
// public key checked against the secret one). nullopt with the reason otherwise.
std::optional<tp::CurveKeyPair> ReadKeyFile(const std::string& path, bool secret,
                                            std::string* why) {
  auto lines = ReadLines(path, why);
  if (!lines) return std::nullopt;
  tp::CurveKeyPair pair;
  int number = 0;
  for (const std::string& line : *lines) {
    ++number;
    if (!IsContent(line)) continue;
    // Split at the first '=': Z85 keys may hold '=' too.
    const std::size_t eq = std::min(line.find('='), line.size());
    const std::string_view text(line);
    const std::string name(Trim(text.substr(0, eq)));
    const std::string value(eq == line.size() ? "" : Trim(text.substr(eq + 1)));
    std::string* slot = name == "public-key"   ? &pair.public_key
                        : name == "secret-key" ? &pair.secret_key
                                               : nullptr;
    if (slot == nullptr) {
      *why = StrCat(path, ":", number, ": expected \"public-key = KEY\" or \"secret-key = KEY\"");
      return std::nullopt;
    }
    if (!tp::IsCurveKey(value)) {
      *why = StrCat(path, ":", number, ": ", name, " is not a CURVE key (40 characters of Z85)");
      return std::nullopt;
    }
    *slot = value;
  }
  if (pair.public_key.empty()) {
    *why = StrCat(path, ": no public-key line");
    return std::nullopt;
  }
  if (secret) {
    if (pair.secret_key.empty()) {
      *why = StrCat(path, ": no secret-key line");
      return std::nullopt;
    }
    if (tp::CurvePublicKey(pair.secret_key) != pair.public_key) {
      *why = StrCat(path, ": public-key is not the public key of secret-key");
      return std::nullopt;
    }
  }
  return pair;
}

// authorized_clients: one key per line.
std::optional<std::vector<std::string>> ReadAuthorized(const std::string& path, std::string* why) {
  auto lines = ReadLines(path, why);
  if (!lines) return std::nullopt;
  std::vector<std::string> keys;
  int number = 0;
  for (const std::string& line : *lines) {
    ++number;
    if (!IsContent(line)) continue;
    if (!tp::IsCurveKey(line)) {
      *why = StrCat(path, ":", number, ": not a CURVE public key (40 characters of Z85)");
      return std::nullopt;
    }
    keys.push_back(line);
  }
  if (keys.empty()) {
    *why = StrCat(path, ": lists no client key (a server would accept nobody)");
    return std::nullopt;
  }
  return keys;
}

}  // namespace

std::vector<std::string> GenerateClusterKeys(const std::string& dir, int clients, bool force) {
  ASGD_CHECK(clients >= 1, "GenerateClusterKeys needs clients >= 1");
  const std::vector<std::string> client_names = ClientNames(clients);
  std::vector<std::string> files = {kServerKey, kServerPub};
  for (const std::string& c : client_names) {
    files.push_back(c + ".key");
    files.push_back(c + ".pub");
  }
  files.emplace_back(kAuthorized);
  if (!force) {
    for (const std::string& f : files) {
      if (FileExists(PathIn(dir, f))) {
        throw InputError(StrCat("asgd keys generate: ", PathIn(dir, f),
                                " exists; refusing to overwrite keys (--force replaces them, "
                                "and every process then needs the new ones)"));
      }
    }
  }
  if (!IsDirectory(dir)) {
    MakeDirs(dir);
    ::chmod(dir.c_str(), 0700);  // best effort: the secrets are 0600 themselves
  }
  const tp::CurveKeyPair server = tp::NewCurveKeyPair();
  WriteFileAtomic(PathIn(dir, kServerKey), SecretFile(server, "the servers: ps and coordinator"),
                  0600);
  WriteFileAtomic(PathIn(dir, kServerPub), PublicFile(server, "the servers"));
  std::string authorized =
      "# asgd CURVE: the client public keys the servers accept, one per line\n";
  for (const std::string& c : client_names) {
    const tp::CurveKeyPair pair = tp::NewCurveKeyPair();
    WriteFileAtomic(PathIn(dir, c + ".key"), SecretFile(pair, c), 0600);
    WriteFileAtomic(PathIn(dir, c + ".pub"), PublicFile(pair, c));
    authorized += StrCat("# ", c, "\n", pair.public_key, "\n");
  }
  WriteFileAtomic(PathIn(dir, kAuthorized), authorized);
  return files;
}

tp::CurveOptions CurveFromPlan(const ClusterPlan& cluster, bool serves) {
  tp::CurveOptions o;
  if (!cluster.curve) return o;
  const std::string& dir = cluster.keys_dir;
  if (dir.empty()) {
    throw ConfigError(ClusterPlan::kKeysDirKey, "",
                      "the folder of the cluster's CURVE keys when cluster.curve is true "
                      "(`asgd keys generate DIR` writes them)");
  }
  if (!tp::CurveAvailable()) {
    throw ConfigError(ClusterPlan::kCurveKey, "true",
                      "false: this libzmq was built without CURVE (zmq_has(\"curve\") is false)");
  }
  auto fail = [&](const std::string& key, const std::string& value, const std::string& why) {
    return ConfigError(key, value, "CURVE key files as `asgd keys generate` writes them: " + why);
  };
  std::string why;
  o.enabled = true;
  const auto server_pub = ReadKeyFile(PathIn(dir, kServerPub), false, &why);
  if (!server_pub) throw fail(ClusterPlan::kKeysDirKey, dir, why);
  o.server_public_key = server_pub->public_key;
  const std::string& client_key = cluster.client_key;
  const auto client = ReadKeyFile(PathIn(dir, client_key), true, &why);
  if (!client) throw fail(ClusterPlan::kClientKeyKey, client_key, why);
  o.client_public_key = client->public_key;
  o.client_secret_key = client->secret_key;
  if (serves) {
    const auto server = ReadKeyFile(PathIn(dir, kServerKey), true, &why);
    if (!server) throw fail(ClusterPlan::kKeysDirKey, dir, why);
    if (server->public_key != o.server_public_key) {
      throw fail(
          ClusterPlan::kKeysDirKey, dir,
          StrCat(PathIn(dir, kServerPub), " is not the public key of ", PathIn(dir, kServerKey)));
    }
    o.server_secret_key = server->secret_key;
    auto authorized = ReadAuthorized(PathIn(dir, kAuthorized), &why);
    if (!authorized) throw fail(ClusterPlan::kKeysDirKey, dir, why);
    o.authorized_clients = std::move(*authorized);
  }
  return o;
}

void RefuseCurveInOneProcess(const Config& config) {
  const ClusterPlan cluster = ClusterPlan::FromConfig(config);
  if (!cluster.curve) return;
  RefuseCurveOnCollective(config);  // the more specific reason
  throw ConfigError(ClusterPlan::kCurveKey, config.Raw(ClusterPlan::kCurveKey),
                    StrCat("false for `asgd run`: its roles are threads of one process "
                           "(cluster.transport = ",
                           cluster.transport,
                           ") with no connection to protect; CURVE is for runs as processes "
                           "(asgd launch, asgd coordinator|ps|worker|evaluator, asgd task)"));
}

int KeysCommand(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description desc("Options");
  desc.add_options()("help,h", "describe this command")(
      "clients", po::value<int>()->default_value(1),
      "client key pairs to make: 1 = client.key, shared by every role; N > 1 = "
      "client-1.key ... client-N.key, one per host or role (cluster.client_key)")(
      "force", "replace existing key files")("action", po::value<std::string>(), "generate")(
      "dir", po::value<std::string>(), "the folder to write the keys into");
  po::positional_options_description pos;
  pos.add("action", 1).add("dir", 1);
  auto vm = ParseCommandLine(args, desc, pos, "keys");
  const std::string usage =
      "usage: asgd keys generate DIR [--clients N] [--force]\n\n"
      "Writes the CURVE keys of a cluster into DIR: server.key (mode 0600) and server.pub,\n"
      "client.key (0600) and client.pub, and authorized_clients, the client public keys the\n"
      "servers accept. Then run with --set cluster.curve=true --set cluster.keys_dir=DIR:\n"
      "every connection is encrypted and the servers (ps, coordinator) accept only the\n"
      "listed clients. Servers need server.key and authorized_clients; the other hosts\n"
      "only server.pub and their client key pair. Existing keys are kept unless --force.";
  if (vm.count("help") || !vm.count("action")) {
    out << CommandHelp(usage, desc);
    return vm.count("help") ? kExitOk : kExitBadInput;
  }
  const std::string action = vm["action"].as<std::string>();
  if (action != "generate") {
    throw InputError("asgd keys: unknown action " + QuoteForMessage(action) +
                     ": expected generate (see `asgd keys --help`)");
  }
  if (!vm.count("dir")) {
    throw InputError("asgd keys generate: missing DIR (see `asgd keys --help`)");
  }
  const int clients = vm["clients"].as<int>();
  if (clients < 1 || clients > 10000) {
    throw ConfigError("--clients", std::to_string(clients), "a number of key pairs in [1, 10000]");
  }
  const std::string dir = vm["dir"].as<std::string>();
  if (!tp::CurveAvailable()) {
    throw InputError("asgd keys generate: this libzmq was built without CURVE");
  }
  const std::vector<std::string> files = GenerateClusterKeys(dir, clients, vm.count("force") > 0);
  out << "wrote " << Join(files, ", ") << " into " << dir << "\n"
      << "use them with: --set cluster.curve=true --set cluster.keys_dir=" << dir
      << (clients > 1 ? " --set cluster.client_key=client-I.key" : "") << "\n";
  return kExitOk;
}

}  // namespace asgd::experiments
