// The `asgd` command line: exit statuses and the one-line messages for bad input.
#include "experiments/cli/cli.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "core/file_util.h"
#include "tests/support/test_util.h"

namespace asgd::experiments {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct CliResult {
  int status;
  std::string out;
  std::string err;
};

CliResult RunCli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int status = Main(args, out, err);
  return {status, out.str(), err.str()};
}

// Exactly one line on stderr.
bool OneLine(const std::string& s) {
  return !s.empty() && s.back() == '\n' && s.find('\n') == s.size() - 1;
}

// A small synthetic experiment that trains in well under a second.
std::string SyntheticConfig(const testing::TempDir& dir, const std::string& extra = "") {
  const std::string path = dir.File("synthetic.ini");
  testing::WriteTestFile(path,
                         "[experiment]\nname = cli-test\nepochs = 2\nprogress = off\n"
                         "log_level = error\nout_dir = " +
                             dir.File("runs") +
                             "\n[data]\ndataset = synthetic\nsynthetic_train = 2000\n"
                             "synthetic_test = 500\n[model]\nname = softmax\n"
                             "[algorithm]\nlearning_rate = 0.1\n" +
                             extra);
  return path;
}

TEST(Cli, HelpAndVersionSucceed) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--help"}, {"help"}, {"run", "--help"}, {"data", "--help"}, {"ps-check", "--help"},
           {"version"}}) {
    CliResult r = RunCli(args);
    EXPECT_EQ(r.status, kExitOk) << args[0];
    EXPECT_FALSE(r.out.empty());
    EXPECT_TRUE(r.err.empty()) << r.err;
  }
  CliResult keys = RunCli({"run", "--help-config"});
  EXPECT_EQ(keys.status, kExitOk);
  EXPECT_THAT(keys.out, AllOf(HasSubstr("learning_rate"), HasSubstr("[algorithm]")));
}

// `asgd ps-check` is a command with its own help; algorithm.name = ps_check, what it was
// before, is refused by every command that reads a config, in one line naming it.
TEST(Cli, PsCheckIsACommandAndNoLongerAnAlgorithmName) {
  CliResult r = RunCli({"ps-check", "--help"});
  EXPECT_EQ(r.status, kExitOk) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("asgd ps-check ps"), HasSubstr("asgd ps-check worker"),
                           HasSubstr("[check]")));
  for (const std::string role : {"ps", "worker"}) {
    r = RunCli({"ps-check", role, "--help"});
    EXPECT_EQ(r.status, kExitOk) << r.err;
    EXPECT_THAT(r.out, AllOf(HasSubstr("usage: asgd ps-check " + role), HasSubstr("--task")));
  }
  r = RunCli({"ps-check"});
  EXPECT_EQ(r.status, kExitBadInput);
  r = RunCli({"ps-check", "coordinator", "--config", "x.ini"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("coordinator"), HasSubstr("ps or worker")));
  r = RunCli({"ps-check", "ps"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("asgd ps-check ps --help"));

  testing::TempDir dir;
  const std::string path = SyntheticConfig(dir);
  for (const auto& command : std::vector<std::vector<std::string>>{
           {"run", path}, {"launch", path}, {"ps", "--config", path, "--task", "0"},
           {"worker", "--config", path, "--task", "0"}}) {
    std::vector<std::string> args = command;
    args.insert(args.end(), {"--set", "algorithm.name=ps_check"});
    r = RunCli(args);
    EXPECT_EQ(r.status, kExitBadInput) << command[0];
    EXPECT_TRUE(OneLine(r.err)) << r.err;
    EXPECT_THAT(r.err, AllOf(HasSubstr("algorithm.name"), HasSubstr("asgd ps-check")));
  }
  EXPECT_FALSE(fs::exists(dir.File("runs")));
}

