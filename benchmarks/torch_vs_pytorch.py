#!/usr/bin/env python3
"""asgd against PyTorch itself: the same TorchScript model trained by both (issue 43).

    /usr/bin/python3 benchmarks/torch_vs_pytorch.py                      # cnn, 2 and 4 workers
    /usr/bin/python3 benchmarks/torch_vs_pytorch.py --out results/bench/torch_vs_pytorch.csv
    /usr/bin/python3 benchmarks/torch_vs_pytorch.py --check               # the quick smoke test

Run it with the Python that has PyTorch (Debian's python3-torch: /usr/bin/python3). It writes
the model with python/asgd_torch.py (`script --arch cnn`: LeNet-5, 61,706 parameters;
`--models cnn,mlp` adds the MLP 784-256-256-10) and trains it on MNIST from $ASGD_DATA_DIR
(or --data-dir) with momentum SGD (v <- mu v + g; theta <- theta - eta v, PyTorch's form,
no dampening, Nesterov or weight decay), the same rate, momentum, seed and batch per worker
(defaults: eta 0.05, mu 0.5, 64 examples), once by asgd and once by PyTorch, in these cases:

  case           asgd (`asgd run`, model.name = torchscript)   PyTorch (this script's children)
  sgd            algorithm.name = sgd                           an eager single-process loop, and
                                                                the file itself (torch.jit.load)
                                                                in the same loop ("script")
  hogwild        algorithm.name = hogwild, N worker threads,    PyTorch's multiprocessing Hogwild
                 hogwild_add = racy (PyTorch's adds are plain   pattern (examples/mnist_hogwild):
                 ones too), each worker its own velocity        model.share_memory(), N processes,
                                                                each its own optimizer
  allreduce_sgd  algorithm.name = allreduce_sgd, N ranks on     DistributedDataParallel, gloo, N
                 gloo (threads of one process, 127.0.0.1)       processes (FileStore rendezvous,
                                                                GLOO_SOCKET_IFNAME=lo)

Both sides start from the parameters stored in the file (asgd: model.init = file; PyTorch:
the file's state_dict loaded into the eager module, which DDP then broadcasts from rank 0).
Every worker trains on its own 1/N of the training set, shuffled each epoch (asgd: a seeded
partition fixed for the run, reshuffled within; PyTorch: DistributedSampler's rule, one
permutation of the whole set seeded by seed + epoch, rank r taking every N-th index from r),
in batches of --batch-size, the last one of an epoch smaller; one epoch is one pass in total
(N × 1/N), so both sides train on the same number of samples.
(PyTorch's Hogwild example gives each process the whole set; the split here keeps the work
equal.) One intra-op and one inter-op thread per worker on both sides: asgd's backend sets
them, each PyTorch process calls torch.set_num_threads(1) and set_num_interop_threads(1);
OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS are 1 for every process started.

What each side's clock counts (samples/s = samples trained / that time):
  asgd     summary.csv's wall_time_s: training time (docs/strategies.md, "Training time"),
           from just before the workers are set up (per-worker model instances; for
           allreduce_sgd also the gloo connections and the broadcast of theta_0) to the end
           of the last step, evaluations held out; data loading, the model's loading and
           checks before it. The collective runner's first evaluation (of theta_0, before
           the workers start) is not held out, so the configs set metrics.eval_examples to
           --eval-examples (256) to make it small, and evaluate by epochs only at the end.
  PyTorch  from a barrier that every process passes after it imported torch, loaded the
           data and built the module, to the end of the last step of the last process
           (max end - min start, CLOCK_MONOTONIC); for DDP this includes
           init_process_group (the gloo connections) and the DDP constructor (the broadcast
           of rank 0's parameters), reported apart as setup_s. Batches are gathered from
           a tensor in memory (index_select) inside the clock, as asgd gathers its own.
Both report the test accuracy of the final parameters (all 10,000 test images, eval() mode,
outside the clock): a side that does not learn is no comparison.

Rounds alternate: in each of --rounds rounds, every case runs asgd, then PyTorch. The table
gives medians and min-max of samples/s and asgd / PyTorch (ratio of the medians) per case;
--out writes one row per run (date, machine, build, load average at the start, ...).
--check runs a tiny version (2 workers, 0.1 epochs, 1 round, about 25 s on 2 cores) and
fails unless every run completes, both sides trained on the same number of samples (up to a
batch per worker) and both learn (test accuracy >= 0.5); it exits 77 (skipped) without torch
or MNIST.
Every process it starts runs in its own process group, times out (--timeout) and is ended by
its PID (the group) when it fails, times out, or this script is interrupted. Exit status 2
on bad arguments, 1 when a run fails or (--check) a side does not learn.
"""
import argparse
import csv
import datetime
import importlib.util
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "python"))

