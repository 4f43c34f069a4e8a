#!/usr/bin/env python3
"""A/B of two asgd binaries on the same experiment configs: samples/s, alternating.

    benchmarks/ab_runs.py --a OLD/asgd --b NEW/asgd --rounds 5 \\
        experiments/configs/mnist_mlp_local_sgd.ini experiments/configs/mnist_mlp_agn.ini \\
        --set experiment.epochs=3 --out ab.csv

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


def run_once(binary, config, sets, out_dir):
    cmd = [binary, "run", config, "--set", "experiment.out_dir=" + out_dir,
           "--set", "experiment.progress=off"]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        tail = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
        print(f"ab_runs: {binary} run {config} failed with status {done.returncode}: {tail[0]}",
              file=sys.stderr)
        sys.exit(2)
    runs = [os.path.join(out_dir, d) for d in os.listdir(out_dir)]
    with open(os.path.join(runs[0], "summary.csv")) as f:
        return next(csv.DictReader(f))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("configs", nargs="+", help="experiment configs (INI)")
    p.add_argument("--a", required=True, help="the baseline asgd binary")
    p.add_argument("--b", required=True, help="the asgd binary compared with it")
    p.add_argument("--rounds", type=int, default=5, help="runs of each binary per config")
    p.add_argument("--set", action="append", default=[], help="section.key=value, for both")
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
                for label, binary in (("a", args.a), ("b", args.b)):
                    out_dir = os.path.join(tmp, f"{label}-{r}-{len(rows)}")
                    os.makedirs(out_dir)
                    s = run_once(binary, config, args.set, out_dir)
                    rows.append({"config": config, "binary": label, "round": r,
                                 "samples_per_s": float(s["samples_per_s"]),
                                 "wall_time_s": float(s["wall_time_s"]),
                                 "final_test_accuracy": s["final_test_accuracy"]})
    for config in args.configs:
        a = [x["samples_per_s"] for x in rows if x["config"] == config and x["binary"] == "a"]
        b = [x["samples_per_s"] for x in rows if x["config"] == config and x["binary"] == "b"]
        ratio = statistics.median(b) / statistics.median(a)
        print(f"{os.path.basename(config)}: a {sorted(round(v) for v in a)} "
              f"b {sorted(round(v) for v in b)} b/a (medians) {ratio:.3f}")
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