TEST(Cli, UnknownCommandAndOptionAreBadInput) {
  CliResult r = RunCli({"rnu"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("rnu"), HasSubstr("run")));
  r = RunCli({"run", "x.ini", "--bogus"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("bogus"));
  r = RunCli({"run"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("CONFIG"));
}

TEST(Cli, BadConfigIsOneLineAndExitTwo) {
  testing::TempDir dir;
  const std::string path = SyntheticConfig(dir, "learning_rat = 0.1\n");
  CliResult r = RunCli({"run", path});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("algorithm.learning_rat"), HasSubstr("learning_rate")));

  r = RunCli({"run", SyntheticConfig(dir), "--set", "algorithm.batch_size=-3"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("algorithm.batch_size"), HasSubstr("-3")));

  r = RunCli({"run", dir.File("missing.ini")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("missing.ini"));
  // Nothing was written for runs that never started.
  EXPECT_FALSE(fs::exists(dir.File("runs")));
}

// Compression where the strategy pushes no update (issue 17): one line naming the key and
// the strategy, exit 2, before any run folder; likewise a bad compression key.
TEST(Cli, RefusedCompressionIsOneLineAndExitTwo) {
  testing::TempDir dir;
  for (const char* algorithm : {"sgd", "hogwild", "aeasgd", "model_averaging"}) {
    CliResult r =
        RunCli({"run", SyntheticConfig(dir), "--set", std::string("algorithm.name=") + algorithm,
                "--set", "compression.name=topk"});
    EXPECT_EQ(r.status, kExitBadInput) << algorithm;
    EXPECT_TRUE(OneLine(r.err)) << r.err;
    EXPECT_THAT(r.err, AllOf(HasSubstr("compression.name"), HasSubstr(algorithm)));
  }
  CliResult r = RunCli({"run", SyntheticConfig(dir), "--set", "algorithm.name=async_sgd", "--set",
                        "compression.name=qsgd", "--set", "compression.levels=0"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("compression.levels"));
  // qsgd's bucket and terngrad's clipping factor: one line naming the key.
  for (const char* bad : {"0", "-512", "1.5", "nan", "inf", "2000000000", "many"}) {
    r = RunCli({"run", SyntheticConfig(dir), "--set", "algorithm.name=async_sgd", "--set",
                "compression.name=qsgd", "--set", std::string("compression.bucket=") + bad});
    EXPECT_EQ(r.status, kExitBadInput) << bad;
    EXPECT_TRUE(OneLine(r.err)) << r.err;
    EXPECT_THAT(r.err, HasSubstr("compression.bucket")) << bad;
  }
  for (const char* bad : {"-1", "nan", "inf", "x"}) {
    r = RunCli({"run", SyntheticConfig(dir), "--set", "algorithm.name=async_sgd", "--set",
                "compression.name=terngrad", "--set", std::string("compression.clip=") + bad});
    EXPECT_EQ(r.status, kExitBadInput) << bad;
    EXPECT_TRUE(OneLine(r.err)) << r.err;
    EXPECT_THAT(r.err, HasSubstr("compression.clip")) << bad;
  }
  r = RunCli({"run", SyntheticConfig(dir), "--set", "algorithm.name=async_sgd", "--set",
              "compression.error_feedback=true"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("compression.error_feedback"));
  // signsgd_vote pushes signs: sign (or none) only.
  r = RunCli({"run", SyntheticConfig(dir), "--set", "algorithm.name=signsgd_vote", "--set",
              "compression.name=topk"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("compression.name"), HasSubstr("signsgd_vote"),
                           HasSubstr("sign")));
  EXPECT_FALSE(fs::exists(dir.File("runs")));
}

// signSGD with majority vote end to end on threads: 3 workers pushing one bit per
// coordinate through the sign compressor (Signum, β = 0.9) learn the synthetic problem.
TEST(Cli, SignSgdVoteTrainsThroughOneBitPushes) {
  testing::TempDir dir;
  CliResult r = RunCli({"run", SyntheticConfig(dir), "--set", "algorithm.name=signsgd_vote",
                        "--set", "algorithm.workers=3", "--set", "algorithm.learning_rate=0.01",
                        "--set", "algorithm.sign_momentum=0.9", "--set", "compression.name=sign"});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  const std::string at = "final test accuracy: ";
  ASSERT_NE(r.out.find(at), std::string::npos) << r.out;
  EXPECT_GE(std::stod(r.out.substr(r.out.find(at) + at.size())), 0.8) << r.out;
}

TEST(Cli, RunTrainsAndReportsTheRunFolder) {
  testing::TempDir dir;
  CliResult r = RunCli({"run", SyntheticConfig(dir), "--set", "experiment.seed=5"});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("final test accuracy: "), HasSubstr("run folder: ")));
  const std::string folder = r.out.substr(r.out.find("run folder: ") + 12);
  const std::string path = folder.substr(0, folder.find('\n'));
  EXPECT_TRUE(fs::exists(path + "/convergence.csv")) << path;
  EXPECT_NE(path.find("cli-test-s5"), std::string::npos) << path;
}

// Issue 21 item 3: Goyal et al.'s linear scaling is for updates that aggregate mini-batches.
// An asynchronous strategy with it is refused in one line before training (it used to run
// at workers x the rate); sync_sgd keeps it.
TEST(Cli, LinearScalingIsRefusedForAsynchronousStrategies) {
  testing::TempDir dir;
  for (const char* name : {"async_sgd", "downpour", "easgd", "dc_asgd"}) {
    CliResult r = RunCli({"run", SyntheticConfig(dir, "workers = 2\nlinear_scaling = true\n"),
                          "--set", std::string("algorithm.name=") + name});
    EXPECT_EQ(r.status, kExitBadInput) << name << r.out << r.err;
    EXPECT_TRUE(OneLine(r.err)) << r.err;
    EXPECT_THAT(r.err, AllOf(HasSubstr("algorithm.linear_scaling"), HasSubstr(name),
                             HasSubstr("sync_sgd")));
  }
  EXPECT_FALSE(fs::exists(dir.File("runs")));
  CliResult r = RunCli({"run", SyntheticConfig(dir, "workers = 2\nlinear_scaling = true\n"),
                        "--set", "algorithm.name=sync_sgd", "--set", "experiment.epochs=1"});
  EXPECT_EQ(r.status, kExitOk) << r.err;
}

// Issue 22: the shard servers' per-peer bounds are config keys, validated in one line
// naming the key (the reply budget against the shard's size when the server starts).
TEST(Cli, ServerBoundKeysAreValidated) {
  testing::TempDir dir;
  const std::string config = SyntheticConfig(dir, "name = async_sgd\nworkers = 2\n");
  for (const std::string set :
       {"cluster.max_queued_reply_bytes=100", "cluster.max_barriers_per_peer=0",
        "cluster.barrier_timeout_s=-1"}) {
    CliResult r = RunCli({"run", config, "--set", set});
    EXPECT_EQ(r.status, kExitBadInput) << set;
    EXPECT_TRUE(OneLine(r.err)) << r.err;
    EXPECT_THAT(r.err, HasSubstr(set.substr(0, set.find('=')))) << r.err;
  }
  CliResult r = RunCli({"run", config, "--set", "cluster.max_queued_reply_bytes=1048576", "--set",
                        "cluster.barrier_timeout_s=5", "--set", "cluster.max_barriers_per_peer=2"});
  EXPECT_EQ(r.status, kExitOk) << r.err;
}

// cluster.chunk_bytes: 0 (never chunk) or at least 64 KiB; anything else is one line
// naming the key, exit 2, before the run starts.
TEST(Cli, ChunkBytesIsValidated) {
  testing::TempDir dir;
  const std::string config = SyntheticConfig(dir, "name = async_sgd\nworkers = 2\n");
  for (const std::string set :
       {"cluster.chunk_bytes=-1", "cluster.chunk_bytes=4096", "cluster.chunk_bytes=1.5"}) {
    CliResult r = RunCli({"run", config, "--set", set});
    EXPECT_EQ(r.status, kExitBadInput) << set;
    EXPECT_TRUE(OneLine(r.err)) << r.err;
    EXPECT_THAT(r.err, HasSubstr("cluster.chunk_bytes")) << r.err;
    if (set.ends_with("4096")) {
      EXPECT_THAT(r.err, HasSubstr("0 (never chunk) or at least 65536 bytes")) << r.err;
    }
  }
  for (const std::string set : {"cluster.chunk_bytes=0", "cluster.chunk_bytes=65536"}) {
    CliResult r = RunCli({"run", config, "--set", set});
    EXPECT_EQ(r.status, kExitOk) << set << ": " << r.err;
  }
}

// An [algorithm] key the strategy does not read (sgd has no window): one warning line and
// provenance.json's ignored_keys; --strict refuses the config before training.
TEST(Cli, AnIgnoredAlgorithmKeyWarnsOrWithStrictFails) {
  testing::TempDir dir;
  const std::string config = SyntheticConfig(dir, "window = 4\n");
  CliResult r = RunCli({"run", config});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("warning"), HasSubstr("algorithm.window")));
  const std::string folder = r.out.substr(r.out.find("run folder: ") + 12);
  const auto provenance =
      nlohmann::json::parse(ReadFile(folder.substr(0, folder.find('\n')) + "/provenance.json"));
  EXPECT_EQ(provenance["ignored_keys"], nlohmann::json::array({"algorithm.window"}));

  r = RunCli({"run", config, "--strict"});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("algorithm.window"), HasSubstr("--strict")));

  r = RunCli({"run", SyntheticConfig(dir), "--strict"});  // learning_rate: sgd reads it
  EXPECT_EQ(r.status, kExitOk) << r.err;
  EXPECT_EQ(r.err, "");

  // signsgd_vote reads weight_decay (the reference Signum's L2 inside the momentum), so it
  // runs beside SGD runs with λ = 5e-4.
  r = RunCli({"run",
              SyntheticConfig(dir, "name = signsgd_vote\nworkers = 3\nweight_decay = 5e-4\n"),
              "--strict"});
  EXPECT_EQ(r.status, kExitOk) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST(Cli, NanLossStopsTheRunWithStatusTwoAndKeepsTheCsv) {
  testing::TempDir dir;
  // A learning rate this large overflows the MLP's weights within a few steps.
  CliResult r = RunCli({"run", SyntheticConfig(dir), "--set", "algorithm.learning_rate=1e30",
                        "--set", "model.name=mlp", "--set", "model.hidden=16"});
  EXPECT_EQ(r.status, kExitBadInput) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("run stopped: "));
  std::vector<fs::path> runs(fs::directory_iterator(dir.File("runs")), {});
  ASSERT_EQ(runs.size(), 1u);
  std::string provenance;
  {
    std::ifstream in(runs[0] / "provenance.json");
    provenance.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_THAT(provenance, HasSubstr("\"status\": \"failed\""));
  EXPECT_TRUE(fs::exists(runs[0] / "convergence.csv"));
}

