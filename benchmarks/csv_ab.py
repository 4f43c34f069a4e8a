#!/usr/bin/env python3
"""Whether two asgd binaries write the same CSVs for the same fixed-seed runs.

    benchmarks/csv_ab.py --a OLD/asgd --b NEW/asgd \\
        --case 'sim_async=experiments/configs/mnist_mlp_async_sgd.ini:cluster.transport=sim,delay.compute=lognormal' \\
        --case 'launch_sync=launch:experiments/configs/mnist_mlp_sync_sgd.ini' --timed launch_sync \\
        --set experiment.epochs=0.2

A case is NAME=[launch:]CONFIG[:key=value,key=value...]: `asgd run CONFIG` (or `asgd
launch CONFIG`) with the --set values for every case, then the case's own. Each binary runs
each case once, in its own folder; every CSV of the two run folders (convergence, workers,
staleness, staleness_histogram, summary) is then compared cell by cell, the run id left
out. A case named by --timed also leaves out what the machine's timing decides (the time,
rate and time-to-target columns) and compares staleness.csv's rows as a sorted multiset
(worker threads and processes interleave their records as they run). A simulated run whose
delay model is `measured` times its own compute and is not reproducible by design: give
such a case a model of its own (lognormal, constant).

Prints one line per case (identical, or the first cells that differ) and exits 1 when a
case differs, 2 when a run fails.
"""
import argparse
import csv
import glob
import os
import subprocess
import sys
import tempfile

# Columns whose values the machine's timing decides (--timed).
TIMED = {"time_s", "wall_time_s", "samples_per_s", "updates_per_s", "compute_time_s",
         "wait_time_s", "comm_time_s", "time_to_target_s", "overlap_s"}
ALWAYS_DROPPED = {"run_id"}


def parse_case(text):
    name, _, rest = text.partition("=")
    if not name or not rest:
        sys.exit(f"csv_ab: --case {text!r}: expected NAME=[launch:]CONFIG[:key=value,...]")
    command = "run"
    if rest.startswith("launch:"):
        command, rest = "launch", rest[len("launch:"):]
    config, _, sets = rest.partition(":")
    return name, command, config, [s for s in sets.split(",") if s]


def run(binary, command, config, sets, out_dir):
    cmd = [binary, command, config, "--set", "experiment.out_dir=" + out_dir,
           "--set", "experiment.progress=off"]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print(p.stdout[-2000:], file=sys.stderr)
        sys.exit(f"csv_ab: {' '.join(cmd)} exited with {p.returncode}")
    folders = [d for d in glob.glob(os.path.join(out_dir, "*")) if os.path.isdir(d)]
    if len(folders) != 1:
        sys.exit(f"csv_ab: {out_dir}: expected one run folder, found {len(folders)}")
    return folders[0]


def table(path, timed):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return [], []
    header = rows[0]
    drop = ALWAYS_DROPPED | (TIMED if timed else set())
    keep = [i for i, h in enumerate(header) if h not in drop]
    body = [[r[i] for i in keep] for r in rows[1:]]
    if timed and os.path.basename(path) == "staleness.csv":
        body.sort()
    return [header[i] for i in keep], body


def compare(dir_a, dir_b, timed):
    """Differences between the two folders' CSVs (empty: identical)."""
    names_a = sorted(os.path.basename(p) for p in glob.glob(os.path.join(dir_a, "*.csv")))
    names_b = sorted(os.path.basename(p) for p in glob.glob(os.path.join(dir_b, "*.csv")))
    if names_a != names_b:
        return [f"CSV files differ: {names_a} vs {names_b}"]
    diffs = []
    for name in names_a:
        ha, a = table(os.path.join(dir_a, name), timed)
        hb, b = table(os.path.join(dir_b, name), timed)
        if ha != hb:
            diffs.append(f"{name}: header {ha} vs {hb}")
            continue
        if len(a) != len(b):
            diffs.append(f"{name}: {len(a)} rows vs {len(b)}")
            continue
        for i, (ra, rb) in enumerate(zip(a, b)):
            for h, va, vb in zip(ha, ra, rb):
                if va != vb:
                    diffs.append(f"{name} row {i + 1} {h}: {va} vs {vb}")
            if len(diffs) > 5:
                return diffs
    return diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the first asgd binary")
    ap.add_argument("--b", required=True, help="the second asgd binary")
    ap.add_argument("--case", action="append", default=[], required=True)
    ap.add_argument("--timed", action="append", default=[],
                    help="a case whose timing columns and staleness row order are left out")
    ap.add_argument("--set", action="append", default=[], help="for every case")
    ap.add_argument("--keep", help="keep the run folders here (default: a temporary folder)")
    args = ap.parse_args()

    root = args.keep or tempfile.mkdtemp(prefix="csv_ab-")
    failed = False
    for text in args.case:
        name, command, config, sets = parse_case(text)
        timed = name in args.timed
        dirs = []
        for side, binary in (("a", args.a), ("b", args.b)):
            out = os.path.join(root, name, side)
            os.makedirs(out, exist_ok=True)
            dirs.append(run(binary, command, config, args.set + sets, out))
        diffs = compare(dirs[0], dirs[1], timed)
        what = "identical" + (" (timings and staleness row order aside)" if timed else "")
        print(f"{name}: {what if not diffs else 'DIFFERENT'}")
        for d in diffs:
            print(f"  {d}")
        failed = failed or bool(diffs)
    if not args.keep:
        print(f"run folders: {root}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