import asgd_torch  # noqa: E402 - python/: the model, the data and the evaluation (torch optional)
from record_bench import cpu_model  # noqa: E402 - this folder: the machine line of every record

CASES = ("sgd", "hogwild", "allreduce_sgd")
MODELS = ("cnn", "mlp")
# The PyTorch counterparts of each asgd case, in the order they run after it.
PYTORCH_VARIANTS = {"sgd": ("eager", "script"), "hogwild": ("hogwild",),
                    "allreduce_sgd": ("ddp",)}
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SKIP = 77  # ctest's SKIP_RETURN_CODE
# --check: 0.1 epochs, after which both sides must reach this test accuracy: "learns" (the
# initial parameters give 0.05, chance is 0.1). Measured at 0.1 epochs, 2 workers, the
# defaults, at load average 7: 0.89-0.92 on both sides in every case. Every run of a full
# benchmark below it is named too.
CHECK_EPOCHS = 0.1
CHECK_ACCURACY = 0.5


class RunError(Exception):
    """A run that failed or timed out: its name and the last line it printed."""


# ---- Processes ----------------------------------------------------------------------------

_live = []  # Popen objects still running, each the leader of its own process group


def _end_group(proc):
    """Ends proc and everything it started (its process group, whose id is its PID)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def _end_all(*_):
    for proc in list(_live):
        _end_group(proc)
    _live.clear()


def run_process(cmd, label, timeout, env=None):
    """Runs cmd in its own process group; its output, or RunError naming label."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    _live.append(proc)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        raise RunError("%s: timed out after %g s" % (label, timeout))
    finally:
        _end_group(proc)  # also the children of a leader that returned
        if proc in _live:
            _live.remove(proc)
    if proc.returncode != 0:
        tail = output.strip().splitlines()[-1:] or ["(no output)"]
        raise RunError("%s: exit status %d: %s" % (label, proc.returncode, tail[0]))
    return output


def child_env(extra=None):
    env = dict(os.environ)
    env.update(ONE_THREAD_ENV)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update(extra)
    return env


# ---- The asgd side ------------------------------------------------------------------------


def asgd_config(case, workers, opts, model_file, out_dir):
    lines = [
        "[experiment]",
        "name = torch_vs_pytorch_%s" % case,
        "epochs = %r" % opts.epochs,
        "seed = %d" % opts.seed,
        "progress = off",
        "out_dir = %s" % out_dir,
        "[data]",
        "dataset = mnist",
        "dir = %s" % opts.data_dir,
        "[model]",
        "name = torchscript",
        "file = %s" % model_file,
        "init = file",
        "[algorithm]",
        "name = %s" % case,
        "optimizer = momentum",
        "momentum = %r" % opts.momentum,
        "learning_rate = %r" % opts.learning_rate,
        "batch_size = %d" % opts.batch_size,
    ]
    if case != "sgd":
        lines.append("workers = %d" % workers)
    if case == "hogwild":
        lines.append("hogwild_add = racy")
    lines += [
        "[metrics]",
        # One evaluation by epochs, at the end (held out of training time anyway); the
        # collective runner's first one is not held out: keep it small.
        "eval_every_epochs = %r" % opts.epochs,
        "eval_examples = %d" % opts.eval_examples,
    ]
    return "\n".join(lines) + "\n"