// Writes a gzip file holding `content`.
void WriteGzip(const std::string& path, const std::string& content) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, content.data(), static_cast<unsigned>(content.size())),
            static_cast<int>(content.size()));
  gzclose(f);
}

TEST(Cli, CorruptDataFileIsOneLineNamingTheFile) {
  testing::TempDir dir;
  fs::create_directories(dir.File("data/mnist"));
  // A truncated IDX image file: the header promises 60000 images, the file holds none.
  std::string header = {0, 0, 8, 3, 0, 0, static_cast<char>(0xEA), 0x60, 0, 0, 0, 28, 0, 0, 0, 28};
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    WriteGzip(dir.File(std::string("data/mnist/") + name), header);
  }
  const std::string config = dir.File("mnist.ini");
  testing::WriteTestFile(
      config, "[experiment]\nprogress = off\nout_dir = " + dir.File("runs") +
                  "\n[data]\ndataset = mnist\nverify = false\ndir = " + dir.File("data") + "\n");
  CliResult r = RunCli({"run", config});
  EXPECT_EQ(r.status, kExitBadInput) << r.out;
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("-idx"));

  EXPECT_THAT(r.err, HasSubstr("train-images-idx3-ubyte.gz"));
}

TEST(Cli, BadLibsvmFilesAreOneLineNamingFileAndLine) {
  testing::TempDir dir;
  fs::create_directories(dir.File("data/a9a"));
  testing::WriteTestFile(dir.File("data/a9a/a9a"), "+1 3:1 7:1\n-1 0:1\n");
  testing::WriteTestFile(dir.File("data/a9a/a9a.t"), "+1 3:1\n");
  const std::string config = dir.File("a9a.ini");
  const std::string common =
      "[experiment]\nprogress = off\nout_dir = " + dir.File("runs") +
      "\n[model]\nname = logreg\n[data]\ndataset = a9a\ndir = " + dir.File("data") + "\n";
  // Verification on (the default): the content is not a9a's.
  testing::WriteTestFile(config, common);
  CliResult r = RunCli({"run", config});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("a9a/a9a"), HasSubstr("sha256 mismatch")));
  // Verification off: the parser finds index 0 on line 2 (LIBSVM indices start at 1), named as
  // file:line.
  testing::WriteTestFile(config, common + "verify = false\n");
  r = RunCli({"run", config});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("a9a/a9a:2:"), HasSubstr("index 0")));
}

