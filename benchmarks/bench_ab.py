#!/usr/bin/env python3
"""A/B of two builds of one Google Benchmark binary on a ratio counter, alternating.

    benchmarks/bench_ab.py --a OLD/benchmarks/transport_bench --b build/benchmarks/transport_bench \\
        --filter '^BM_(Raw)?(Push|Pull|PushPull)/(inproc|ipc|tcp)/(64B|4KiB|64KiB|1MiB)/inflight:(1|8)/(shards:1/)?clients:1/' \\
        --counter vs_raw --rounds 2 --out ab.csv

Each round runs A, then B, with --benchmark_repetitions=3 (so drift of the machine's load
falls on both alike), and keeps each case's median of the counter. The counter should be a
ratio the binary measures against its own baseline in the same run (transport_bench's
vs_raw): absolute times on a shared 2-core machine move by more than the effects sought.
Prints per case the rounds of A and B and B's median over A's, then the geometric mean of
those ratios over every case both builds measured; --out writes the same as a CSV. Cases
whose name starts with BM_Raw (the baselines) are left out. Exit status 2 when a binary
fails or measures nothing, naming it.
"""
import argparse
import csv
import math
import os
import statistics
import subprocess
import sys


def run_once(binary, pattern, counter):
    cmd = [binary, "--benchmark_filter=" + pattern, "--benchmark_repetitions=3",
           "--benchmark_report_aggregates_only=true", "--benchmark_format=csv"]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        print(f"bench_ab: {binary} failed with status {done.returncode}: {tail[0]}",
              file=sys.stderr)
        sys.exit(2)
    lines = done.stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("name,")), None)
    values = {}
    if start is not None:
        for r in csv.DictReader(lines[start:]):
            name = r["name"]
            if not name.endswith("_median") or name.startswith("BM_Raw"):
                continue
            value = r.get(counter, "")
            if value in ("", "nan"):
                continue
            values[name.split("/min_time")[0].removesuffix("_median")] = float(value)
    if not values:
        print(f"bench_ab: {binary} measured no case with the counter {counter}", file=sys.stderr)
        sys.exit(2)
    return values


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", required=True, help="the baseline build of the benchmark binary")
    p.add_argument("--b", required=True, help="the build compared with it")
    p.add_argument("--filter", required=True, help="--benchmark_filter for both")
    p.add_argument("--counter", default="vs_raw", help="the ratio counter to compare")
    p.add_argument("--rounds", type=int, default=2, help="runs of each binary")
    p.add_argument("--out", help="write one row per case to this CSV")
    args = p.parse_args()
    if args.rounds < 1:
        print("bench_ab: --rounds must be at least 1", file=sys.stderr)
        return 2
    for b in (args.a, args.b):
        if not os.access(b, os.X_OK):
            print(f"bench_ab: {b} is not an executable benchmark binary", file=sys.stderr)
            return 2
    runs = {"a": [], "b": []}
    for _ in range(args.rounds):
        for label, binary in (("a", args.a), ("b", args.b)):
            runs[label].append(run_once(binary, args.filter, args.counter))
    cases = sorted(set.intersection(*(set(r) for r in runs["a"] + runs["b"])))
    rows = []
    for case in cases:
        a = [r[case] for r in runs["a"]]
        b = [r[case] for r in runs["b"]]
        rows.append({"case": case, "a": " ".join(f"{v:.3f}" for v in a),
                     "b": " ".join(f"{v:.3f}" for v in b),
                     "b_over_a": statistics.median(b) / statistics.median(a)})
        print(f"{case}: a {rows[-1]['a']} b {rows[-1]['b']} b/a {rows[-1]['b_over_a']:.3f}")
    logs = [math.log(r["b_over_a"]) for r in rows if r["b_over_a"] > 0]
    geomean = math.exp(sum(logs) / len(logs)) if logs else float("nan")
    print(f"{len(rows)} cases, {args.rounds} rounds: geometric mean of b/a {geomean:.3f}")
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["case", "a", "b", "b_over_a"])
            w.writeheader()
            for r in rows:
                w.writerow({**r, "b_over_a": f"{r['b_over_a']:.4f}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
