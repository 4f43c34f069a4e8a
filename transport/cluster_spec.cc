#include "transport/cluster_spec.h"

#include <nlohmann/json.hpp>

#include <set>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "transport/endpoint.h"

namespace asgd::transport {

namespace {

constexpr const char* kEntryExpected =
    "HOST:PORT with a port in [1, 65535], or a tcp://, ipc:// or inproc:// address";

// Checks one entry; returns "" if fine, else why not.
std::string EntryProblem(std::string_view entry) {
  if (entry.empty()) return "an empty entry";
  if (entry.find_first_of(" \t\r\n,") != std::string_view::npos) return "blanks inside an entry";
  if (entry.find("://") != std::string_view::npos) {
    try {
      ParseEndpoint(entry);
    } catch (const ConfigError& e) {
      return e.what();
    }
    // A wildcard is for binding (ParseEndpoint accepts it); a cluster entry is where
    // peers connect, and nobody can connect to "any free port".
    if ((StartsWith(entry, "tcp://") && EndsWith(entry, ":*")) || entry == "ipc://*") {
      return "a wildcard port or path";
    }
    return "";
  }
  const std::size_t colon = entry.rfind(':');
  if (colon == std::string_view::npos) return "no ':PORT'";
  if (colon == 0) return "no host before ':'";
  auto port = ParseInt64(entry.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535) return "a port outside [1, 65535]";
  return "";
}

std::vector<std::string> ParseList(std::string_view key, std::string_view text) {
  std::vector<std::string> out;
  if (Trim(text).empty()) return out;
  const std::vector<std::string> fields = Split(text, ',');
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const std::string entry(Trim(fields[i]));
    const std::string problem = EntryProblem(entry);
    if (!problem.empty()) {
      throw ConfigError(std::string(key), std::string(text),
                        internal::StrCat("a comma-separated list of ", kEntryExpected,
                                         "; entry ", i + 1, " '", entry, "' has ", problem));
    }
    out.push_back(entry);
  }
  return out;
}

std::string Address(const std::string& entry) {
  return entry.find("://") != std::string::npos ? entry : "tcp://" + entry;
}

// The keys errors name: the [cluster] config keys, or the TF_CONFIG paths the user wrote.
struct SpecKeys {
  const char* ps;
  const char* worker;
  const char* coordinator;
  const char* evaluator;
  const char* task;
};
constexpr SpecKeys kConfigKeys{"cluster.ps", "cluster.worker", "cluster.coordinator",
                               "cluster.evaluator", "cluster.task"};
constexpr SpecKeys kTfConfigKeys{"TF_CONFIG.cluster.ps", "TF_CONFIG.cluster.worker",
                                 "TF_CONFIG.cluster.chief", "TF_CONFIG.cluster.evaluator",
                                 "TF_CONFIG.task"};

void ValidateSpec(const ClusterSpec& spec, const SpecKeys& keys) {
  std::set<std::string> seen;
  auto check = [&](const char* key, const std::string& entry) {
    const std::string problem = EntryProblem(entry);
    if (!problem.empty()) {
      throw ConfigError(key, entry, std::string(kEntryExpected) + " (it has " + problem + ")");
    }
    if (!seen.insert(Address(entry)).second) {
      throw ConfigError(key, entry, "an address no other task uses");
    }
  };
  if (spec.ps.empty()) throw ConfigError(keys.ps, "", "at least one HOST:PORT entry");
  for (const auto& e : spec.ps) check(keys.ps, e);
  for (const auto& e : spec.worker) check(keys.worker, e);
  if (!spec.coordinator.empty()) check(keys.coordinator, spec.coordinator);
  if (!spec.evaluator.empty()) check(keys.evaluator, spec.evaluator);
  const std::string& type = spec.task_type;
  if (type.empty()) return;
  int count = 0;
  if (type == "ps") {
    count = spec.num_ps();
  } else if (type == "worker") {
    count = spec.num_workers();
  } else if (type == "coordinator") {
    count = spec.coordinator.empty() ? 0 : 1;
  } else if (type == "evaluator") {
    count = spec.evaluator.empty() ? 0 : 1;
  } else {
    throw ConfigError(keys.task, type, "one of ps, worker, coordinator (chief), evaluator");
  }
  if (spec.task_index < 0 || spec.task_index >= count) {
    throw ConfigError(keys.task, type + " " + std::to_string(spec.task_index),
                      internal::StrCat("an index in [0, ", count, ") for ", type,
                                       " (the cluster has ", count, ")"));
  }
}

}  // namespace

ClusterSpec ClusterSpec::FromStrings(std::string_view ps, std::string_view worker,
                                     std::string_view coordinator, std::string_view evaluator) {
  ClusterSpec spec;
  spec.ps = ParseList("cluster.ps", ps);
  if (spec.ps.empty()) {
    throw ConfigError("cluster.ps", std::string(ps), "at least one HOST:PORT entry");
  }
  spec.worker = ParseList("cluster.worker", worker);
  for (auto [key, text, field] :
       {std::tuple{"cluster.coordinator", coordinator, &spec.coordinator},
        std::tuple{"cluster.evaluator", evaluator, &spec.evaluator}}) {
    const auto list = ParseList(key, text);
    if (list.size() > 1) {
      throw ConfigError(key, std::string(text), "a single HOST:PORT entry");
    }
    if (!list.empty()) *field = list[0];
  }
  spec.Validate();
  return spec;
}

