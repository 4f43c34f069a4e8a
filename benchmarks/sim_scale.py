#!/usr/bin/env python3
"""Memory and wall time of the simulator against the number of simulated workers.

    benchmarks/sim_scale.py --asgd build/asgd --out results/bench/sim_scale.csv

Runs async_sgd on the MNIST MLP (784-256-256-10, 269,322 parameters, batch 8, log-normal
step times around 20 ms, the free network) with cluster.transport = sim for each count
of workers (default 1, 10, 100, 1,000, 10,000), each as its own `asgd run` child, and
records per count (the learning rate is 0.05 x min(1, 10 / workers): n workers that all
start from the same parameters push n gradients before any of them reads the centre
again, and at 10,000 workers 0.05 diverges):

  peak_rss_bytes     the child's peak resident memory (ru_maxrss from wait4)
  bytes_per_worker   (peak_rss_bytes - the 1-worker row's) / (workers - 1)
  steps              simulated steps (gradients) of the longer run: its limit, max(20000,
                     4 x workers), so that every worker computes and pushes several
                     times, plus the steps under way when the limit was reached (up to
                     workers - 1: the workers finish the step they are in)
  cpu_per_step_us    the marginal CPU time (user + system, the child's rusage) of a
                     simulated step: the same count run to a limit of S and of 2 S steps,
                     (cpu(2 S) - cpu(S)) / (steps(2 S) - steps(S)), which leaves out
                     loading MNIST, spawning the workers and evaluating. CPU time, since
                     the simulator is one thread and the marginal wall time of a shared
                     machine is noise (it came out negative under a load average of 10)
  wall_per_step_us   the longer run's wall time over its steps (start-up included)
  wall_s             the longer run's whole wall time

With --own-up-to N the counts up to N are also run with sim.share_buffers = false (each
worker owning its model, gradient and push buffer, as before issue 33) for comparison.
--algorithm runs another strategy on the same problem (e.g. allreduce_sgd, whose ranks on
the simulated collective then hold one θ and optimizer between them; the rounds are
synchronous, so its steps limit is reached in whole rounds of every worker).
The MNIST data comes from ASGD_DATA_DIR as for any run. Runs go to a temporary folder.
"""
import argparse
import csv
import datetime
import os
import subprocess
import sys
import tempfile
import time

from record_bench import cpu_model  # this folder: the machine line every record shares

CONFIG = """[experiment]
name = sim_scale
epochs = 1000
progress = off
log_level = warning
[data]
dataset = mnist
[model]
name = mlp
hidden = 256,256
[algorithm]
name = async_sgd
batch_size = 8
[cluster]
transport = sim
[delay]
compute = lognormal
mean_ms = 20
stddev_ms = 5
[metrics]
eval_every_epochs = 1000
eval_examples = 1000
"""


def mem_total_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return 0.0


def learning_rate(workers):
    return 0.05 * min(1.0, 10.0 / workers)


def run_once(asgd, config, out_dir, workers, steps, share, algorithm):
    """One `asgd run` child: (wall seconds, peak RSS bytes, summary row + cpu_s)."""
    runs = os.path.join(out_dir, f"runs-{workers}-{steps}-{share}")
    cmd = [asgd, "run", config,
           "--set", f"algorithm.name={algorithm}",
           "--set", f"algorithm.workers={workers}",
           "--set", f"algorithm.learning_rate={learning_rate(workers):g}",
           "--set", f"experiment.max_steps={steps}",
           "--set", f"experiment.out_dir={runs}",
           "--set", f"sim.share_buffers={'true' if share else 'false'}"]
    t0 = time.monotonic()
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait4 gives this child's own rusage (ru_maxrss in KiB on Linux).
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - t0
    out, err = child.stdout.read(), child.stderr.read()
    child.stdout.close()
    child.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"sim_scale: {' '.join(cmd)} failed:\n{out}\n{err}")
    (folder,) = os.listdir(runs)
    with open(os.path.join(runs, folder, "summary.csv")) as f:
        summary = next(csv.DictReader(f))
    summary["cpu_s"] = usage.ru_utime + usage.ru_stime
    return wall, usage.ru_maxrss * 1024, summary


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--asgd", default="build/asgd", help="the asgd binary")
    p.add_argument("--workers", default="1,10,100,1000,10000",
                   help="comma-separated worker counts (the first should be 1)")
    p.add_argument("--own-up-to", type=int, default=1000,
                   help="also run counts up to this with sim.share_buffers = false (0: none)")
    p.add_argument("--algorithm", default="async_sgd", help="the strategy (algorithm.name)")
    p.add_argument("--out", default="results/bench/sim_scale.csv", help="CSV to write")
    p.add_argument("--build", default="", help="build description (asgd version)")
    args = p.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    if not counts or counts[0] != 1:
        sys.exit("sim_scale: --workers must start with 1 (the base of bytes_per_worker)")

    machine = f"{cpu_model()}; {os.cpu_count()} hardware threads; {mem_total_gib():.0f} GiB"
    date = datetime.date.today().isoformat()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sim_scale-") as tmp:
        config = os.path.join(tmp, "sim_scale.ini")
        with open(config, "w") as f:
            f.write(CONFIG)
        base = {}
        for share in (True, False):
            for n in counts:
                if not share and n > args.own_up_to:
                    continue
                s = max(10000, 2 * n)
                wall1, _, summary1 = run_once(args.asgd, config, tmp, n, s, share,
                                              args.algorithm)
                wall2, rss, summary = run_once(args.asgd, config, tmp, n, 2 * s, share,
                                               args.algorithm)
                if n == 1:
                    base[share] = rss
                per_worker = (rss - base[share]) / (n - 1) if n > 1 else float("nan")
                steps = int(summary["steps"])
                cpu_us = (summary["cpu_s"] - summary1["cpu_s"]) / (steps - int(summary1["steps"]))
                cpu_us *= 1e6
                wall_us = wall2 / steps * 1e6
                row = {
                    "date": date, "machine": machine, "build": args.build,
                    "algorithm": args.algorithm,
                    "workers": n, "share_buffers": "true" if share else "false",
                    "learning_rate": f"{learning_rate(n):g}",
                    "steps": summary["steps"], "peak_rss_bytes": rss,
                    "bytes_per_worker": "" if n == 1 else f"{per_worker:.0f}",
                    "cpu_per_step_us": f"{cpu_us:.1f}", "wall_per_step_us": f"{wall_us:.1f}",
                    "wall_s": f"{wall2:.2f}", "cpu_s": f"{summary['cpu_s']:.2f}",
                    "virtual_s": summary["wall_time_s"],
                    "final_test_accuracy": summary["final_test_accuracy"],
                }
                rows.append(row)
                print(f"{n:6d} workers share={row['share_buffers']:5s} "
                      f"peak {rss / 2**30:6.2f} GiB  per worker {row['bytes_per_worker']:>8s} B  "
                      f"cpu {cpu_us:7.1f} us/step  wall {wall_us:7.1f} us/step  ({wall2:.1f} s)",
                      flush=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
