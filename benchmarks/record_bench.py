#!/usr/bin/env python3
"""Turns Google Benchmark CSV output into a results/bench/*.csv file.

    model_bench --benchmark_format=csv ... > raw.csv
    benchmarks/record_bench.py raw.csv results/bench/models.csv

Each row keeps the benchmark name, its times and counters, and adds the date, the
machine (CPU model, hardware threads) and the build description passed with --build,
so a figure is never separated from where it was measured. Only median rows are kept
when the run had repetitions.
"""
import argparse
import csv
import datetime
import os
import platform
import sys


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("raw", help="Google Benchmark --benchmark_format=csv output")
    p.add_argument("out", help="results/bench/<name>.csv to write")
    p.add_argument("--build", default="", help="build description (asgd version)")
    args = p.parse_args()

    with open(args.raw) as f:
        lines = f.read().splitlines()
    # Google Benchmark prints context lines before the header on some versions.
    start = next(i for i, l in enumerate(lines) if l.startswith("name,"))
    rows = list(csv.DictReader(lines[start:]))
    if any(r["name"].endswith("_median") for r in rows):
        rows = [r for r in rows if r["name"].endswith("_median")]
    if not rows:
        sys.exit(f"{args.raw}: no benchmark rows")
    drop = {"error_occurred", "error_message", "label"}
    counters = [k for k in rows[0].keys() if k not in drop]
    machine = f"{cpu_model()}; {os.cpu_count()} hardware threads"
    date = datetime.date.today().isoformat()
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["date", "machine", "build", "label"] + counters)
        for r in rows:
            w.writerow([date, machine, args.build, r.get("label", "")] +
                       [r[k] for k in counters])


if __name__ == "__main__":
    main()