ClusterSpec ClusterSpec::FromTfConfig(std::string_view text) {
  using nlohmann::json;
  const std::string value(text);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ConfigError("TF_CONFIG", value, std::string("valid JSON (") + e.what() + ")");
  }
  if (!doc.is_object()) throw ConfigError("TF_CONFIG", value, "a JSON object");
  for (const auto& [k, v] : doc.items()) {
    if (k != "cluster" && k != "task" && k != "environment" && k != "rpc_layer") {
      throw ConfigError("TF_CONFIG." + k, v.dump(),
                        "only the keys cluster, task (and TensorFlow's environment, rpc_layer)");
    }
  }
  if (!doc.contains("cluster") || !doc["cluster"].is_object()) {
    throw ConfigError("TF_CONFIG.cluster", doc.contains("cluster") ? doc["cluster"].dump() : "",
                      "an object mapping job names (chief, ps, worker, evaluator) to lists of "
                      "HOST:PORT strings");
  }
  ClusterSpec spec;
  for (const auto& [job, list] : doc["cluster"].items()) {
    const std::string key = "TF_CONFIG.cluster." + job;
    std::vector<std::string>* dest = nullptr;
    std::vector<std::string> single;
    if (job == "ps") {
      dest = &spec.ps;
    } else if (job == "worker") {
      dest = &spec.worker;
    } else if (job == "chief" || job == "master" || job == "evaluator") {
      dest = &single;
    } else {
      throw ConfigError(key, list.dump(), "a job named chief, master, ps, worker or evaluator");
    }
    if (!list.is_array()) throw ConfigError(key, list.dump(), "a list of HOST:PORT strings");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string entry_key = key + "[" + std::to_string(i) + "]";
      if (!list[i].is_string()) throw ConfigError(entry_key, list[i].dump(), kEntryExpected);
      const std::string entry = list[i].get<std::string>();
      const std::string problem = EntryProblem(entry);
      if (!problem.empty()) {
        throw ConfigError(entry_key, entry, std::string(kEntryExpected) + " (it has " + problem + ")");
      }
      dest->push_back(entry);
    }
    if (dest == &single) {
      if (single.size() > 1) throw ConfigError(key, list.dump(), "a list of one HOST:PORT");
      std::string& field = job == "evaluator" ? spec.evaluator : spec.coordinator;
      if (!single.empty() && !field.empty()) {
        // chief and master are two names for the one coordinator.
        throw ConfigError(key, list.dump(), "either chief or master, not both");
      }
      if (!single.empty()) field = single[0];
    }
  }
  if (spec.ps.empty()) {
    throw ConfigError("TF_CONFIG.cluster.ps",
                      doc["cluster"].contains("ps") ? doc["cluster"]["ps"].dump() : "",
                      "at least one HOST:PORT entry");
  }
  if (doc.contains("task")) {
    const json& task = doc["task"];
    if (!task.is_object()) throw ConfigError("TF_CONFIG.task", task.dump(), "an object");
    if (task.contains("type")) {
      if (!task["type"].is_string()) {
        throw ConfigError("TF_CONFIG.task.type", task["type"].dump(),
                          "one of chief, ps, worker, evaluator");
      }
      std::string type = task["type"].get<std::string>();
      if (type == "chief" || type == "master") type = "coordinator";
      spec.task_type = type;
    }
    if (task.contains("index")) {
      const json& index = task["index"];
      if (!index.is_number_integer() || index.get<int64_t>() < 0 ||
          index.get<int64_t>() > 1'000'000) {
        throw ConfigError("TF_CONFIG.task.index", index.dump(), "an integer >= 0");
      }
      spec.task_index = static_cast<int>(index.get<int64_t>());
    }
  }
  ValidateSpec(spec, kTfConfigKeys);
  return spec;
}

std::string ClusterSpec::PsAddress(int i) const {
  ASGD_CHECK(i >= 0 && i < num_ps(), "ps index ", i, " of ", num_ps());
  return Address(ps[static_cast<std::size_t>(i)]);
}

std::string ClusterSpec::WorkerAddress(int i) const {
  ASGD_CHECK(i >= 0 && i < num_workers(), "worker index ", i, " of ", num_workers());
  return Address(worker[static_cast<std::size_t>(i)]);
}

namespace {

std::string BindAddressOf(const std::string& address, std::string_view bind_host) {
  if (!StartsWith(address, "tcp://")) return address;
  const std::size_t colon = address.rfind(':');
  return "tcp://" + std::string(bind_host) + address.substr(colon);
}

}  // namespace

std::string ClusterSpec::PsBindAddress(int i, std::string_view bind_host) const {
  return BindAddressOf(PsAddress(i), bind_host);
}

std::string ClusterSpec::CoordinatorAddress() const {
  ASGD_CHECK(!coordinator.empty(), "the cluster has no coordinator");
  return Address(coordinator);
}

std::string ClusterSpec::CoordinatorBindAddress(std::string_view bind_host) const {
  return BindAddressOf(CoordinatorAddress(), bind_host);
}

void ClusterSpec::Validate() const { ValidateSpec(*this, kConfigKeys); }

}  // namespace asgd::transport