def run_asgd(case, workers, opts, arch, model_file, work):
    """One `asgd run` of case; arch is unused (asgd reads the architecture from the file)."""
    del arch
    run_dir = tempfile.mkdtemp(prefix="asgd-%s-" % case, dir=work)
    config = os.path.join(run_dir, "run.ini")
    with open(config, "w") as f:
        f.write(asgd_config(case, workers, opts, model_file, os.path.join(run_dir, "out")))
    cmd = [opts.asgd, "run", config]
    for s in opts.asgd_set:
        cmd += ["--set", s]
    run_process(cmd, "asgd run %s (%d workers)" % (case, workers), opts.timeout, child_env())
    out = os.path.join(run_dir, "out")
    folders = os.listdir(out)
    with open(os.path.join(out, folders[0], "summary.csv")) as f:
        s = next(csv.DictReader(f))
    samples = int(s["samples"])
    time_s = float(s["wall_time_s"])
    return {"samples": samples, "time_s": time_s, "samples_per_s": samples / time_s,
            "setup_s": "", "test_accuracy": float(s["final_test_accuracy"])}


# ---- The PyTorch side (children of this script) -------------------------------------------


def run_pytorch(variant, workers, opts, arch, model_file, work):
    spec = {"variant": variant, "workers": workers, "arch": arch,
            "model_file": model_file, "data_dir": opts.data_dir, "epochs": opts.epochs,
            "batch_size": opts.batch_size, "learning_rate": opts.learning_rate,
            "momentum": opts.momentum, "seed": opts.seed, "timeout": opts.timeout,
            "work": tempfile.mkdtemp(prefix="pytorch-%s-" % variant, dir=work)}
    spec["result"] = os.path.join(spec["work"], "result.json")
    # gloo's pairs bind the loopback interface's address only.
    env = child_env({"GLOO_SOCKET_IFNAME": "lo"})
    run_process([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
                "PyTorch %s (%d workers)" % (variant, workers), opts.timeout, env)
    with open(spec["result"]) as f:
        return json.load(f)


def _now():
    # System-wide, so the processes' starts and ends compare.
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _one_thread():
    import torch
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)


def _module(spec):
    """The eager module of spec's architecture holding the file's parameters, or (variant
    script) the file itself."""
    import torch
    scripted = torch.jit.load(spec["model_file"], map_location="cpu")
    if spec["variant"] == "script":
        return scripted
    module = asgd_torch.build_model(spec["arch"], (1, 28, 28), 10)
    module.load_state_dict(scripted.state_dict())
    return module


