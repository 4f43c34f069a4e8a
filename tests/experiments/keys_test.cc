// `asgd keys generate` and the CURVE keys a process reads from cluster.keys_dir: the
// layout, private secret files, no overwriting without --force, and one-line errors that
// name the key and the file.
#include "experiments/cluster/keys.h"

#include <filesystem>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/file_util.h"
#include "experiments/cli/cli.h"
#include "experiments/config/config_keys.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
namespace fs = std::filesystem;

struct CliResult {
  int status;
  std::string out;
  std::string err;
};

CliResult RunCli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int status = Main(args, out, err);
  return {status, out.str(), err.str()};
}

bool OneLine(const std::string& s) {
  return !s.empty() && s.back() == '\n' && s.find('\n') == s.size() - 1;
}

int Mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<int>(st.st_mode & 0777);
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

Config CurveConfig(const std::string& keys_dir, const std::string& extra = "") {
  return Config::FromString("[cluster]\ncurve = true\nkeys_dir = " + keys_dir + "\n" + extra, {},
                            ExperimentSchema());
}

// A process's CURVE options from a config, as every role reads them (through its plan).
transport::CurveOptions CurveOf(const Config& config, bool serves) {
  return CurveFromPlan(ClusterPlan::FromConfig(config), serves);
}

// The ConfigError CurveOf throws, as text ("" if none).
std::string CurveError(const Config& config, bool serves) {
  try {
    (void)CurveOf(config, serves);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Keys, GenerateWritesParseableKeysWithPrivateSecrets) {
  testing::TempDir tmp;
  const std::string dir = tmp.File("keys");
  const CliResult r = RunCli({"keys", "generate", dir});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("cluster.curve=true"), HasSubstr(dir)));
  // Exactly the documented files: no temporary left behind.
  EXPECT_THAT(Names(dir), UnorderedElementsAre("server.key", "server.pub", "client.key",
                                               "client.pub", "authorized_clients"));
  EXPECT_EQ(Mode(dir + "/server.key"), 0600);
  EXPECT_EQ(Mode(dir + "/client.key"), 0600);
  EXPECT_EQ(Mode(dir), 0700);
  EXPECT_EQ(Mode(dir + "/server.pub") & 0022, 0);

  const transport::CurveOptions server = CurveOf(CurveConfig(dir), /*serves=*/true);
  EXPECT_TRUE(server.enabled);
  EXPECT_NO_THROW(transport::CheckCurveServer(server));
  EXPECT_NO_THROW(transport::CheckCurveClient(server));
  ASSERT_EQ(server.authorized_clients.size(), 1u);
  EXPECT_EQ(server.authorized_clients[0], server.client_public_key);
  EXPECT_EQ(transport::CurvePublicKey(server.server_secret_key), server.server_public_key);
  // A worker reads neither the servers' secret nor the list.
  const transport::CurveOptions worker = CurveOf(CurveConfig(dir), /*serves=*/false);
  EXPECT_TRUE(worker.server_secret_key.empty());
  EXPECT_TRUE(worker.authorized_clients.empty());
  EXPECT_EQ(worker.client_secret_key, server.client_secret_key);
  // cluster.curve off: nothing is read.
  EXPECT_FALSE(CurveOf(Config::Defaults(ExperimentSchema()), true).enabled);
}

TEST(Keys, RefusesToOverwriteUnlessForced) {
  testing::TempDir tmp;
  const std::string dir = tmp.File("keys");
  ASSERT_EQ(RunCli({"keys", "generate", dir}).status, kExitOk);
  const std::string secret = ReadFile(dir + "/server.key");
  CliResult r = RunCli({"keys", "generate", dir});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("server.key"), HasSubstr("exists"), HasSubstr("--force")));
  EXPECT_EQ(ReadFile(dir + "/server.key"), secret);

  r = RunCli({"keys", "generate", dir, "--force"});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_NE(ReadFile(dir + "/server.key"), secret);
  EXPECT_EQ(Mode(dir + "/server.key"), 0600);
  EXPECT_NO_THROW((void)CurveOf(CurveConfig(dir), true));

  r = RunCli({"keys", "generate"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("DIR"));
  r = RunCli({"keys", "make", dir});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("generate"));
  r = RunCli({"keys", "generate", tmp.File("other"), "--clients", "0"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("--clients"));
}

