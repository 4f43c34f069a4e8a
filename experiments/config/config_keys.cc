// Every key, its default and its meaning. Defaults are the values a researcher gets
// without asking; where they come from the literature the comment says so. A strategy's
// own [algorithm] keys are declared in its registry entry (Strategy::settings,
// algorithms/settings.h) and added here from the registry.
#include "experiments/config/config_keys.h"

#include <string>
#include <tuple>

#include "algorithms/strategy.h"
#include "compression/compressor.h"
#include "core/strings.h"
#include "sim/options.h"

namespace asgd::experiments {
namespace {

KeySpec Str(std::string name, std::string def, std::string doc, bool allow_empty = true) {
  KeySpec k;
  k.name = std::move(name);
  k.type = KeyType::kString;
  k.default_value = std::move(def);
  k.doc = std::move(doc);
  k.allow_empty = allow_empty;
  return k;
}

KeySpec Choice(std::string name, std::string def, std::vector<std::string> choices,
               std::string doc) {
  KeySpec k;
  k.name = std::move(name);
  k.type = KeyType::kChoice;
  k.default_value = std::move(def);
  k.choices = std::move(choices);
  k.doc = std::move(doc);
  return k;
}

KeySpec Int(std::string name, int64_t def, std::optional<double> min, std::optional<double> max,
            std::string doc, std::string unit = "") {
  KeySpec k;
  k.name = std::move(name);
  k.type = KeyType::kInt;
  k.default_value = std::to_string(def);
  k.min = min;
  k.max = max;
  k.doc = std::move(doc);
  k.unit = std::move(unit);
  return k;
}

KeySpec Num(std::string name, std::string def, std::optional<double> min, bool min_exclusive,
            std::optional<double> max, bool max_exclusive, std::string doc, std::string unit = "") {
  KeySpec k;
  k.name = std::move(name);
  k.type = KeyType::kDouble;
  k.default_value = std::move(def);
  k.min = min;
  k.min_exclusive = min_exclusive;
  k.max = max;
  k.max_exclusive = max_exclusive;
  k.doc = std::move(doc);
  k.unit = std::move(unit);
  return k;
}

KeySpec Bool(std::string name, bool def, std::string doc) {
  KeySpec k;
  k.name = std::move(name);
  k.type = KeyType::kBool;
  k.default_value = def ? "true" : "false";
  k.doc = std::move(doc);
  return k;
}

KeySpec DoubleList(std::string name, std::string def, double min, std::string doc) {
  KeySpec k;
  k.name = std::move(name);
  k.type = KeyType::kDoubleList;
  k.default_value = std::move(def);
  k.min = min;
  k.min_exclusive = true;
  k.doc = std::move(doc);
  k.allow_empty = true;
  return k;
}

KeySpec IntList(std::string name, std::string def, double min, std::string doc, bool allow_empty) {
  KeySpec k;
  k.name = std::move(name);
  k.type = KeyType::kIntList;
  k.default_value = std::move(def);
  k.min = min;
  k.doc = std::move(doc);
  k.allow_empty = allow_empty;
  return k;
}

// The config table's entry of a strategy's setting: algorithm.<name>, its help led by the
// strategies that read it.
KeySpec SettingKey(const algorithms::Setting& setting) {
  KeySpec k;
  k.name = "algorithm." + setting.name;
  switch (setting.type) {
    case algorithms::SettingType::kInt:
      k.type = KeyType::kInt;
      break;
    case algorithms::SettingType::kDouble:
      k.type = KeyType::kDouble;
      break;
    case algorithms::SettingType::kChoice:
      k.type = KeyType::kChoice;
      break;
  }
  k.default_value = setting.default_value;
  k.doc = Join(algorithms::StrategiesWithSetting(setting.name), ", ") + ": " + setting.help;
  k.unit = setting.unit;
  k.choices = setting.choices;
  k.min = setting.min;
  k.max = setting.max;
  k.min_exclusive = setting.min_exclusive;
  k.max_exclusive = setting.max_exclusive;
  return k;
}

// The schema of every central key, one s.Add per key, section by section. A declarative
// table, not a procedure: it stays one long function on purpose, so the keys read as the
// list they are; split into functions it would only scatter that list.
Schema BuildSchema() {
  Schema s;
  // [experiment]
  s.Add(Str("experiment.name", "",
            "label of the run, used in its folder name (default: the config file's name)"));
  s.Add(Int("experiment.seed", 1, 0, std::nullopt,
            "seed of every random choice (initialisation, shuffling, partitioning)"));
  s.Add(Str("experiment.out_dir", "results/runs", "folder under which each run gets its own folder",
            false));
  s.Add(Num("experiment.epochs", "5", 0, true, std::nullopt, false,
            "stop after this many passes over the training set (samples summed over workers)",
            "epochs"));
  s.Add(Int("experiment.max_steps", 0, 0, std::nullopt,
            "stop after this many worker steps (mini-batch gradients, summed over workers: "
            "summary.csv `steps`; for sgd one step is one update); workers already in a step "
            "finish it, so a run may end up to workers - 1 steps past it; 0 = no limit",
            "steps"));
  s.Add(Num("experiment.max_time_s", "0", 0, false, std::nullopt, false,
            "stop after this much wall time; 0 = no limit", "seconds"));
  s.Add(Int("experiment.checkpoint_every_steps", 0, 0, std::nullopt,
            "save a checkpoint (run folder checkpoints/step-<updates>/) every this many "
            "parameter updates (communication rounds for the strategies on a collective, "
            "checkpoints/round-<rounds>/); 0 = not by updates; "
            "`asgd run CONFIG --resume RUN_DIR` continues from the newest",
            "updates"));
  s.Add(Num("experiment.checkpoint_every_s", "0", 0, false, std::nullopt, false,
            "save a checkpoint every this much training time; 0 = not by time", "seconds"));
  s.Add(Int("experiment.checkpoint_keep", 2, 1, std::nullopt,
            "how many complete checkpoints to keep (older ones are removed)"));
  s.Add(Num("experiment.target_accuracy", "0", 0, false, 1, false,
            "test accuracy whose first crossing is reported as time_to_target_s; 0 = none"));
  s.Add(Bool("experiment.stop_at_target", false,
             "stop the run once test accuracy reaches experiment.target_accuracy"));
  s.Add(Choice("experiment.log_level", "info", {"debug", "info", "warning", "error"},
               "how much to log"));
  s.Add(Choice("experiment.progress", "auto", {"auto", "on", "off"},
               "a live progress line: auto = only on a terminal"));

  // [data]
  s.Add(Choice("data.dataset", "mnist", {"mnist", "fashion-mnist", "a9a", "cifar10", "synthetic"},
               "training and test data"));
  s.Add(Str("data.dir", "",
            "folder holding <dataset>/ (searched first; then $ASGD_DATA_DIR, ./data, "
            "/usr/share/datasets)"));
  s.Add(Bool("data.verify", true, "check known data files against their SHA-256"));
  s.Add(Int("data.num_features", 0, 0, std::nullopt,
            "feature dimension of LIBSVM data; 0 = the dataset's own (a9a: 123)"));
  s.Add(Int("data.train_limit", 0, 0, std::nullopt,
            "use only the first N training examples; 0 = all", "examples"));
  s.Add(Int("data.test_limit", 0, 0, std::nullopt, "use only the first N test examples; 0 = all",
            "examples"));
  s.Add(Choice("data.normalize", "none", {"none", "per_channel"},
               "image data: per_channel maps each value of channel c to (x - mean[c]) / std[c], "
               "train and test alike (x: the pixel in [0, 1])"));
  {
    KeySpec mean = DoubleList("data.mean", "", 0,
                              "per_channel: one mean per channel, in [0, 1] pixel units; empty "
                              "(with data.std) = computed from the training split, and the "
                              "run folder's config.ini records the values used");
    mean.min.reset();  // a mean may be any finite number
    s.Add(mean);
  }
  s.Add(DoubleList("data.std", "", 0,
                   "per_channel: one standard deviation (> 0) per channel; empty (with "
                   "data.mean) = computed from the training split"));
  s.Add(Int("data.random_crop_padding", 0, 0, std::nullopt,
            "image data, training batches only: pad each side with this many black pixels and "
            "crop a random window of the original size (CIFAR-10's standard: 4); 0 = off",
            "pixels"));
  s.Add(Bool("data.random_flip", false,
             "image data, training batches only: mirror each image left-right with "
             "probability 1/2"));
  s.Add(Int("data.synthetic_train", 10000, 1, std::nullopt, "synthetic: training examples",
            "examples"));
  s.Add(Int("data.synthetic_test", 2000, 1, std::nullopt, "synthetic: test examples", "examples"));
  s.Add(Int("data.synthetic_features", 32, 1, 2147483647.0, "synthetic: features per example"));
  s.Add(Int("data.synthetic_classes", 2, 2, 65536, "synthetic: number of classes (clusters)"));
  s.Add(Num("data.synthetic_separation", "3", 0, false, std::nullopt, false,
            "synthetic: scale of the class centres (in units of the noise)"));
  s.Add(Num("data.synthetic_noise", "1", 0, true, std::nullopt, false,
            "synthetic: standard deviation of the noise around each centre"));
  s.Add(Int("data.synthetic_nonzeros", 0, 0, std::nullopt,
            "synthetic: 0 = dense examples; k > 0 = sparse examples with k non-zeros each"));

  // [model]
  s.Add(Choice("model.name", "mlp", {"softmax", "mlp", "cnn", "logreg", "torchscript"},
               "softmax regression, multilayer perceptron, LeNet-5-style CNN, sparse "
               "logistic regression (LIBSVM data), or torchscript: a PyTorch module from "
               "model.file (builds with libtorch only)"));
  s.Add(Str("model.file", "",
            "torchscript: the module's file (torch.jit.save; relative to the config file's "
            "folder). Its parameters in named_parameters() order are the flat vector; "
            "model.init says where their initial values come from"));
  s.Add(Choice("model.init", "file", {"file", "seed"},
               "torchscript: the initial parameters of every worker and shard: file = the "
               "values stored in model.file; seed = every submodule's reset_parameters() "
               "(PyTorch's rule for its standard layers, or the module's own exported "
               "TorchScript method) under torch's generator seeded from experiment.seed"));
  s.Add(IntList("model.input_shape", "", 1,
                "torchscript: the shape of one example as the module takes it (e.g. 3,32,32); "
                "empty = the dataset's (1,28,28 for MNIST)",
                true));
  s.Add(Int("model.bn_batches", 20, 1, 1 << 20,
            "torchscript: before each evaluation, the evaluating instance recomputes every "
            "BatchNorm's running statistics at the parameters evaluated, as the cumulative "
            "average over this many training batches (the first ones of the training data, "
            "of algorithm.batch_size examples each)",
            "batches"));
  s.Add(IntList("model.hidden", "256,256", 1, "mlp: hidden layer sizes", false));
  s.Add(Choice("model.activation", "relu", {"relu", "tanh", "sigmoid"},
               "mlp and cnn: hidden activation"));
  s.Add(IntList("model.cnn_channels", "6,16", 1, "cnn: output channels of the two convolutions",
                false));
  s.Add(IntList("model.cnn_fc", "120,84", 1,
                "cnn: sizes of the fully connected hidden layers (may be empty)", true));
  s.Add(Int("model.cnn_kernel", 5, 1, 31, "cnn: side of the square convolution kernels (odd)",
            "pixels"));
  s.Add(Str("model.device", "cpu",
            "where workers compute: cpu; cuda (worker w on GPU w mod the visible GPUs); "
            "cuda:N; or a comma list with one of those per worker (a mixed CPU/GPU "
            "cluster). The evaluator computes on the CPU",
            false));

  // [algorithm]
  {
    KeySpec name = Choice("algorithm.name", "sgd", algorithms::StrategyNames(),
                          "the training strategy (sgd = the sequential baseline; adag = agn, "
                          "dist-keras's name; README.md lists each with its source)");
    // The check of a deployed parameter server was once this key's value; it is a command.
    name.validator = [](std::string_view v) -> std::string {
      return v == "ps_check" ? "a training strategy (ps_check is a command of its own now: "
                               "`asgd ps-check ps|worker --config CONFIG`, keys in [check])"
                             : "";
    };
    s.Add(std::move(name));
  }
  s.Add(Choice("algorithm.optimizer", "sgd", {"sgd", "momentum", "nesterov", "adagrad", "adam"},
               "local optimizer used by each worker's steps"));
  s.Add(Num("algorithm.learning_rate", "0.05", 0, true, std::nullopt, false,
            "learning rate η of the local optimizer"));
  s.Add(Num("algorithm.lr_decay", "1", 0, true, 1, false,
            "multiply the learning rate by this after every epoch (Hogwild's backoff β)"));
  s.Add(DoubleList("algorithm.worker_learning_rates", "", 0,
                   "per-worker learning rates η_k, one per worker, replacing learning_rate for "
                   "each worker's local steps (sync_sgd's \"different learning rates\" variant); "
                   "empty = learning_rate for all"));
  s.Add(Bool("algorithm.linear_scaling", false,
             "linear scaling rule (Goyal et al. 2017): multiply the learning rate by the number "
             "of mini-batches one update aggregates (replicas_to_aggregate, or every worker); "
             "sync_sgd, sagn, allreduce_sgd and local_sgd only: refused for the asynchronous "
             "strategies and dpsgd, whose updates do not aggregate mini-batches"));
  s.Add(Num("algorithm.warmup_epochs", "0", 0, false, std::nullopt, false,
            "with linear_scaling: ramp the rate linearly from learning_rate to the scaled rate "
            "over this many epochs (Goyal et al.: 5); 0 = the scaled rate from the start",
            "epochs"));
  s.Add(Num("algorithm.momentum", "0.9", 0, false, 1, true, "momentum μ (momentum, nesterov)"));
  s.Add(Num("algorithm.beta1", "0.9", 0, false, 1, true, "Adam β1"));
  s.Add(Num("algorithm.beta2", "0.999", 0, false, 1, true, "Adam β2"));
  s.Add(Num("algorithm.epsilon", "1e-8", 0, true, std::nullopt, false, "Adam and Adagrad ε"));
  s.Add(Num("algorithm.initial_accumulator", "0.1", 0, false, std::nullopt, false,
            "Adagrad's initial accumulator (TensorFlow's default)"));
  s.Add(Num("algorithm.weight_decay", "0", 0, false, std::nullopt, false,
            "L2 coefficient λ added to the gradient as λ·θ"));
  s.Add(Int("algorithm.batch_size", 64, 1, 1 << 20, "mini-batch size of each worker step",
            "examples"));
  s.Add(Int("algorithm.workers", 1, 1, kMaxSimWorkers,
            "number of workers (at most " + std::to_string(kMaxRealWorkers) +
                " unless cluster.transport = sim)"));
  s.Add(Int("algorithm.window", 1, 1, 1000000,
            "communication window W: local steps per push (DOWNPOUR n_push, AGN λ, DynSGD; "
            "local_sgd's H, local steps per parameter average)",
            "steps"));
  s.Add(Int("algorithm.fetch_window", 0, 0, 1000000,
            "downpour, agn, dynsgd, adag_distance: local steps between fetches of the centre "
            "(DOWNPOUR's n_fetch); 0 = the window (a push and a fetch on the same step are one "
            "atomic push-pull; another value splits them)",
            "steps"));
  // The strategies' own settings, as their registry entries declare them (Strategy::settings).
  for (const algorithms::Setting* setting : algorithms::AllSettings()) s.Add(SettingKey(*setting));

  // [check]: `asgd ps-check`, a check of a deployed parameter server (no training).
  s.Add(Int("check.pushes", 20, 1, 1000000,
            "asgd ps-check: pushes each worker makes before the sum is verified", "pushes"));
  s.Add(Num("check.seconds", "0", 0, false, std::nullopt, false,
            "asgd ps-check: 0 = each worker makes check.pushes pushes; > 0 = the workers push "
            "as fast as they can for this long (from a common start), then verify the sum and "
            "every shard's count of every worker's pushes exactly (a soak test)",
            "seconds"));
  s.Add(Num("check.report_every_s", "5", 0, true, std::nullopt, false,
            "asgd ps-check with check.seconds > 0: each worker prints its pushes so far and "
            "each shard the pushes it applied, at every multiple of this on the wall clock (so "
            "the lines of all processes fall into the same intervals)",
            "seconds"));
  // What [check] replaced: the config.ini of every run before it lists them at these
  // defaults.
  for (const auto& [old, now, value] :
       {std::tuple{"algorithm.check_pushes", "check.pushes", "20"},
        std::tuple{"algorithm.check_seconds", "check.seconds", "0"},
        std::tuple{"algorithm.check_report_every_s", "check.report_every_s", "5"}}) {
    s.Retire({old, value, std::string("asgd ps-check reads ") + now});
  }
  // The simulated server's cost per byte became a cost per element it touches.
  s.Retire({"network.server_ns_per_byte", "(preset)",
            "the simulated server is charged per element it reads or writes: "
            "network.server_ns_per_element"});

  // [cluster]
  s.Add(Str("cluster.ps", "",
            "shard servers, one per shard, comma-separated: host:port (tcp), ipc://PATH or "
            "tcp://host:port; empty = take the cluster from $TF_CONFIG"));
  s.Add(Str("cluster.worker", "", "worker tasks, comma-separated, as cluster.ps"));
  s.Add(Str("cluster.coordinator", "",
            "the coordinator (host:port, ipc://PATH or tcp://host:port) that a run's roles "
            "register and report to; empty = TF_CONFIG's chief"));
  s.Add(Str("cluster.evaluator", "",
            "an evaluator task (as cluster.ps) that evaluates the centre while the workers "
            "train; empty = the coordinator evaluates"));
  s.Add(Num("cluster.report_interval_s", "0.1", 0, true, 60, false,
            "how often every role reports to the coordinator (its heartbeat)", "seconds"));
  s.Add(Num("cluster.heartbeat_timeout_s", "10", 0, true, std::nullopt, false,
            "a role silent for this long is taken as dead and the run fails", "seconds"));
  s.Add(Choice("cluster.launch_transport", "tcp", {"tcp", "ipc"},
               "asgd launch: the transport between the processes it starts"));
  s.Add(Int("cluster.base_port", 23400, 1024, 65000,
            "asgd task (SLURM, Open MPI): rank r listens on base_port + r"));
  s.Add(Str("cluster.hosts", "",
            "asgd task under Open MPI on several hosts: the host of every rank, in rank order "
            "(comma-separated); empty = every rank on 127.0.0.1"));
  s.Add(Choice("cluster.placement", "even", {"even", "round_robin", "greedy", "partition"},
               "how the flat parameter vector is split over the shards: even contiguous "
               "pieces, whole tensors round-robin, whole tensors greedily by bytes, or the "
               "largest tensor partitioned along its first axis"));
  s.Add(Choice("cluster.on_worker_loss", "continue", {"continue", "fail"},
               "multi-process runs: a worker silent for heartbeat_timeout_s (killed, frozen) "
               "is left behind and training goes on (synchronous rounds are re-formed with "
               "the survivors; ssp stops), or the run fails; a restarted worker rejoins, a "
               "frozen one that wakes up is taken back (the strategies on a collective "
               "always fail: a collective cannot lose a member)"));
  s.Add(Str("cluster.bind_host", "127.0.0.1",
            "interface a tcp shard server binds (\"*\" = every interface)", false));
  s.Add(Bool("cluster.allow_plain_remote", false,
             "let a shard server bind a non-loopback tcp address without CURVE (anyone who "
             "reaches it can read and change the shard); without it such a server refuses "
             "to start"));
  // The per-peer bounds of a shard server (transport/shard_server.h ServerOptions; the
  // docs/failure-model.md has the memory formula they give).
  s.Add(Int("cluster.max_queued_reply_bytes", 0, 0, std::nullopt,
            "a shard server's budget of unread reply bytes per peer (a pull is charged the "
            "whole shard); past it that peer's replies are dropped, counted and logged; at "
            "least the shard's bytes; 0 = max(32 x the shard's bytes, 16 MiB)",
            "bytes"));
  s.Add(Num("cluster.barrier_timeout_s", "600", 0, false, 1e9, false,
            "a shard server releases a barrier still incomplete this long after its first "
            "arrival with an error reply to everyone in it; 0 = never",
            "seconds"));
  s.Add(Int("cluster.max_barriers_per_peer", 4, 1, 1000000,
            "most barrier requests one peer may have waiting at a shard server; one more is "
            "refused"));
  s.Add(Bool("cluster.curve", false,
             "encrypt every connection of a run as processes with ZeroMQ CURVE and let the "
             "servers (ps, coordinator) accept only the client keys listed in keys_dir's "
             "authorized_clients; not for asgd run (one process)"));
  s.Add(Str("cluster.keys_dir", "",
            "with curve: the folder `asgd keys generate DIR` wrote (server.key, server.pub, "
            "client.key, authorized_clients; relative to the working directory); required "
            "when curve is true"));
  s.Add(Str("cluster.client_key", "client.key",
            "with curve: this process's client key pair, a file in keys_dir (or a path); "
            "after `asgd keys generate --clients N`, client-I.key",
            false));
  s.Add(Int("cluster.chunk_bytes", int64_t{1} << 20, 0, std::nullopt,
            "a worker sends a dense push whose part for one shard is larger than this over "
            "tcp or ipc as messages of at most this size, which the shard applies as they "
            "arrive, all or nothing, and asks for pull replies larger than this in chunks of "
            "the shard's own chunk_bytes (inproc never chunks); 0 = never chunk (needed with "
            "shard servers older than the chunked_reply flag, which refuse it); otherwise at "
            "least 65536",
            "bytes"));
  s.Add(Num("cluster.timeout_s", "60", 0, true, std::nullopt, false,
            "how long a worker waits for the servers to come up, and for any one reply",
            "seconds"));
  s.Add(Choice("cluster.transport", "inproc", {"inproc", "memory", "sim"},
               "a run in one process: shard servers over ZeroMQ inproc:// (the same code as "
               "across machines), the in-memory store (no sockets), or a simulated cluster "
               "in virtual time (the [delay], [network] and [sim] keys; docs/simulator.md)"));
  s.Add(Int("cluster.shards", 1, 1, 256,
            "a run in one process over inproc or sim: number of parameter-server shards"));
  s.Add(Bool("cluster.stop_servers", true,
             "when the workers are done, worker 0 stops the shard servers"));

  // [collective]
  s.Add(Choice("collective.algorithm", "halving_doubling", {"ring", "ring_chunked", "halving_doubling"},
               "allreduce_sgd, local_sgd: gloo's allreduce algorithm: ring (reduce-scatter "
               "then allgather around the ring), ring_chunked (2N chunks, both directions) or "
               "halving_doubling (recursive halving and doubling, log2 N steps)"));
  s.Add(Int("collective.timeout_ms", 30000, 1, std::nullopt,
            "allreduce_sgd, local_sgd, dpsgd: how long one collective operation (connecting "
            "included) waits for a peer; a dead or silent worker stops the run after this "
            "long with one line naming the rank and the operation (as processes: naming "
            "the worker that left)",
            "ms"));
  s.Add(Bool("collective.overlap", false,
              "allreduce_sgd: allreduce the gradient in buckets (collective.bucket_kib) from "
              "the last layer's end, each as soon as backward has produced it, on a "
              "communication thread, while backward computes the earlier layers (PyTorch "
              "DDP's buckets); false: one allreduce after the whole backward. The same "
              "sum, within the rounding of its order (docs/strategies.md, \"Overlapping the "
              "allreduce with backward\")"));
  s.Add(Int("collective.bucket_kib", 256, 1, std::nullopt,
            "allreduce_sgd with collective.overlap: the size of one bucket; at most the "
            "model's size when given. 256: the largest bucket reduced in one call on "
            "synchronous pairs, where a call's fixed cost, not its bytes, sets its price "
            "(halving_doubling cuts a larger one into such pieces; ring_chunked sends it "
            "whole on the asynchronous pairs; docs/strategies.md, \"Why these defaults\")",
            "KiB"));
  // [compression] (issue 17; compression/compressor.h)
  {
    std::string doc =
        "compress every push of a worker (the strategy must push updates: its source says); "
        "pulls stay dense:";
    for (const std::string& n : compression::CompressorNames()) {
      doc += " " + n + " = " + compression::CompressorDescription(n) + ";";
    }
    doc.back() = '.';
    s.Add(Choice("compression.name", "none", compression::CompressorNames(), doc));
  }
  s.Add(Num("compression.ratio", "0.01", 0, true, 1, false,
            "topk, randk: k as a fraction of each pushed part (one part per shard), "
            "k = max(1, round(ratio x elements))",
            "fraction"));
  s.Add(Int("compression.levels", 15, 1, compression::kMaxQsgdLevels,
            "qsgd: s, the quantization levels; codes take 1 + bit_width(s) bits", "levels"));
  s.Add(Int("compression.bucket", 512, 1, static_cast<double>(compression::kMaxQsgdBucket),
            "qsgd: d, each bucket of d consecutive elements of a pushed part is quantized with "
            "its own 2-norm (4 bytes each); 512 as in Alistarh et al. 2017's experiments; a "
            "bucket at least the part's size (1073741824 for any) is one norm per part",
            "elements"));
  s.Add(Num("compression.clip", "2.5", 0, false, std::nullopt, false,
            "terngrad: c, each element is clipped to [-c sigma, c sigma] before ternarizing, "
            "sigma the root mean square of its tensor's piece of the pushed part; 2.5 as in "
            "Wen et al. 2017; 0 = no clipping (then unbiased)"));
  s.Add(Bool("compression.error_feedback", false,
             "each worker keeps what compression left out of a push and adds it to its next "
             "update (Seide et al. 2014; Karimireddy et al. 2019); convergence.csv then gains "
             "ef_residual_norm"));

  // [metrics]
  s.Add(Num("metrics.eval_every_epochs", "0.5", 0, true, std::nullopt, false,
            "evaluate on the test set after every this many epochs of training", "epochs"));
  s.Add(Num("metrics.eval_every_s", "0", 0, false, std::nullopt, false,
            "also evaluate at least this often; 0 = only by epochs", "seconds"));
  s.Add(Int("metrics.staleness_rows", 1000000, 0, std::nullopt,
            "rows staleness.csv holds at most (one per push per shard); later pushes are only "
            "counted, exactly, in staleness_histogram.csv",
            "rows"));
  s.Add(Int("metrics.eval_examples", 0, 0, std::nullopt,
            "test examples used for intermediate evaluations: that many drawn at random "
            "(seeded by experiment.seed), the same ones at every evaluation; 0 = all (the "
            "final one always uses all)",
            "examples"));

  // [delay], [network], [sim]: the simulator's time model (sim/options.h holds the table;
  // values are checked by sim::SimOptionsFromMap when a run starts). delay.* also applies
  // to real runs, as injected sleeps.
  for (const sim::OptionKey& k : sim::SimOptionKeys()) {
    std::string doc(k.doc);
    if (k.key.starts_with("delay."))
      doc += "; simulated runs sleep it, thread and process runs inject it";
    s.Add(Str(std::string(k.key), std::string(k.default_value), doc));
  }
  return s;
}

}  // namespace

const Schema& ExperimentSchema() {
  static const Schema* schema = new Schema(BuildSchema());
  return *schema;
}

}  // namespace asgd::experiments