def _train(module, optimizer, x, y, spec, rank, world):
    """The loop every variant runs: a worker's share of spec's epochs in batches of its
    shard, each a zero_grad, forward, cross-entropy, backward and optimizer step. Returns
    the samples it trained on."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data.distributed import DistributedSampler
    # What a DDP user's DataLoader draws from (shuffle, drop_last False): one permutation
    # seeded by seed + epoch, rank r taking every world-th index from r.
    sampler = DistributedSampler(range(x.shape[0]), num_replicas=world, rank=rank, shuffle=True,
                                 seed=spec["seed"], drop_last=False)
    per_epoch = sampler.num_samples
    target = math.ceil(spec["epochs"] * per_epoch)
    b = spec["batch_size"]
    done = 0
    epoch = 0
    module.train()
    while done < target:
        sampler.set_epoch(epoch)
        shard = torch.tensor(list(sampler))
        for start in range(0, per_epoch, b):
            if done >= target:
                break
            idx = shard[start:start + b]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            optimizer.zero_grad()
            loss = F.cross_entropy(module(xb), yb)
            loss.backward()
            optimizer.step()
            done += idx.numel()
        epoch += 1
    return done


def _sgd(module, spec):
    import torch
    return torch.optim.SGD(module.parameters(), lr=spec["learning_rate"],
                           momentum=spec["momentum"], dampening=0, weight_decay=0,
                           nesterov=False)


def _accuracy(module, spec):
    x, y = asgd_torch.load_dataset(spec["data_dir"], "mnist", "test")
    accuracy, _, _ = asgd_torch.evaluate(module, x, y)
    return accuracy


def _ddp_worker(rank, spec, x, y, barrier, results):
    import datetime as dt
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    _one_thread()
    world = spec["workers"]
    module = _module(spec)
    store = dist.FileStore(os.path.join(spec["work"], "store"), world)
    barrier.wait()
    t0 = _now()
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=dt.timedelta(seconds=spec["timeout"]))
    ddp = DistributedDataParallel(module)  # broadcasts rank 0's parameters
    optimizer = _sgd(ddp, spec)
    t_setup = _now()
    samples = _train(ddp, optimizer, x, y, spec, rank, world)
    t1 = _now()
    accuracy = _accuracy(module, spec) if rank == 0 else None
    dist.destroy_process_group()
    results.put({"rank": rank, "t0": t0, "t_setup": t_setup, "t1": t1, "samples": samples,
                 "accuracy": accuracy})


def _hogwild_worker(rank, spec, module, x, y, barrier, results):
    _one_thread()
    # Each process its own optimizer, so its own momentum buffers, and its own gradients
    # (allocated lazily here, after share_memory): only the parameters are shared.
    optimizer = _sgd(module, spec)
    barrier.wait()
    t0 = _now()
    samples = _train(module, optimizer, x, y, spec, rank, spec["workers"])
    t1 = _now()
    results.put({"rank": rank, "t0": t0, "t_setup": t0, "t1": t1, "samples": samples,
                 "accuracy": None})


def _processes(spec, target, args_of):
    """Runs target(rank, *args_of(...)) in spec's worker count of spawned processes; their
    results, or SystemExit naming the first that failed."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    world = spec["workers"]
    barrier = ctx.Barrier(world)
    results = ctx.SimpleQueue()
    procs = [ctx.Process(target=target, args=(r,) + args_of(barrier, results))
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + spec["timeout"]
    try:
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode != 0:
                raise SystemExit("PyTorch %s: process %d %s" % (
                    spec["variant"], procs.index(p),
                    "timed out" if p.exitcode is None else "exit status %s" % p.exitcode))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    return [results.get() for _ in procs]


def child_main(spec):
    import torch
    _one_thread()
    x, y = asgd_torch.load_dataset(spec["data_dir"], "mnist", "train")
    variant = spec["variant"]
    if variant in ("eager", "script"):
        module = _module(spec)
        optimizer = _sgd(module, spec)
        t0 = _now()
        samples = _train(module, optimizer, x, y, spec, 0, 1)
        t1 = _now()
        rows = [{"t0": t0, "t_setup": t0, "t1": t1, "samples": samples,
                 "accuracy": _accuracy(module, spec)}]
    elif variant == "ddp":
        x.share_memory_()
        y.share_memory_()
        rows = _processes(spec, _ddp_worker, lambda b, q: (spec, x, y, b, q))
    elif variant == "hogwild":
        module = _module(spec)
        module.share_memory()
        x.share_memory_()
        y.share_memory_()
        rows = _processes(spec, _hogwild_worker, lambda b, q: (spec, module, x, y, b, q))
        rows[0]["accuracy"] = _accuracy(module, spec)
    else:
        raise SystemExit("unknown variant %s" % variant)
    start = min(r["t0"] for r in rows)
    time_s = max(r["t1"] for r in rows) - start
    samples = sum(r["samples"] for r in rows)
    accuracy = next(r["accuracy"] for r in rows if r["accuracy"] is not None)
    result = {"samples": samples, "time_s": time_s, "samples_per_s": samples / time_s,
              "setup_s": max(r["t_setup"] for r in rows) - start, "test_accuracy": accuracy,
              "torch": torch.__version__}
    with open(spec["result"], "w") as f:
        json.dump(result, f)
    return 0


# ---- Rounds, table, CSV -------------------------------------------------------------------


def _choices(flag, text, allowed):
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if not values or bad:
        raise asgd_torch.UsageError("%s '%s': expected a comma-separated list of %s"
                                    % (flag, text, ", ".join(allowed)))
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[1:]))
    p.add_argument("--asgd", default=os.path.join(REPO, "build", "asgd"),
                   help="the asgd binary, built with libtorch (default build/asgd)")
    p.add_argument("--data-dir", default=os.environ.get("ASGD_DATA_DIR", ""),
                   help="folder holding mnist/ (default $ASGD_DATA_DIR)")
    p.add_argument("--models", default="cnn", help="cnn, mlp or both (default cnn)")
    p.add_argument("--cases", default=",".join(CASES),
                   help="any of sgd, hogwild, allreduce_sgd (default all three)")
    p.add_argument("--workers", default="2,4",
                   help="worker counts for hogwild and allreduce_sgd (default 2,4)")
    p.add_argument("--epochs", type=float, default=1.0,
                   help="passes over the training set per run, may be fractional (default 1)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--batch-size", type=int, default=64, help="per worker (default 64)")
    p.add_argument("--learning-rate", type=float, default=0.05, help="eta (default 0.05)")
    p.add_argument("--momentum", type=float, default=0.5,
                   help="mu (default 0.5, as PyTorch's mnist_hogwild example; with 0.9 Hogwild "
                   "collapsed to 0.11 test accuracy in some runs, on both sides)")
    p.add_argument("--seed", type=int, default=1,
                   help="the model's initialisation (asgd_torch.py --seed) and both sides' "
                   "data order (default 1)")
    p.add_argument("--eval-examples", type=int, default=256,
                   help="asgd's metrics.eval_examples (the first evaluation's size; default 256)")
    p.add_argument("--asgd-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="an extra --set for every asgd run, e.g. collective.algorithm=ring_chunked")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run (default 900)")
    p.add_argument("--out", help="write one row per run to this CSV")
    p.add_argument("--build", help="build description for --out (default: `asgd version`)")
    p.add_argument("--work-dir", help="keep the models, configs and run folders here "
                   "(default: a temporary folder, removed at the end)")
    p.add_argument("--check", action="store_true",
                   help="the smoke test: 2 workers, %g epochs, 1 round; fails unless both "
                   "sides train the same samples and learn (test accuracy >= %.1f); exit 77 "
                   "without torch or MNIST" % (CHECK_EPOCHS, CHECK_ACCURACY))
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.check:
        args.workers, args.epochs, args.rounds = "2", CHECK_EPOCHS, 1
    args.models = _choices("--models", args.models, MODELS)
    args.cases = _choices("--cases", args.cases, CASES)
    args.workers = asgd_torch._int_list("--workers", args.workers)
    if not args.epochs > 0:
        raise asgd_torch.UsageError("--epochs %g: expected a positive number" % args.epochs)
    for flag, value in (("--rounds", args.rounds), ("--batch-size", args.batch_size),
                        ("--eval-examples", args.eval_examples)):
        if value < 1:
            raise asgd_torch.UsageError("%s %d: expected at least 1" % (flag, value))
    for flag, value, ok, expected in (
            ("--learning-rate", args.learning_rate, args.learning_rate > 0, "> 0"),
            ("--momentum", args.momentum, 0 <= args.momentum < 1, "in [0, 1)"),
            ("--timeout", args.timeout, args.timeout > 0, "> 0 seconds")):
        if not ok:
            raise asgd_torch.UsageError("%s %g: expected %s" % (flag, value, expected))
    return args


