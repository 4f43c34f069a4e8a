#!/usr/bin/env python3
"""Least-squares line of mean staleness against workers over the runs of this folder, and
the closed form with the first round's warm-up: W workers, P pushes in all; the first
round's pushes see 0 .. W-1 others, every later push exactly W-1, so the mean is
(W-1) * (1 - W / (2P)). Usage: python3 fit.py [FOLDER] (default: this script's folder)."""
import csv
import glob
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = []
for path in glob.glob(os.path.join(folder, "runs", "*", "summary.csv")):
    with open(path, newline="") as f:
        r = next(csv.DictReader(f))
    w, p = int(r["workers"]), int(r["updates"])
    rows.append((w, float(r["staleness_mean"]), p, float(r["final_test_accuracy"])))
rows.sort()
n = len(rows)
if n < 2:
    sys.exit("fit.py: need at least two runs under " + folder)
mx = sum(w for w, *_ in rows) / n
my = sum(s for _, s, *_ in rows) / n
sxx = sum((w - mx) ** 2 for w, *_ in rows)
slope = sum((w - mx) * (s - my) for w, s, *_ in rows) / sxx
icept = my - slope * mx
ss_res = sum((s - (icept + slope * w)) ** 2 for w, s, *_ in rows)
ss_tot = sum((s - my) ** 2 for _, s, *_ in rows)
print("| workers | pushes | mean staleness | closed form (W-1)(1-W/2P) | workers - 1 | final test acc. |")
print("| ---: | ---: | ---: | ---: | ---: | ---: |")
for w, s, p, acc in rows:
    print(f"| {w} | {p} | {s:.3f} | {(w - 1) * (1 - w / (2 * p)):.3f} | {w - 1} | {acc:.4f} |")
print()
print(f"fit: mean staleness = {slope:.4f} * workers + {icept:.4f}  (R^2 = {1 - ss_res / ss_tot:.6f}, {n} runs)")
