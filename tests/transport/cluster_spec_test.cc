// ClusterSpec (transport/cluster_spec.h): the cluster map from the config's [cluster]
// strings and from TensorFlow's TF_CONFIG. A process that misreads it connects to the
// wrong shard or binds the wrong interface, so every form is checked, and every bad spec
// must be a ConfigError naming the key the user has to fix.
#include "transport/cluster_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace asgd::transport {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Runs f, which must throw ConfigError, and returns it.
template <typename F>
ConfigError Rejected(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no ConfigError";
  return ConfigError("none");
}

ConfigError FromStringsError(std::string_view ps, std::string_view worker,
                             std::string_view coordinator = {}, std::string_view evaluator = {}) {
  return Rejected([&] { ClusterSpec::FromStrings(ps, worker, coordinator, evaluator); });
}

ConfigError TfError(std::string_view json) {
  return Rejected([&] { ClusterSpec::FromTfConfig(json); });
}

// ---- FromStrings -------------------------------------------------------------------------

TEST(ClusterSpec, FromStringsReadsListsAndTrimsBlanks) {
  const ClusterSpec spec = ClusterSpec::FromStrings(" ps0:5000 , ps1:5001", "w0:6000,w1:6001,w2:6002",
                                                    "chief:7000", " eval:8000 ");
  EXPECT_THAT(spec.ps, ElementsAre("ps0:5000", "ps1:5001"));
  EXPECT_THAT(spec.worker, ElementsAre("w0:6000", "w1:6001", "w2:6002"));
  EXPECT_EQ(spec.coordinator, "chief:7000");
  EXPECT_EQ(spec.evaluator, "eval:8000");
  EXPECT_EQ(spec.num_ps(), 2);
  EXPECT_EQ(spec.num_workers(), 3);
  EXPECT_EQ(spec.task_type, "");
}

// A ps-only cluster (workers in-process, or given later) is valid.
TEST(ClusterSpec, WorkersCoordinatorAndEvaluatorAreOptional) {
  const ClusterSpec spec = ClusterSpec::FromStrings("h:1", "");
  EXPECT_EQ(spec.num_ps(), 1);
  EXPECT_EQ(spec.num_workers(), 0);
  EXPECT_EQ(spec.coordinator, "");
  EXPECT_EQ(spec.evaluator, "");
}

// Full addresses of every scheme may be mixed with HOST:PORT entries, so a cluster can be
// placed on one machine over ipc:// or in one process over inproc://.
TEST(ClusterSpec, AcceptsIpcInprocAndTcpAddresses) {
  const ClusterSpec spec = ClusterSpec::FromStrings(
      "ipc:///tmp/asgd/ps-0,inproc://ps-1,tcp://10.0.0.2:5000,10.0.0.3:5000", "inproc://w0");
  EXPECT_EQ(spec.PsAddress(0), "ipc:///tmp/asgd/ps-0");
  EXPECT_EQ(spec.PsAddress(1), "inproc://ps-1");
  EXPECT_EQ(spec.PsAddress(2), "tcp://10.0.0.2:5000");
  EXPECT_EQ(spec.PsAddress(3), "tcp://10.0.0.3:5000");  // HOST:PORT means tcp
  EXPECT_EQ(spec.WorkerAddress(0), "inproc://w0");
  EXPECT_THROW(spec.PsAddress(4), InvariantError);
  EXPECT_THROW(spec.PsAddress(-1), InvariantError);
  EXPECT_THROW(spec.WorkerAddress(1), InvariantError);
}

// Servers bind to loopback unless told otherwise: a ps started from a config meant for
// a cluster must not open its port to the network by accident. Only the port is taken
// from the entry; ipc and inproc bind as written.
TEST(ClusterSpec, PsBindAddressBindsLoopbackByDefault) {
  const ClusterSpec spec =
      ClusterSpec::FromStrings("node7.example.com:5000,tcp://10.0.0.2:5001,ipc:///tmp/p,inproc://q",
                               "");
  EXPECT_EQ(spec.PsBindAddress(0), "tcp://127.0.0.1:5000");
  EXPECT_EQ(spec.PsBindAddress(1), "tcp://127.0.0.1:5001");
  EXPECT_EQ(spec.PsBindAddress(0, "*"), "tcp://*:5000");
  EXPECT_EQ(spec.PsBindAddress(1, "0.0.0.0"), "tcp://0.0.0.0:5001");
  EXPECT_EQ(spec.PsBindAddress(2), "ipc:///tmp/p");
  EXPECT_EQ(spec.PsBindAddress(3, "*"), "inproc://q");
  EXPECT_THROW(spec.PsBindAddress(4), InvariantError);
}

