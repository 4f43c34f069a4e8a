#!/usr/bin/env python3
"""How busy the shard's shaped link was in the real runs of run.sh with MONITOR=1: from
logs/real_*.links.csv (tc's byte counters and backlogs of the shard's two tbf queues,
sampled every 20 ms or as fast as tc answers), over the training (from the first sample
whose counters moved to the last), per direction: the mean utilisation (bytes on the
qdisc, headers included, over the line rate RATE_MBIT), the share of sampling intervals
below half the rate, and the mean backlog (bytes waiting in the queue). A link that is
busy all the time, as the simulated shard's is, shows 1.0 and 0 %.
Usage: python3 links.py [FOLDER] [RATE_MBIT]"""
import csv
import glob
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rate = float(sys.argv[2]) * 1e6 / 8 if len(sys.argv) > 2 else 100e6 / 8

print("| run | samples | mean interval ms | transmit: utilisation | below half | mean backlog KB "
      "| receive: utilisation | below half | mean backlog KB |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for path in sorted(glob.glob(os.path.join(folder, "logs", "real_*.links.csv"))):
    with open(path, newline="") as f:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    moved = [i for i in range(1, len(rows))
             if rows[i]["shard_rx_bytes"] - rows[i - 1]["shard_rx_bytes"] > 100000]
    if len(moved) < 2:
        continue
    rows = rows[moved[0] - 1:moved[-1] + 1]
    out = []
    for d in ("tx", "rx"):
        util, backlog = [], []
        for a, b in zip(rows, rows[1:]):
            dt = b["t_s"] - a["t_s"]
            util.append((b[f"shard_{d}_bytes"] - a[f"shard_{d}_bytes"]) / (rate * dt))
            backlog.append(b[f"shard_{d}_backlog"])
        total = (rows[-1][f"shard_{d}_bytes"] - rows[0][f"shard_{d}_bytes"]) / (
            rate * (rows[-1]["t_s"] - rows[0]["t_s"]))
        out += [f"{total:.3f}", f"{100 * sum(u < 0.5 for u in util) / len(util):.1f} %",
                f"{sum(backlog) / len(backlog) / 1e3:.0f}"]
    name = os.path.basename(path)[len("real_"):-len(".links.csv")]
    interval = 1e3 * (rows[-1]["t_s"] - rows[0]["t_s"]) / (len(rows) - 1)
    print(f"| {name} | {len(rows)} | {interval:.0f} | " + " | ".join(out) + " |")
