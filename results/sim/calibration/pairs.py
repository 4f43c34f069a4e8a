#!/usr/bin/env python3
"""Real runs against their simulated twins (issue 33 item 3): in FOLDER/runs/, a run named
real_KEY (experiment.name) is paired with sim_KEY. For each pair: samples/s real and
simulated and the gap (sim / real - 1), mean staleness of both, and the Kolmogorov-Smirnov
distance between their staleness distributions (the largest difference between the two
cumulative shares of pushes at staleness <= s, over every s: 0 = the same histogram, 1 =
disjoint), from summary.csv and staleness_histogram.csv. Writes FOLDER/pairs.csv and prints
the table as markdown. A real run without its simulated twin (e.g. a strategy the simulator
refuses) is listed with the simulated columns empty. A real run real_MODE_KEY without a
sim_MODE_KEY is paired with sim_KEY (one simulation, the twin of the threads and the
processes run).

Usage: python3 pairs.py FOLDER"""
import csv
import glob
import os
import re
import sys
from collections import defaultdict

NAME = re.compile(r"^\d{8}-\d{6}-(real|sim)_(.+)-s\d+$")


def load(run):
    with open(os.path.join(run, "summary.csv"), newline="") as f:
        s = next(csv.DictReader(f))
    hist = defaultdict(int)
    path = os.path.join(run, "staleness_histogram.csv")
    if os.path.exists(path):
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                hist[int(r["staleness"])] += int(r["count"])
    return s, hist


def load_runs(folder, kinds):
    """FOLDER/runs/<date>-<time>-<kind>_<key>-s<seed> for each kind in `kinds` that has a
    summary: {(key, kind): load(run)}."""
    name = re.compile(r"^\d{8}-\d{6}-(" + "|".join(kinds) + r")_(.+)-s\d+$")
    runs = {}
    for run in sorted(glob.glob(os.path.join(folder, "runs", "*"))):
        m = name.match(os.path.basename(run))
        if m and os.path.exists(os.path.join(run, "summary.csv")):
            runs[(m.group(2), m.group(1))] = load(run)
    return runs


def natural(key):
    """A sort key that orders the numbers in `key` by value (w2 before w16)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key)]


def write_csv(path, cols, rows):
    """rows (dicts; missing cells empty) under the header cols."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, restval="")
        w.writeheader()
        w.writerows(rows)


def rotation(hist, workers):
    """Share of the pushes at staleness exactly workers - 1 (a strict rotation's)."""
    total = sum(hist.values())
    return hist.get(workers - 1, 0) / total if total else float("nan")


def twin_rows(runs, kinds, select):
    """One row per key that has a real run and a `select` twin (runs: load_runs'), in
    natural order: the real run's samples/s, mean staleness and rotation, and for each kind
    of `kinds` that has a twin its samples/s, gap (sim / real - 1, %), mean staleness,
    rotation and KS distance from the real histogram. Returns (cols, rows)."""
    keys = sorted({k for k, kind in runs if kind == select and (k, "real") in runs},
                  key=natural)
    cols = ["key", "workers", "real_samples_per_s", "real_staleness_mean", "real_rotation"]
    for kind in kinds:
        cols += [f"{kind}_samples_per_s", f"{kind}_gap_pct", f"{kind}_staleness_mean",
                 f"{kind}_rotation", f"{kind}_staleness_ks"]
    rows = []
    for k in keys:
        rs, rh = runs[(k, "real")]
        workers = int(rs["workers"])
        real = float(rs["samples_per_s"])
        row = {"key": k, "workers": workers, "real_samples_per_s": f"{real:.1f}",
               "real_staleness_mean": f"{float(rs['staleness_mean']):.3f}",
               "real_rotation": f"{rotation(rh, workers):.3f}"}
        for kind in kinds:
            if (k, kind) not in runs:
                continue
            ss, sh = runs[(k, kind)]
            s = float(ss["samples_per_s"])
            row.update({f"{kind}_samples_per_s": f"{s:.1f}",
                        f"{kind}_gap_pct": f"{100 * (s / real - 1):+.1f}",
                        f"{kind}_staleness_mean": f"{float(ss['staleness_mean']):.3f}",
                        f"{kind}_rotation": f"{rotation(sh, workers):.3f}",
                        f"{kind}_staleness_ks": f"{ks(rh, sh):.3f}"})
        rows.append(row)
    return cols, rows


def ks(a, b):
    ta, tb = sum(a.values()), sum(b.values())
    if ta == 0 or tb == 0:
        return float("nan")
    ca = cb = 0.0
    d = 0.0
    for v in range(max(max(a), max(b)) + 1):
        ca += a.get(v, 0) / ta
        cb += b.get(v, 0) / tb
        d = max(d, abs(ca - cb))
    return d


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "."
    runs = {}
    for run in sorted(glob.glob(os.path.join(folder, "runs", "*"))):
        m = NAME.match(os.path.basename(run))
        if m and os.path.exists(os.path.join(run, "summary.csv")):
            runs[(m.group(2), m.group(1))] = load(run)
    keys = sorted({k for k, kind in runs if kind == "real"},
                  key=lambda k: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", k)])
    cols = ["key", "algorithm", "workers", "real_samples_per_s", "sim_samples_per_s", "gap_pct",
            "real_staleness_mean", "sim_staleness_mean", "staleness_ks", "real_time_s",
            "sim_time_s", "real_pushes", "sim_pushes", "real_final_accuracy",
            "sim_final_accuracy"]
    rows = []
    for k in keys:
        if (k, "real") not in runs:
            continue
        rs, rh = runs[(k, "real")]
        row = {"key": k, "algorithm": rs["algorithm"], "workers": rs["workers"],
               "real_samples_per_s": f"{float(rs['samples_per_s']):.1f}",
               "real_staleness_mean": f"{float(rs['staleness_mean']):.3f}",
               "real_time_s": f"{float(rs['wall_time_s']):.2f}",
               "real_pushes": str(sum(rh.values())),
               "real_final_accuracy": rs["final_test_accuracy"]}
        twin = k if (k, "sim") in runs else k.split("_", 1)[-1]
        if (twin, "sim") in runs:
            ss, sh = runs[(twin, "sim")]
            r, s = float(rs["samples_per_s"]), float(ss["samples_per_s"])
            row.update({"sim_samples_per_s": f"{s:.1f}", "gap_pct": f"{100 * (s / r - 1):+.1f}",
                        "sim_staleness_mean": f"{float(ss['staleness_mean']):.3f}",
                        "staleness_ks": f"{ks(rh, sh):.3f}",
                        "sim_time_s": f"{float(ss['wall_time_s']):.2f}",
                        "sim_pushes": str(sum(sh.values())),
                        "sim_final_accuracy": ss["final_test_accuracy"]})
        rows.append(row)
    write_csv(os.path.join(folder, "pairs.csv"), cols, rows)
    print("| run | workers | real samples/s | sim samples/s | gap | real staleness mean | "
          "sim staleness mean | KS distance | real / sim s | real / sim final acc. |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        g = lambda c: r.get(c) or "–"
        gap = (g("gap_pct") + " %") if r.get("gap_pct") else "–"
        print(f"| {r['key']} | {r['workers']} | {r['real_samples_per_s']} | "
              f"{g('sim_samples_per_s')} | {gap} | {r['real_staleness_mean']} | "
              f"{g('sim_staleness_mean')} | {g('staleness_ks')} | {r['real_time_s']} / "
              f"{g('sim_time_s')} | {r['real_final_accuracy']} / {g('sim_final_accuracy')} |")


if __name__ == "__main__":
    main()