TEST(ClusterSpec, EmptyPsIsRejected) {
  for (std::string_view ps : {"", "  "}) {
    const ConfigError e = FromStringsError(ps, "w:1");
    EXPECT_EQ(e.key(), "cluster.ps");
    EXPECT_THAT(e.what(), HasSubstr("at least one"));
  }
  EXPECT_EQ(FromStringsError("h:1,,h:2", "").key(), "cluster.ps");  // an empty entry
}

// Bad entries name the list's key, the whole value and which entry is wrong.
TEST(ClusterSpec, BadEntriesAreRejectedWithTheirKey) {
  for (std::string_view entry : {"h:0", "h:65536", "h:port", "h", ":5000", "h:-1", "h:5 000",
                                 "udp://h:1", "ipc://", "inproc://", "tcp://h"}) {
    SCOPED_TRACE(entry);
    const std::string ps = "good:1," + std::string(entry);
    const ConfigError e = FromStringsError(ps, "");
    EXPECT_EQ(e.key(), "cluster.ps");
    EXPECT_EQ(e.value(), ps);
    EXPECT_THAT(e.what(), HasSubstr("entry 2"));
  }
  EXPECT_EQ(FromStringsError("h:1", "w:1,w:x").key(), "cluster.worker");
  EXPECT_EQ(FromStringsError("h:1", "", "c:0").key(), "cluster.coordinator");
  EXPECT_EQ(FromStringsError("h:1", "", "", "e").key(), "cluster.evaluator");
}

// A wildcard port or path is a bind-time notion; nobody can connect to it, so it has no
// place in a cluster map.
TEST(ClusterSpec, WildcardAddressesAreRejected) {
  for (std::string_view ps : {"tcp://127.0.0.1:*", "ipc://*", "h:*"}) {
    SCOPED_TRACE(ps);
    const ConfigError e = FromStringsError(ps, "");
    EXPECT_EQ(e.key(), "cluster.ps");
  }
}

TEST(ClusterSpec, SingleEntryKeysRejectLists) {
  EXPECT_EQ(FromStringsError("h:1", "", "c:1,c:2").key(), "cluster.coordinator");
  EXPECT_EQ(FromStringsError("h:1", "", "", "e:1,e:2").key(), "cluster.evaluator");
}

// Two tasks on one address would both try to bind it (or a worker would talk to a ps as
// if it were another): rejected, also across lists and across spellings of one address.
TEST(ClusterSpec, DuplicateAddressesAreRejected) {
  ConfigError e = FromStringsError("h:1,h:2,h:1", "");
  EXPECT_EQ(e.key(), "cluster.ps");
  EXPECT_THAT(e.what(), HasSubstr("no other task"));
  EXPECT_EQ(FromStringsError("h:1", "w:1,tcp://h:1").key(), "cluster.worker");
  EXPECT_EQ(FromStringsError("h:1", "w:1", "w:1").key(), "cluster.coordinator");
  EXPECT_EQ(FromStringsError("ipc:///tmp/a", "", "", "ipc:///tmp/a").key(), "cluster.evaluator");
  EXPECT_NO_THROW(ClusterSpec::FromStrings("h:1,h:2", "g:1"));  // same port, other host
}