def preflight(args):
    """None when the runs can start; else (status, one line): 77 for what --check skips."""
    if importlib.util.find_spec("torch") is None:
        return SKIP, ("this Python (%s) cannot import torch: run it with the Python of Debian's "
                      "python3-torch (/usr/bin/python3)" % sys.executable)
    d = args.data_dir
    if not d or not all(asgd_torch._find_file([os.path.join(d, "mnist"), d], name)
                        for split in ("train", "test") for name in asgd_torch.IDX_FILES[split]):
        return SKIP, ("MNIST not found: expected its IDX files in mnist/ under --data-dir or "
                      "$ASGD_DATA_DIR ('%s'; `asgd data fetch mnist`)" % d)
    if not os.access(args.asgd, os.X_OK):
        return 2, "--asgd %s: not an executable asgd binary" % args.asgd
    return None


def write_model(arch, seed, path, timeout):
    run_process([sys.executable, os.path.join(REPO, "python", "asgd_torch.py"), "script",
                 "--arch", arch, "--input-shape", "1,28,28", "--classes", "10",
                 "--seed", str(seed), "--out", path], "asgd_torch.py script --arch " + arch,
                timeout, child_env())


def run_rounds(args, work):
    rows = []
    models = {}
    for arch in args.models:
        models[arch] = os.path.join(work, "%s.pt" % arch)
        write_model(arch, args.seed, models[arch], args.timeout)
    for r in range(1, args.rounds + 1):
        for arch in args.models:
            for case in args.cases:
                for workers in ([1] if case == "sgd" else args.workers):
                    sides = [("asgd", "asgd", run_asgd)]
                    sides += [("pytorch", v, run_pytorch) for v in PYTORCH_VARIANTS[case]]
                    for side, variant, runner in sides:
                        load = os.getloadavg()[0]
                        arg = case if side == "asgd" else variant
                        res = runner(arg, workers, args, arch, models[arch], work)
                        row = {"model": arch, "case": case, "workers": workers, "side": side,
                               "variant": variant, "round": r, "load_1m": round(load, 2)}
                        row.update(res)
                        row.pop("torch", None)
                        rows.append(row)
                        print("round %d %s %s %d workers %s %s: %.0f samples/s, %.3f s, "
                              "accuracy %.4f, load %.2f" % (
                                  r, arch, case, workers, side, variant, res["samples_per_s"],
                                  res["time_s"], res["test_accuracy"], load), flush=True)
    return rows