// CIFAR-10's bad input (issue 31 item 5): a file of the wrong size or with a label >= 10,
// and an archive that fails its checksum, are one line naming the file and what was
// expected, exit status 2, before any training: no run folder, nothing fetched.
std::string CifarRecordsBytes(int64_t records, int bad_label_at = -1) {
  std::string out;
  out.reserve(static_cast<std::size_t>(records * 3073));
  for (int64_t i = 0; i < records; ++i) {
    out.push_back(static_cast<char>(i == bad_label_at ? 10 : i % 10));
    out.append(3072, static_cast<char>(i % 251));
  }
  return out;
}

std::string CifarConfig(const testing::TempDir& dir, const std::string& extra = "") {
  const std::string config = dir.File("cifar.ini");
  testing::WriteTestFile(config, "[experiment]\nprogress = off\nout_dir = " + dir.File("runs") +
                                     "\n[data]\ndataset = cifar10\ndir = " + dir.File("data") +
                                     "\n" + extra);
  return config;
}

void WriteCifarFiles(const testing::TempDir& dir, int64_t records) {
  fs::create_directories(dir.File("data/cifar10"));
  for (const char* name : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                           "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"}) {
    testing::WriteTestFile(dir.File(std::string("data/cifar10/") + name),
                           CifarRecordsBytes(records));
  }
}