// Validate() re-checks a spec edited by hand, including the task.
TEST(ClusterSpec, ValidateChecksTheTask) {
  ClusterSpec spec = ClusterSpec::FromStrings("h:1,h:2", "w:1");
  spec.task_type = "ps";
  spec.task_index = 1;
  EXPECT_NO_THROW(spec.Validate());
  spec.task_index = 2;
  ConfigError e = Rejected([&] { spec.Validate(); });
  EXPECT_EQ(e.key(), "cluster.task");
  EXPECT_THAT(e.what(), HasSubstr("[0, 2)"));
  spec.task_type = "coordinator";
  spec.task_index = 0;
  EXPECT_EQ(Rejected([&] { spec.Validate(); }).key(), "cluster.task");  // there is none
  spec.task_type = "janitor";
  EXPECT_EQ(Rejected([&] { spec.Validate(); }).key(), "cluster.task");
  spec.task_type = "worker";
  spec.task_index = -1;
  EXPECT_EQ(Rejected([&] { spec.Validate(); }).key(), "cluster.task");
  spec = ClusterSpec::FromStrings("h:1", "");
  spec.ps.push_back("h:1");
  EXPECT_EQ(Rejected([&] { spec.Validate(); }).key(), "cluster.ps");
}

// ---- FromTfConfig ------------------------------------------------------------------------

// The TF_CONFIG a Kubernetes or SLURM launcher writes for TensorFlow works unchanged:
// "chief" is the coordinator; the task names this process.
TEST(ClusterSpec, FromTfConfigReadsTensorFlowsFormat) {
  const ClusterSpec spec = ClusterSpec::FromTfConfig(R"({
      "cluster": {"chief": ["c0:2222"], "ps": ["p0:2222", "p1:2222"],
                  "worker": ["w0:2222", "w1:2222", "w2:2222"], "evaluator": ["e0:2222"]},
      "task": {"type": "worker", "index": 2},
      "environment": "cloud", "rpc_layer": "grpc"})");
  EXPECT_EQ(spec.coordinator, "c0:2222");
  EXPECT_THAT(spec.ps, ElementsAre("p0:2222", "p1:2222"));
  EXPECT_THAT(spec.worker, ElementsAre("w0:2222", "w1:2222", "w2:2222"));
  EXPECT_EQ(spec.evaluator, "e0:2222");
  EXPECT_EQ(spec.task_type, "worker");
  EXPECT_EQ(spec.task_index, 2);
  EXPECT_EQ(spec.PsAddress(1), "tcp://p1:2222");
  EXPECT_EQ(spec.PsBindAddress(1), "tcp://127.0.0.1:2222");
}

TEST(ClusterSpec, FromTfConfigMapsChiefAndMasterToCoordinator) {
  for (std::string_view job : {"chief", "master"}) {
    const std::string json = R"({"cluster": {")" + std::string(job) +
                             R"(": ["c:1"], "ps": ["p:1"]}, "task": {"type": ")" +
                             std::string(job) + R"(", "index": 0}})";
    const ClusterSpec spec = ClusterSpec::FromTfConfig(json);
    EXPECT_EQ(spec.coordinator, "c:1") << job;
    EXPECT_EQ(spec.task_type, "coordinator") << job;
    EXPECT_EQ(spec.task_index, 0);
  }
}