def _span(values):
    return "%s (%s–%s)" % (_n(statistics.median(values)), _n(min(values)), _n(max(values)))


def _n(v):
    return "{:,.0f}".format(v)


def summarise(rows, batch_size):
    """The markdown table over rows, and one problem line per pair of asgd and PyTorch runs
    that is no comparison: a side below CHECK_ACCURACY, or sample counts that differ by
    more than a batch per worker."""
    lines = ["| model | case | workers | asgd samples/s | PyTorch | PyTorch samples/s | "
             "asgd / PyTorch | test accuracy asgd / PyTorch |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | --- |"]
    problems = []
    keys = []
    for row in rows:
        k = (row["model"], row["case"], row["workers"])
        if k not in keys:
            keys.append(k)
    for model, case, workers in keys:
        same = [r for r in rows if (r["model"], r["case"], r["workers"]) == (model, case, workers)]
        a = [r for r in same if r["side"] == "asgd"]
        for variant in PYTORCH_VARIANTS[case]:
            p = [r for r in same if r["side"] == "pytorch" and r["variant"] == variant]
            if not a or not p:
                continue
            ratio = (statistics.median(x["samples_per_s"] for x in a) /
                     statistics.median(x["samples_per_s"] for x in p))
            acc_a = statistics.median(x["test_accuracy"] for x in a)
            acc_p = statistics.median(x["test_accuracy"] for x in p)
            lines.append("| %s | %s | %d | %s | %s | %s | %.2f | %.4f / %.4f |" % (
                model, case, workers, _span([x["samples_per_s"] for x in a]), variant,
                _span([x["samples_per_s"] for x in p]), ratio, acc_a, acc_p))
            label = "%s %s %d workers, asgd against PyTorch %s" % (model, case, workers, variant)
            low = min(x["test_accuracy"] for x in a + p)
            if low < CHECK_ACCURACY:
                problems.append("%s: test accuracy down to %.4f (asgd %s, PyTorch %s): "
                                "expected every run >= %.1f (a side that does not learn)" % (
                                    label, low, _accuracies(a), _accuracies(p), CHECK_ACCURACY))
            counts = sorted({x["samples"] for x in a + p})
            if counts[-1] - counts[0] > workers * batch_size:
                problems.append("%s: trained on %s samples: expected the same up to a batch "
                                "per worker (%d)" % (label, ", ".join(map(str, counts)),
                                                     workers * batch_size))
    return "\n".join(lines), problems


