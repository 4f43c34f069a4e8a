#!/usr/bin/env python3
"""Per run of this folder: rounds, virtual ms per round, time and epochs to the target, and
the dropped pushes, from runs/*/{summary,convergence}.csv. Usage: python3 table.py [FOLDER]."""
import csv
import glob
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = []
for run in glob.glob(os.path.join(folder, "runs", "*")):
    with open(os.path.join(run, "summary.csv"), newline="") as f:
        s = next(csv.DictReader(f))
    with open(os.path.join(run, "config.ini")) as f:
        cfg = {k.strip(): v.strip() for k, v in (l.split("=", 1) for l in (x.strip() for x in f)
                                                   if "=" in l and not l.startswith("#"))}
    agg = int(cfg["replicas_to_aggregate"])
    frac = float(cfg["straggler_fraction"])
    target = float(s["target_accuracy"])
    epochs_to_target = float("nan")
    with open(os.path.join(run, "convergence.csv"), newline="") as f:
        for r in csv.DictReader(f):
            if r.get("test_accuracy") not in (None, "", "nan") and float(r["test_accuracy"]) >= target:
                epochs_to_target = float(r["epoch"])
                break
    applied = int(s["steps"]) - int(s["dropped_pushes"])
    rounds = applied / agg
    rows.append((-frac, -agg, int(s["workers"]), agg, frac, rounds,
                 1000 * float(s["wall_time_s"]) / rounds, float(s["time_to_target_s"]),
                 epochs_to_target, int(s["dropped_pushes"]), float(s["final_test_accuracy"])))
rows.sort()
print("| stragglers | replicas_to_aggregate (backups) | rounds | ms per round | time to 0.97 (virtual s) | epochs to 0.97 | dropped pushes | final test acc. |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for _, _, w, agg, frac, rounds, ms, ttt, ept, dropped, acc in rows:
    who = f"{round(frac * w)} of {w}, 4x" if frac else "none"
    print(f"| {who} | {agg} ({w - agg}) | {rounds:.0f} | {ms:.1f} | {ttt:.1f} | {ept:.2f} | {dropped} | {acc:.4f} |")