// Without a task the spec is still usable (the CLI passes --task), and an index defaults
// to 0.
TEST(ClusterSpec, FromTfConfigTaskIsOptional) {
  ClusterSpec spec = ClusterSpec::FromTfConfig(R"({"cluster": {"ps": ["ipc:///tmp/p0"]}})");
  EXPECT_EQ(spec.task_type, "");
  EXPECT_EQ(spec.PsAddress(0), "ipc:///tmp/p0");
  spec = ClusterSpec::FromTfConfig(R"({"cluster": {"ps": ["p:1"]}, "task": {"type": "ps"}})");
  EXPECT_EQ(spec.task_type, "ps");
  EXPECT_EQ(spec.task_index, 0);
}

// Each malformed TF_CONFIG names the JSON path the user has to fix.
TEST(ClusterSpec, FromTfConfigErrorsNameTheKey) {
  struct Case {
    const char* json;
    const char* key;
  };
  const Case cases[] = {
      {R"({"cluster": )", "TF_CONFIG"},                                        // not JSON
      {R"(["p:1"])", "TF_CONFIG"},                                             // not an object
      {R"({"cluster": {"ps": ["p:1"]}, "tsak": {}})", "TF_CONFIG.tsak"},       // unknown key
      {R"({"task": {"type": "ps"}})", "TF_CONFIG.cluster"},                    // no cluster
      {R"({"cluster": ["p:1"]})", "TF_CONFIG.cluster"},                        // wrong type
      {R"({"cluster": {"ps": ["p:1"], "param": ["q:1"]}})", "TF_CONFIG.cluster.param"},
      {R"({"cluster": {"ps": "p:1"}})", "TF_CONFIG.cluster.ps"},               // not a list
      {R"({"cluster": {"ps": []}})", "TF_CONFIG.cluster.ps"},                  // empty ps
      {R"({"cluster": {"worker": ["w:1"]}})", "TF_CONFIG.cluster.ps"},         // no ps
      {R"({"cluster": {"ps": ["p:1"], "worker": ["w:1", 7]}})", "TF_CONFIG.cluster.worker[1]"},
      {R"({"cluster": {"ps": ["p:99999"]}})", "TF_CONFIG.cluster.ps[0]"},      // bad port
      {R"({"cluster": {"ps": ["p:1"], "chief": ["c:1", "c:2"]}})", "TF_CONFIG.cluster.chief"},
      {R"({"cluster": {"ps": ["p:1"]}, "task": []})", "TF_CONFIG.task"},
      {R"({"cluster": {"ps": ["p:1"]}, "task": {"type": 1}})", "TF_CONFIG.task.type"},
      {R"({"cluster": {"ps": ["p:1"]}, "task": {"type": "ps", "index": "0"}})",
       "TF_CONFIG.task.index"},
      {R"({"cluster": {"ps": ["p:1"]}, "task": {"type": "ps", "index": -1}})",
       "TF_CONFIG.task.index"},
      {R"({"cluster": {"ps": ["p:1"]}, "task": {"type": "ps", "index": 0.5}})",
       "TF_CONFIG.task.index"},
      {R"({"cluster": {"ps": ["p:1"]}, "task": {"type": "ps", "index": 1}})", "TF_CONFIG.task"},
      {R"({"cluster": {"ps": ["p:1"]}, "task": {"type": "worker", "index": 0}})",
       "TF_CONFIG.task"},
      {R"({"cluster": {"ps": ["p:1"]}, "task": {"type": "janitor"}})", "TF_CONFIG.task"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    EXPECT_EQ(TfError(c.json).key(), c.key);
  }
}

// Duplicates and conflicting coordinators in a TF_CONFIG are reported under the
// TF_CONFIG paths the user wrote, not under [cluster] keys they never used.
TEST(ClusterSpec, FromTfConfigDuplicatesNameTheTfConfigKey) {
  EXPECT_EQ(TfError(R"({"cluster": {"ps": ["p:1", "p:1"]}})").key(), "TF_CONFIG.cluster.ps");
  EXPECT_EQ(TfError(R"({"cluster": {"ps": ["p:1"], "worker": ["p:1"]}})").key(),
            "TF_CONFIG.cluster.worker");
  EXPECT_EQ(TfError(R"({"cluster": {"ps": ["p:1"], "chief": ["p:1"]}})").key(),
            "TF_CONFIG.cluster.chief");
  const ConfigError both =
      TfError(R"({"cluster": {"ps": ["p:1"], "chief": ["c:1"], "master": ["m:1"]}})");
  EXPECT_THAT(both.key(), ::testing::AnyOf("TF_CONFIG.cluster.chief", "TF_CONFIG.cluster.master"));
  EXPECT_THAT(both.what(), HasSubstr("not both"));
}

// The one-line message carries the key, the value and what was expected.
TEST(ClusterSpec, ErrorMessageIsOneLineWithKeyAndValue) {
  const ConfigError e = FromStringsError("h:70000", "");
  const std::string what = e.what();
  EXPECT_THAT(what, HasSubstr("cluster.ps"));
  EXPECT_THAT(what, HasSubstr("h:70000"));
  EXPECT_THAT(what, HasSubstr("[1, 65535]"));
  EXPECT_EQ(what.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace asgd::transport