def _accuracies(runs):
    return " ".join("%.4f" % x["test_accuracy"] for x in runs)


def write_csv(path, rows, build):
    machine = "%s; %d hardware threads" % (cpu_model(), os.cpu_count())
    date = datetime.date.today().isoformat()
    columns = ["model", "case", "workers", "side", "variant", "round", "samples", "time_s",
               "samples_per_s", "setup_s", "test_accuracy", "load_1m"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["date", "machine", "build"] + columns)
        for r in rows:
            w.writerow([date, machine, build] + [r[c] for c in columns])


def main(argv):
    try:
        args = parse_args(argv)
    except asgd_torch.UsageError as e:
        print("torch_vs_pytorch: %s" % e, file=sys.stderr)
        return 2
    if args.child:
        return child_main(json.loads(args.child))
    problem = preflight(args)
    if problem:
        status, line = problem
        if status == SKIP and not args.check:
            status = 2  # only the smoke test skips; a benchmark that cannot run fails
        print("torch_vs_pytorch: %s%s" % ("skipped: " if status == SKIP else "", line),
              file=sys.stderr)
        return status
    args.data_dir = os.path.abspath(args.data_dir)
    args.asgd = os.path.abspath(args.asgd)
    def stop(signum, _frame):
        # The finally clauses end the running process's group.
        print("torch_vs_pytorch: stopped by %s" % signal.Signals(signum).name, file=sys.stderr)
        sys.exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    started = time.monotonic()
    print("machine: %s; %d hardware threads; load average %.2f %.2f %.2f" % (
        (cpu_model(), os.cpu_count()) + os.getloadavg()), flush=True)
    try:
        if args.work_dir:
            os.makedirs(args.work_dir, exist_ok=True)
            rows = run_rounds(args, os.path.abspath(args.work_dir))
        else:
            with tempfile.TemporaryDirectory(prefix="torch-vs-pytorch-") as work:
                rows = run_rounds(args, work)
    except RunError as e:
        print("torch_vs_pytorch: %s" % e, file=sys.stderr)
        return 1
    finally:
        _end_all()
    table, problems = summarise(rows, args.batch_size)
    print("\n" + table)
    print("\n%d runs in %.0f s; load average at the runs' starts %.2f–%.2f" % (
        len(rows), time.monotonic() - started, min(r["load_1m"] for r in rows),
        max(r["load_1m"] for r in rows)))
    if args.out:
        build = args.build
        if build is None:
            build = run_process([args.asgd, "version"], "asgd version", 60).strip()
        write_csv(args.out, rows, build)
        print("wrote %s" % args.out)
    for line in problems:
        print("torch_vs_pytorch: %s%s" % ("" if args.check else "warning: ", line),
              file=sys.stderr)
    if args.check:
        if problems:
            return 1
        print("check passed: every case ran on both sides, on the same samples, and both learned")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
