#!/usr/bin/env python3
"""A/B of two asgd binaries, or of two settings, on the same experiment configs: samples/s, alternating.

    benchmarks/ab_runs.py --a OLD/asgd --b NEW/asgd --rounds 5 \\
        experiments/configs/mnist_mlp_local_sgd.ini experiments/configs/mnist_mlp_agn.ini \\
        --set experiment.epochs=3 --out ab.csv
    benchmarks/ab_runs.py --a build/asgd --b build/asgd --set-b model.name=torchscript \\
        --set-b model.file=$PWD/mlp.pt --threads experiments/configs/mnist_mlp_async_sgd.ini

--launch runs each as processes (`asgd launch`) instead of `asgd run`. --set applies to both,
--set-a and --set-b (after it) to one side only, so one binary can
compare two models or two settings. --threads samples each run's thread count (the
/proc/PID/status of the asgd process, every 20 ms) and reports its peak.

For each round and each config it runs A, then B (so drift of the machine's load falls on
both alike), reads samples_per_s from each run's summary.csv, and prints per config the
values and the ratio of B's median to A's. --out writes one row per run (config, binary,
round, samples_per_s, wall_time_s, final_test_accuracy). Run it on an idle machine: the
runs are short, and a second job on 2 cores moves them by more than the effects sought.
Exit status 2 when a run fails, naming it.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time


def peak_threads(proc):
    """The largest thread count of proc seen while it runs (sampled every 20 ms)."""
    peak = 0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    if line.startswith("Threads:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            break
        time.sleep(0.02)
    return peak


def run_once(binary, config, sets, out_dir, count_threads=False, command="run"):
    cmd = [binary, command, config, "--set", "experiment.out_dir=" + out_dir,
           "--set", "experiment.progress=off"]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    threads = peak_threads(proc) if count_threads else None
    output, _ = proc.communicate()
    if proc.returncode != 0:
        tail = output.strip().splitlines()[-1:] or ["(no output)"]
        print(f"ab_runs: {binary} {command} {config} failed with status {proc.returncode}: {tail[0]}",
              file=sys.stderr)
        sys.exit(2)
    runs = [os.path.join(out_dir, d) for d in os.listdir(out_dir)]
    with open(os.path.join(runs[0], "summary.csv")) as f:
        row = next(csv.DictReader(f))
    row["peak_threads"] = threads
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("configs", nargs="+", help="experiment configs (INI)")
    p.add_argument("--a", required=True, help="the baseline asgd binary")
    p.add_argument("--b", required=True, help="the asgd binary compared with it")
    p.add_argument("--rounds", type=int, default=5, help="runs of each binary per config")
    p.add_argument("--set", action="append", default=[], help="section.key=value, for both")
    p.add_argument("--set-a", action="append", default=[], help="section.key=value, for A only")
    p.add_argument("--set-b", action="append", default=[], help="section.key=value, for B only")
    p.add_argument("--threads", action="store_true", help="report each run's peak thread count")
    p.add_argument("--launch", action="store_true", help="run as processes (asgd launch)")
    p.add_argument("--out", help="write one row per run to this CSV")
    args = p.parse_args()
    if args.rounds < 1:
        print("ab_runs: --rounds must be at least 1", file=sys.stderr)
        return 2
    for b in (args.a, args.b):
        if not os.access(b, os.X_OK):
            print(f"ab_runs: {b} is not an executable asgd binary", file=sys.stderr)
            return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="asgd-ab-") as tmp:
        for r in range(1, args.rounds + 1):
            for config in args.configs:
                for label, binary, sets in (("a", args.a, args.set + args.set_a),
                                            ("b", args.b, args.set + args.set_b)):
                    out_dir = os.path.join(tmp, f"{label}-{r}-{len(rows)}")
                    os.makedirs(out_dir)
                    s = run_once(binary, config, sets, out_dir, args.threads,
                                 "launch" if args.launch else "run")
                    row = {"config": config, "binary": label, "round": r,
                           "samples_per_s": float(s["samples_per_s"]),
                           "wall_time_s": float(s["wall_time_s"]),
                           "final_test_accuracy": s["final_test_accuracy"]}
                    if args.threads:
                        row["peak_threads"] = s["peak_threads"]
                    rows.append(row)
    for config in args.configs:
        a = [x["samples_per_s"] for x in rows if x["config"] == config and x["binary"] == "a"]
        b = [x["samples_per_s"] for x in rows if x["config"] == config and x["binary"] == "b"]
        ratio = statistics.median(b) / statistics.median(a)
        threads = ""
        if args.threads:
            ta = max(x["peak_threads"] for x in rows if x["config"] == config and x["binary"] == "a")
            tb = max(x["peak_threads"] for x in rows if x["config"] == config and x["binary"] == "b")
            threads = f" peak threads a {ta} b {tb}"
        print(f"{os.path.basename(config)}: a {sorted(round(v) for v in a)} "
              f"b {sorted(round(v) for v in b)} b/a (medians) {ratio:.3f}{threads}")
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