TEST(Keys, ClientsMakesOnePairPerClientAllAuthorized) {
  testing::TempDir tmp;
  const std::string dir = tmp.File("keys");
  ASSERT_EQ(RunCli({"keys", "generate", dir, "--clients", "3"}).status, kExitOk);
  for (const char* f : {"client-1.key", "client-2.key", "client-3.key"}) {
    EXPECT_EQ(Mode(dir + "/" + f), 0600) << f;
  }
  EXPECT_FALSE(FileExists(dir + "/client.key"));
  // No default pair: each process must say which is its own.
  EXPECT_THAT(CurveError(CurveConfig(dir), false),
              AllOf(HasSubstr("cluster.client_key"), HasSubstr("client.key")));
  const auto o = CurveOf(CurveConfig(dir, "client_key = client-2.key\n"), true);
  ASSERT_EQ(o.authorized_clients.size(), 3u);
  EXPECT_EQ(o.authorized_clients[1], o.client_public_key);
  EXPECT_NE(o.authorized_clients[0], o.client_public_key);
}

TEST(Keys, BadKeyFilesAreConfigErrorsNamingKeyAndFile) {
  testing::TempDir tmp;
  const std::string dir = tmp.File("keys");
  ASSERT_EQ(RunCli({"keys", "generate", dir}).status, kExitOk);

  EXPECT_THAT(CurveError(CurveConfig(""), true), HasSubstr("cluster.keys_dir"));
  EXPECT_THAT(CurveError(CurveConfig(tmp.File("nowhere")), false),
              AllOf(HasSubstr("cluster.keys_dir"), HasSubstr("nowhere/server.pub")));

  const std::string authorized = ReadFile(dir + "/authorized_clients");
  WriteFileAtomic(dir + "/authorized_clients", authorized + "not-a-key\n");
  EXPECT_THAT(CurveError(CurveConfig(dir), true),
              AllOf(HasSubstr("cluster.keys_dir"), HasSubstr("authorized_clients:4")));
  EXPECT_EQ(CurveError(CurveConfig(dir), false), "");  // a worker does not read the list
  WriteFileAtomic(dir + "/authorized_clients", "# nobody\n");
  EXPECT_THAT(CurveError(CurveConfig(dir), true), HasSubstr("lists no client key"));
  WriteFileAtomic(dir + "/authorized_clients", authorized);

  const std::string server_key = ReadFile(dir + "/server.key");
  const std::size_t secret = server_key.find("secret-key = ");
  WriteFileAtomic(dir + "/server.key", server_key.substr(0, secret + 20) + "\n", 0600);
  const std::string truncated = CurveError(CurveConfig(dir), true);
  EXPECT_THAT(truncated, AllOf(HasSubstr("server.key:3"), HasSubstr("secret-key")));
  // The secret itself is never printed, not even a piece of it.
  EXPECT_THAT(truncated, ::testing::Not(HasSubstr(server_key.substr(secret + 13, 7))));

  // server.pub of another pair than server.key.
  WriteFileAtomic(dir + "/server.key", server_key, 0600);
  ASSERT_EQ(RunCli({"keys", "generate", tmp.File("other")}).status, kExitOk);
  fs::copy_file(tmp.File("other/server.pub"), dir + "/server.pub",
                fs::copy_options::overwrite_existing);
  EXPECT_THAT(CurveError(CurveConfig(dir), true), HasSubstr("is not the public key of"));

  // Through the CLI: one line, exit 2, before any process is started.
  testing::WriteTestFile(tmp.File("run.ini"), "[algorithm]\nname = agn\n");
  const CliResult r = RunCli({"launch", tmp.File("run.ini"), "--set", "cluster.curve=true", "--set",
                              "cluster.keys_dir=" + tmp.File("nowhere")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("cluster.keys_dir"), HasSubstr("server.pub")));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("pid")));
}

TEST(Keys, AsgdRunRefusesCurve) {
  testing::TempDir tmp;
  testing::WriteTestFile(tmp.File("run.ini"), "[experiment]\nout_dir = " + tmp.File("runs") + "\n");
  const CliResult r = RunCli({"run", tmp.File("run.ini"), "--set", "cluster.curve=true"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("cluster.curve"), HasSubstr("asgd launch")));
  EXPECT_FALSE(fs::exists(tmp.File("runs")));
}

}  // namespace
}  // namespace asgd::experiments
