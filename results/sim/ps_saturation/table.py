#!/usr/bin/env python3
"""Updates per virtual second and virtual milliseconds per update for each (workers, shards)
run of this folder, from runs/*/summary.csv. Usage: python3 table.py [FOLDER]."""
import csv
import glob
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
cells = {}
for path in glob.glob(os.path.join(folder, "runs", "*", "summary.csv")):
    with open(path, newline="") as f:
        r = next(csv.DictReader(f))
    cells[(int(r["workers"]), int(r["ps_shards"]))] = (float(r["updates_per_s"]),
                                                      float(r["staleness_mean"]))
workers = sorted({w for w, _ in cells})
shards = sorted({s for _, s in cells})
head = " | ".join(f"{s} shard{'s' if s > 1 else ''}: upd/s, ms/upd, staleness" for s in shards)
print(f"| workers | offered upd/s | {head} |")
print("| ---: | ---: |" + " ---: |" * len(shards))
for w in workers:
    row = []
    for s in shards:
        u, st = cells.get((w, s), (float("nan"), float("nan")))
        row.append(f"{u:.0f}, {1000 / u:.3f}, {st:.1f}")
    print(f"| {w} | {w / 0.020:.0f} | " + " | ".join(row) + " |")
