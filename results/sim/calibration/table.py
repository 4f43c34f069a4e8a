#!/usr/bin/env python3
"""Real against simulated, per worker count, from runs/*/{summary,staleness_histogram}.csv:
samples/s, mean staleness, and the share of pushes at each staleness. Three kinds of run:
real (processes over tcp), sim (a machine per simulated worker) and sim_cores (the workers
share the host's cores, sim.cores). Usage: python3 table.py [FOLDER]."""
import csv
import glob
import os
import sys
from collections import defaultdict

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
runs = {}
for run in glob.glob(os.path.join(folder, "runs", "*")):
    with open(os.path.join(run, "summary.csv"), newline="") as f:
        s = next(csv.DictReader(f))
    hist = defaultdict(int)
    with open(os.path.join(run, "staleness_histogram.csv"), newline="") as f:
        for r in csv.DictReader(f):
            hist[int(r["staleness"])] += int(r["count"])
    if s["transport"] != "sim":
        kind = "real"
    elif "sim.cores=" in s.get("time_model", ""):
        kind = "sim_cores"
    else:
        kind = "sim"
    runs[(int(s["workers"]), kind)] = (float(s["samples_per_s"]), float(s["staleness_mean"]),
                                       float(s["wall_time_s"]), float(s["final_test_accuracy"]),
                                       hist)

kinds = [k for k in ("sim", "sim_cores") if any(kind == k for _, kind in runs)]
print("| workers | simulated as | real samples/s | sim samples/s | gap | real staleness mean | "
      "sim staleness mean | gap | real / sim training s | real / sim final acc. |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for w in sorted({w for w, _ in runs}):
    for kind in kinds:
        if (w, "real") not in runs or (w, kind) not in runs:
            continue
        r, m = runs[(w, "real")], runs[(w, kind)]
        label = "a machine per worker" if kind == "sim" else "sharing the host's cores"
        print(f"| {w} | {label} | {r[0]:.0f} | {m[0]:.0f} | {100 * (m[0] - r[0]) / r[0]:+.1f} % | "
              f"{r[1]:.2f} | {m[1]:.2f} | {m[1] - r[1]:+.2f} | {r[2]:.2f} / {m[2]:.2f} | "
              f"{r[3]:.4f} / {m[3]:.4f} |")
print()
print("Share of pushes at each staleness (%):")
print()
for w in sorted({w for w, _ in runs}):
    hs = {k: runs[(w, k)][4] for k in ("real", "sim", "sim_cores") if (w, k) in runs}
    top = max(max(h) for h in hs.values())
    shown = min(top, 3 * w)
    cols = [str(v) for v in range(shown + 1)] + ([f">{shown}"] if top > shown else [])
    print(f"| {w} workers | " + " | ".join(cols) + " |")
    print("| --- |" + " ---: |" * len(cols))
    for k, h in hs.items():
        total = sum(h.values())
        cells = [f"{100 * h.get(v, 0) / total:.1f}" for v in range(shown + 1)]
        if top > shown:
            cells.append(f"{100 * sum(c for v, c in h.items() if v > shown) / total:.1f}")
        print(f"| {k} | " + " | ".join(cells) + " |")
    print()