TEST(Cli, Cifar10FilesOfTheWrongSizeAreOneLineAndNoRunFolder) {
  testing::TempDir dir;
  WriteCifarFiles(dir, 2);
  // Two records where 10,000 are expected: the structure is checked before the checksum,
  // verified (the default) or not.
  CliResult r = RunCli({"run", CifarConfig(dir)});
  EXPECT_EQ(r.status, kExitBadInput) << r.out;
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cifar10/data_batch_1.bin: holds 2 records"));
  r = RunCli({"run", CifarConfig(dir, "verify = false\n")});
  EXPECT_EQ(r.status, kExitBadInput) << r.out;
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("cifar10/data_batch_1.bin"),
                           HasSubstr("holds 2 records (6146 bytes) of CIFAR data: expected 10000 "
                                     "records (30730000 bytes)")));
  // Not a whole number of records.
  testing::WriteTestFile(dir.File("data/cifar10/data_batch_1.bin"), std::string(100, '\1'));
  r = RunCli({"run", CifarConfig(dir, "verify = false\n")});
  EXPECT_EQ(r.status, kExitBadInput) << r.out;
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("cifar10/data_batch_1.bin"),
                           HasSubstr("100 bytes are not a whole number of 3073-byte CIFAR records"),
                           HasSubstr("expected 10000 records")));
  EXPECT_FALSE(fs::exists(dir.File("runs")));
}

