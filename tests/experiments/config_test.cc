// The experiment config: defaults, types, ranges, overrides and the messages users see.
#include "experiments/config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "algorithms/strategy.h"
#include "core/error.h"
#include "experiments/config/cluster_plan.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/setup.h"

namespace asgd::experiments {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The message of the ConfigError that parsing `ini` with `overrides` throws.
std::string ErrorOf(const std::string& ini, const std::vector<std::string>& overrides = {}) {
  try {
    Config::FromString(ini, overrides, ExperimentSchema(), "test.ini");
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << ini;
  return "";
}

TEST(Config, EveryKeyHasAValidDefaultAndADescription) {
  const Schema& schema = ExperimentSchema();
  ASSERT_GT(schema.keys().size(), 30u);
  for (const KeySpec& key : schema.keys()) {
    EXPECT_FALSE(key.doc.empty()) << key.name;
    EXPECT_EQ(ValidateValue(key, key.default_value), "") << key.name;
  }
  Config defaults = Config::Defaults(schema);
  EXPECT_EQ(defaults.String("algorithm.name"), "sgd");
  EXPECT_EQ(defaults.Int("algorithm.batch_size"), 64);
  EXPECT_FALSE(defaults.IsExplicit("algorithm.batch_size"));
}

// Strategy::keys names schema keys, and the algorithm.name choice lists every strategy.
TEST(Config, EveryStrategyReadsSchemaKeysAndIsAChoice) {
  const Schema& schema = ExperimentSchema();
  const KeySpec* name = schema.Find("algorithm.name");
  ASSERT_NE(name, nullptr);
  for (const algorithms::Strategy* s : algorithms::Strategies()) {
    EXPECT_EQ(ValidateValue(*name, s->name), "") << s->name;
    for (const std::string& key : s->keys) {
      EXPECT_NE(schema.Find(key), nullptr) << s->name << " reads " << key;
      EXPECT_EQ(key.rfind("algorithm.", 0), 0u) << s->name << " reads " << key;
    }
  }
}

// A key the chosen strategy does not read is reported (the known cases), a key it
// reads or a key left at its default is not.
TEST(Config, IgnoredAlgorithmKeysAreTheSetKeysTheStrategyDoesNotRead) {
  auto ignored = [](const std::string& ini) {
    return IgnoredAlgorithmKeys(Config::FromString(ini, {}, ExperimentSchema()));
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(ignored("[algorithm]\nname = downpour\nfetch_window = 5\nwindow = 5\n"), V{});
  EXPECT_EQ(ignored("[algorithm]\nname = sync_sgd\nfetch_window = 5\nwindow = 5\n"),
            (V{"algorithm.fetch_window", "algorithm.window"}));
  // dc_asgd decays its server rate with lr_decay but has no local optimizer.
  EXPECT_EQ(ignored("[algorithm]\nname = dc_asgd\noptimizer = momentum\nlr_decay = 0.9\n"
                    "dc_lambda = 0.1\nwarmup_epochs = 1\n"),
            (V{"algorithm.optimizer", "algorithm.warmup_epochs"}));
  EXPECT_EQ(ignored("[algorithm]\nname = aeamsgd\nweight_decay = 0.1\nmomentum = 0.5\n"),
            V{"algorithm.weight_decay"});
  // signsgd_vote adds λθ to the gradient whose sign it pushes (the reference Signum's L2),
  // but has no local optimizer.
  EXPECT_EQ(ignored("[algorithm]\nname = signsgd_vote\nweight_decay = 5e-4\noptimizer = adam\n"),
            V{"algorithm.optimizer"});
  EXPECT_EQ(ignored("[algorithm]\nname = sgd\nlearning_rate = 0.1\n"), V{});
  EXPECT_EQ(ignored("[algorithm]\nname = adag\nssp_bound = 2\n"), V{"algorithm.ssp_bound"});
}

// Every value algorithm.name takes is a strategy of the registry (issue 32: ps_check, the
// check of a deployed parameter server, is the command `asgd ps-check`); the old value is
// refused in one line that names the command.
TEST(Config, AlgorithmNameIsAStrategyAndPsCheckPointsToItsCommand) {
  const KeySpec* name = ExperimentSchema().Find("algorithm.name");
  ASSERT_NE(name, nullptr);
  EXPECT_EQ(name->choices, algorithms::StrategyNames());
  try {
    (void)Config::FromString("[algorithm]\nname = ps_check\n", {}, ExperimentSchema());
    ADD_FAILURE() << "algorithm.name = ps_check was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "algorithm.name");
    EXPECT_THAT(e.what(), HasSubstr("asgd ps-check"));
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  // Any other stranger still gets the list of strategies.
  try {
    (void)Config::FromString("[algorithm]\nname = sgdd\n", {}, ExperimentSchema());
    ADD_FAILURE() << "algorithm.name = sgdd was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("one of"), HasSubstr("async_sgd")));
  }
}

// The config.ini of a run made before [check] lists the retired algorithm.check_* keys at
// their defaults: it still loads (an old run folder reruns and resumes). A value other than
// the old default is an error naming what replaced the key.
TEST(Config, RetiredKeysAtTheirOldDefaultsLoadAndOthersAreRefused) {
  const Config c = Config::FromString(
      "[algorithm]\nname = downpour\ncheck_pushes = 20\ncheck_seconds = 0\n"
      "check_report_every_s = 5\n",
      {}, ExperimentSchema());
  EXPECT_EQ(c.String("algorithm.name"), "downpour");
  EXPECT_EQ(ExperimentSchema().Find("algorithm.check_pushes"), nullptr);
  (void)Config::FromString("[network]\nserver_ns_per_byte = (preset)\n", {}, ExperimentSchema());
  try {
    (void)Config::FromString("[network]\nserver_ns_per_byte = 3\n", {}, ExperimentSchema());
    ADD_FAILURE() << "server_ns_per_byte = 3 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("network.server_ns_per_element"));
  }
  try {
    (void)Config::FromString("[algorithm]\ncheck_seconds = 600\n", {}, ExperimentSchema());
    ADD_FAILURE() << "a retired key with a value of its own was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "algorithm.check_seconds");
    EXPECT_THAT(e.what(), HasSubstr("check.seconds"));
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(Config, ReadsTypedValuesAndOverridesWin) {
  Config c = Config::FromString(
      "[algorithm]\nlearning_rate = 0.5\nbatch_size = 32\n[model]\nhidden = 10,20\n"
      "[data]\nverify = no\n",
      {"algorithm.batch_size=16"}, ExperimentSchema());
  EXPECT_DOUBLE_EQ(c.Double("algorithm.learning_rate"), 0.5);
  EXPECT_EQ(c.Int("algorithm.batch_size"), 16);
  EXPECT_EQ(c.IntList("model.hidden"), (std::vector<int64_t>{10, 20}));
  EXPECT_FALSE(c.Bool("data.verify"));
  EXPECT_TRUE(c.IsExplicit("algorithm.learning_rate"));
  EXPECT_TRUE(c.IsExplicit("algorithm.batch_size"));
}

TEST(Config, UnknownKeyNamesItAndSuggestsTheClosest) {
  EXPECT_THAT(ErrorOf("[algorithm]\nlearning_rat = 0.1\n"),
              AllOf(HasSubstr("algorithm.learning_rat"), HasSubstr("algorithm.learning_rate")));
  EXPECT_THAT(ErrorOf("", {"algorithm.bach_size=3"}),
              AllOf(HasSubstr("algorithm.bach_size"), HasSubstr("algorithm.batch_size")));
}

TEST(Config, WrongTypeNamesKeyValueAndExpectation) {
  std::string msg = ErrorOf("[algorithm]\nbatch_size = many\n");
  EXPECT_THAT(msg,
              AllOf(HasSubstr("algorithm.batch_size"), HasSubstr("many"), HasSubstr("integer")));
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  EXPECT_THAT(ErrorOf("[algorithm]\nlearning_rate = fast\n"),
              AllOf(HasSubstr("algorithm.learning_rate"), HasSubstr("fast"), HasSubstr("number")));
  EXPECT_THAT(ErrorOf("[data]\nverify = perhaps\n"),
              AllOf(HasSubstr("data.verify"), HasSubstr("perhaps")));
}

TEST(Config, OutOfRangeNamesTheBound) {
  EXPECT_THAT(ErrorOf("[algorithm]\nlearning_rate = 0\n"),
              AllOf(HasSubstr("algorithm.learning_rate"), HasSubstr("> 0")));
  EXPECT_THAT(ErrorOf("[algorithm]\nlearning_rate = nan\n"), HasSubstr("algorithm.learning_rate"));
  EXPECT_THAT(ErrorOf("[algorithm]\nmomentum = 1\n"), HasSubstr("algorithm.momentum"));
  EXPECT_THAT(ErrorOf("[algorithm]\nbatch_size = 0\n"), HasSubstr("algorithm.batch_size"));
  EXPECT_THAT(ErrorOf("[model]\nhidden = 10,-1\n"), HasSubstr("model.hidden"));
  EXPECT_THAT(ErrorOf("[model]\nname = transformer\n"),
              AllOf(HasSubstr("model.name"), HasSubstr("transformer"), HasSubstr("mlp")));
  // Whole-number bounds in full, not rounded to 6 digits.
  EXPECT_THAT(ErrorOf("[algorithm]\nbatch_size = 0\n"), HasSubstr("in [1, 1048576]"));
  EXPECT_THAT(ErrorOf("[compression]\nbucket = 0\n"),
              AllOf(HasSubstr("compression.bucket"), HasSubstr("in [1, 1073741824]")));
  EXPECT_THAT(ErrorOf("[compression]\nclip = -1\n"),
              AllOf(HasSubstr("compression.clip"), HasSubstr(">= 0")));
}

TEST(Config, MalformedOverrideAndMissingFile) {
  EXPECT_THAT(ErrorOf("", {"algorithm.learning_rate"}), HasSubstr("section.key=value"));
  try {
    Config::FromFile("/nonexistent/asgd.ini", {}, ExperimentSchema());
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/asgd.ini"));
  }
}

// Regression (config_fuzz): a key or line holding a control character went raw into the
// message, and a '\r' there returned the cursor and hid the start of the line.
TEST(Config, ControlCharactersFromTheInputAreEscapedInMessages) {
  for (const std::string& msg :
       {ErrorOf("[model]\nna\rme = mlp\n"), ErrorOf("", {"model.na\rme=mlp"})}) {
    EXPECT_EQ(msg.find_first_of("\r\n"), std::string::npos) << msg;
    EXPECT_THAT(msg, HasSubstr("'model.na\\rme': unknown key")) << msg;
  }
  const std::string line = ErrorOf("[model]\nhid\rden\n");
  EXPECT_EQ(line.find_first_of("\r\n"), std::string::npos) << line;
  EXPECT_THAT(line, AllOf(HasSubstr("test.ini"), HasSubstr("hid\\rden")));
  // Printable names are shown as they are.
  EXPECT_THAT(ErrorOf("[model]\nnme = mlp\n"), HasSubstr(": model.nme: unknown key"));
}

// Regression (config_fuzz): --set could give a value that config.ini cannot hold; '#'
// came back cut short ("a#b" as "a") and a line break made config.ini unparseable.
TEST(Config, ValuesAConfigFileCannotHoldAreRefused) {
  EXPECT_THAT(ErrorOf("", {"experiment.name=run#2"}),
              AllOf(HasSubstr("experiment.name = 'run#2'"), HasSubstr("without '#'")));
  const std::string msg = ErrorOf("", {"cluster.ps=a:1\nb:2"});
  EXPECT_THAT(msg, AllOf(HasSubstr("cluster.ps = 'a:1\\nb:2'"), HasSubstr("line break")));
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  // In a file, '#' starts a comment as before.
  Config c = Config::FromString("[experiment]\nname = run # 2\n", {}, ExperimentSchema());
  EXPECT_EQ(c.String("experiment.name"), "run");
  Config back = Config::FromString(c.ResolvedIni(), {}, ExperimentSchema());
  EXPECT_EQ(back.String("experiment.name"), "run");
}

// Synchronous elastic averaging with zero gradients moves every worker's distance to the
// centre d = x_i - x̃ to d·(1 - α(n + 1)) per exchange when all workers sit on the same side
// (docs/algorithms.md#easgd): it contracts only for α(n + 1) < 2 (β = nα, so α + β < 2).
// A moving rate past it diverged; it is refused in one line naming the keys and the
// condition. The default α = 0.9/n gives α(n + 1) <= 1.8.
TEST(Config, EasgdMovingRatePastTheStabilityConditionIsRefused) {
  auto error_of = [](const std::string& algorithm) -> std::string {
    try {
      (void)BuildStrategyOptions(
          Config::FromString("[algorithm]\n" + algorithm, {}, ExperimentSchema()), 0);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  // n = 4: α(n + 1) = 2 at α = 0.4 (factor -1: the distance oscillates, never shrinks).
  const std::string msg = error_of("name = easgd\nworkers = 4\nelastic_alpha = 0.4\n");
  EXPECT_THAT(msg, AllOf(HasSubstr("algorithm.elastic_alpha = '0.4'"),
                         HasSubstr("algorithm.workers"), HasSubstr("< 2")));
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_THAT(error_of("name = easgd\nworkers = 2\nelastic_alpha = 0.9\n"),
              HasSubstr("algorithm.elastic_alpha = '0.9'"));
  EXPECT_THAT(error_of("name = easgd\nworkers = 1\nelastic_alpha = 1\n"),
              HasSubstr("algorithm.elastic_alpha = '1'"));
  // Just inside, and the defaults.
  EXPECT_EQ(error_of("name = easgd\nworkers = 4\nelastic_alpha = 0.39\n"), "");
  EXPECT_EQ(error_of("name = easgd\nworkers = 1\n"), "");
  EXPECT_EQ(error_of("name = easgd\nworkers = 64\n"), "");
  // The asynchronous variants exchange one worker at a time (d·(1 - 2α)): not this bound,
  // but 0 < α < 1, past which the worker and the centre swap at every exchange.
  EXPECT_EQ(error_of("name = aeasgd\nworkers = 4\nelastic_alpha = 0.5\n"), "");
  EXPECT_EQ(error_of("name = aeamsgd\nworkers = 4\nelastic_alpha = 0.99\n"), "");
  for (const std::string name : {"aeasgd", "aeamsgd"}) {
    const std::string refused = error_of("name = " + name + "\nworkers = 1\nelastic_alpha = 1\n");
    EXPECT_THAT(refused, AllOf(HasSubstr("algorithm.elastic_alpha = '1'"),
                               HasSubstr("0 < elastic_alpha < 1 with " + name)));
    EXPECT_EQ(refused.find('\n'), std::string::npos) << refused;
  }
}

TEST(Config, ResolvedIniParsesBackToTheSameValues) {
  Config c = Config::FromString("[algorithm]\nlearning_rate = 0.25\n[model]\nname = softmax\n",
                                {"experiment.seed=7"}, ExperimentSchema());
  Config back = Config::FromString(c.ResolvedIni(), {}, ExperimentSchema());
  for (const KeySpec& key : ExperimentSchema().keys()) {
    EXPECT_EQ(back.Raw(key.name), c.Raw(key.name)) << key.name;
  }
}

// The roles read the [cluster] keys through the plan: every key lands in its field, and
// the addresses a launcher hands its roles round-trip through the config.
TEST(ClusterPlan, ReadsEveryClusterKeyTyped) {
  const Config config = Config::FromString(
      "[cluster]\nps = a:1,b:2\nworker = c:3\ncoordinator = d:4\nevaluator = e:5\n"
      "launch_transport = ipc\nhosts = h1,h2\nbase_port = 30000\nshards = 3\n"
      "placement = greedy\ntimeout_s = 2.5\nreport_interval_s = 0.2\n"
      "heartbeat_timeout_s = 7\non_worker_loss = fail\nbind_host = *\n"
      "allow_plain_remote = true\nstop_servers = false\ncurve = true\nkeys_dir = k\n"
      "client_key = client-2.key\ntransport = memory\n",
      {}, ExperimentSchema());
  const ClusterPlan p = ClusterPlan::FromConfig(config);
  EXPECT_EQ(p.ps, "a:1,b:2");
  EXPECT_EQ(p.worker, "c:3");
  EXPECT_EQ(p.coordinator, "d:4");
  EXPECT_EQ(p.evaluator, "e:5");
  EXPECT_EQ(p.launch_transport, "ipc");
  EXPECT_EQ(p.hosts, "h1,h2");
  EXPECT_EQ(p.base_port, 30000);
  EXPECT_EQ(p.shards, 3);
  EXPECT_EQ(p.placement, "greedy");
  EXPECT_DOUBLE_EQ(p.timeout_s, 2.5);
  EXPECT_DOUBLE_EQ(p.report_interval_s, 0.2);
  EXPECT_DOUBLE_EQ(p.heartbeat_timeout_s, 7);
  EXPECT_TRUE(p.fail_on_worker_loss);
  EXPECT_EQ(p.bind_host, "*");
  EXPECT_TRUE(p.allow_plain_remote);
  EXPECT_FALSE(p.stop_servers);
  EXPECT_TRUE(p.curve);
  EXPECT_EQ(p.keys_dir, "k");
  EXPECT_EQ(p.client_key, "client-2.key");
  EXPECT_EQ(p.transport, "memory");

  const ClusterPlan defaults = ClusterPlan::FromConfig(Config::Defaults(ExperimentSchema()));
  EXPECT_FALSE(defaults.fail_on_worker_loss);  // on_worker_loss = continue
  EXPECT_TRUE(defaults.stop_servers);
  EXPECT_FALSE(defaults.curve);
}

TEST(ClusterPlan, AddressesRoundTripThroughTheConfig) {
  Config config = Config::Defaults(ExperimentSchema());
  for (const std::string& s : ClusterPlan::AddressAssignments("p:1", "w:2,w:3", "c:4", "")) {
    config.ApplyOverride(s);
  }
  ClusterPlan p = ClusterPlan::FromConfig(config);
  EXPECT_EQ(p.ps, "p:1");
  EXPECT_EQ(p.worker, "w:2,w:3");
  EXPECT_EQ(p.coordinator, "c:4");
  EXPECT_EQ(p.evaluator, "");
  ClusterPlan::SetAddresses(config, "q:1", "x:2", "d:3", "e:4");
  p = ClusterPlan::FromConfig(config);
  EXPECT_EQ(p.ps, "q:1");
  EXPECT_EQ(p.worker, "x:2");
  EXPECT_EQ(p.coordinator, "d:3");
  EXPECT_EQ(p.evaluator, "e:4");
}

}  // namespace
}  // namespace asgd::experiments