TEST(Cli, ACifar10LabelOfTenIsOneLineAndNoRunFolder) {
  testing::TempDir dir;
  WriteCifarFiles(dir, 1);
  // The right size (stored gzip-compressed, as the loader accepts), one label out of range.
  fs::remove(dir.File("data/cifar10/data_batch_1.bin"));
  WriteGzip(dir.File("data/cifar10/data_batch_1.bin.gz"), CifarRecordsBytes(10000, 4321));
  CliResult r = RunCli({"run", CifarConfig(dir, "verify = false\n")});
  EXPECT_EQ(r.status, kExitBadInput) << r.out;
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err,
              AllOf(HasSubstr("cifar10/data_batch_1.bin.gz"), HasSubstr("label 10 of record 4321"),
                    HasSubstr("expected a class below 10")));
  // Verified (the default), a file of the right size fails its checksum first.
  r = RunCli({"run", CifarConfig(dir)});
  EXPECT_EQ(r.status, kExitBadInput) << r.out;
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err,
              AllOf(HasSubstr("cifar10/data_batch_1.bin.gz: sha256 mismatch: expected "
                              "cee916563c9f80d84e3cc88e17fdc0941787f1244f00a67874d45b261883ada5"),
                    HasSubstr("`asgd data fetch cifar10`")));
  EXPECT_FALSE(fs::exists(dir.File("runs")));
}

TEST(Cli, DataFetchCifar10WithAFailedChecksumWritesNothing) {
  testing::TempDir dir;
  fs::create_directories(dir.File("server"));
  testing::WriteTestFile(dir.File("server/cifar-10-binary.tar.gz"), "not the CIFAR-10 archive");
  CliResult r = RunCli({"data", "fetch", "cifar10", "--dir", dir.File("out"), "--url",
                        "file://" + dir.File("server")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("cifar10/cifar-10-binary.tar.gz"),
                           HasSubstr("md5 mismatch: expected c32a1d4ab5d03f1284b67883e8d87530 "
                                     "(as published)"),
                           HasSubstr("170052171 bytes")));
  EXPECT_TRUE(fs::is_empty(dir.File("out/cifar10")));
}

// Fake MNIST-shaped IDX files (random-looking pixels), gzip-compressed.
void WriteFakeIdx(const testing::TempDir& dir, uint32_t train, uint32_t test) {
  fs::create_directories(dir.File("data/mnist"));
  auto be = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  for (const auto& [prefix, n] :
       {std::pair<std::string, uint32_t>{"train", train}, {"t10k", test}}) {
    std::string images = be(2051) + be(n) + be(28) + be(28);
    std::string labels = be(2049) + be(n);
    for (uint32_t i = 0; i < n; ++i) {
      labels.push_back(static_cast<char>(i % 10));
      for (uint32_t p = 0; p < 784; ++p)
        images.push_back(static_cast<char>((i * 37 + p * 11) % 256));
    }
    WriteGzip(dir.File("data/mnist/" + prefix + "-images-idx3-ubyte.gz"), images);
    WriteGzip(dir.File("data/mnist/" + prefix + "-labels-idx1-ubyte.gz"), labels);
  }
}

std::string RunFolder(const CliResult& r) {
  const std::string folder = r.out.substr(r.out.find("run folder: ") + 12);
  return folder.substr(0, folder.find('\n'));
}

TEST(Cli, NormalisationAndAugmentationTrainAndAreRecorded) {
  testing::TempDir dir;
  WriteFakeIdx(dir, 200, 50);
  const std::string config = dir.File("mnist.ini");
  testing::WriteTestFile(
      config,
      "[experiment]\nprogress = off\nepochs = 1\nlog_level = error\nout_dir = " + dir.File("runs") +
          "\n[data]\ndataset = mnist\nverify = false\ndir = " + dir.File("data") +
          "\nnormalize = per_channel\nrandom_crop_padding = 4\nrandom_flip = true\n"
          "[model]\nname = softmax\n[algorithm]\nbatch_size = 16\n");
  // One worker (the sequential runner) and two worker threads (the shared worker loop).
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{},
        {"--set", "algorithm.name=async_sgd", "--set", "algorithm.workers=2"}}) {
    std::vector<std::string> args = {"run", config};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = RunCli(args);
    ASSERT_EQ(r.status, kExitOk) << r.err;
    // config.ini records the statistics computed from the training split.
    const std::string ini = ReadFile(RunFolder(r) + "/config.ini");
    EXPECT_THAT(ini, HasSubstr("normalize = per_channel"));
    EXPECT_THAT(ini, HasSubstr("random_crop_padding = 4"));
    EXPECT_THAT(ini, ::testing::ContainsRegex("\nmean = 0\\.[0-9]+\n"));
    EXPECT_THAT(ini, ::testing::ContainsRegex("\nstd = 0\\.[0-9]+\n"));
  }
  // Given statistics are kept as given.
  CliResult r = RunCli({"run", config, "--set", "data.mean=0.5", "--set", "data.std=0.25"});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  const std::string ini = ReadFile(RunFolder(r) + "/config.ini");
  EXPECT_THAT(ini, AllOf(HasSubstr("\nmean = 0.5\n"), HasSubstr("\nstd = 0.25\n")));
}

TEST(Cli, NormalisationAndAugmentationOfNonImagesAreOneLineAndNoRunFolder) {
  testing::TempDir dir;
  for (const std::string set : {"data.random_flip=true", "data.random_crop_padding=2",
                                "data.normalize=per_channel", "data.mean=0.5"}) {
    CliResult r = RunCli({"run", SyntheticConfig(dir), "--set", set});
    EXPECT_EQ(r.status, kExitBadInput) << set;
    EXPECT_TRUE(OneLine(r.err)) << r.err;
    EXPECT_THAT(r.err, HasSubstr(set.substr(0, set.find('='))));
  }
  WriteFakeIdx(dir, 20, 5);
  const std::string config = dir.File("mnist.ini");
  testing::WriteTestFile(
      config, "[experiment]\nprogress = off\nout_dir = " + dir.File("runs") +
                  "\n[data]\ndataset = mnist\nverify = false\ndir = " + dir.File("data") + "\n");
  for (const std::string set : {"data.random_crop_padding=29", "data.std=0.5"}) {
    CliResult r = RunCli({"run", config, "--set", set, "--set", "data.normalize=per_channel"});
    EXPECT_EQ(r.status, kExitBadInput) << set;
    EXPECT_TRUE(OneLine(r.err)) << r.err;
    EXPECT_THAT(r.err, HasSubstr(set.substr(0, set.find('='))));
  }
  EXPECT_FALSE(fs::exists(dir.File("runs")));
}

TEST(Cli, DataFetchFromAFileUrl) {
  testing::TempDir dir;
  // a9a's files are small enough to copy; the source is the reference data folder.
  ASGD_REQUIRE_DATA();
  const std::string source = "file://" + testing::DataDir() + "/a9a";
  CliResult r = RunCli({"data", "fetch", "a9a", "--dir", dir.File("out"), "--url", source});
  ASSERT_EQ(r.status, kExitOk) << r.err;
  EXPECT_TRUE(fs::exists(dir.File("out/a9a/a9a")));

  r = RunCli({"data", "fetch", "a9a", "--dir", dir.File("out2"), "--url",
              "file://" + dir.File("nowhere")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_TRUE(OneLine(r.err)) << r.err;
  EXPECT_FALSE(fs::exists(dir.File("out2/a9a/a9a")));

  r = RunCli({"data", "fetch", "imagenet", "--dir", dir.File("out3")});
  EXPECT_EQ(r.status, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("imagenet"));
}

}  // namespace
}  // namespace asgd::experiments
