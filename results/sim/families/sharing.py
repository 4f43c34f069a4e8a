#!/usr/bin/env python3
"""The parameter-server rows of the families result under two network models: table.csv
(the default, whole messages FIFO per NIC side) against interleaved/table.csv (the same
runs with network.sharing = interleaved: 16 KiB chunks drawn at random, the model that
matched real TCP flows over shaped links, results/sim/calibration/netns/). For each
network, strategy, worker count and straggler setting: the time to the target under each
model and their ratio (interleaved / FIFO), or the best accuracy where it was not reached,
and the samples per second of both. Writes interleaved/sharing.csv and prints one markdown
table per network.

Usage: /usr/bin/python3 sharing.py [FOLDER] (default: this script's folder)."""
import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "calibration"))
from pairs import natural, write_csv  # noqa: E402


def rows_of(path):
    with open(path, newline="") as f:
        return {r["label"]: r for r in csv.DictReader(f)}


def cell(r):
    if r["reached"] == "True":
        return f"{float(r['time_to_target_s']):.3g}"
    return f"— ({float(r['best_test_accuracy']):.2f})"


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    fifo = rows_of(os.path.join(folder, "table.csv"))
    inter = rows_of(os.path.join(folder, "interleaved", "table.csv"))
    cols = ["label", "network", "strategy", "workers", "stragglers", "fifo_time_to_target_s",
            "interleaved_time_to_target_s", "ratio", "fifo_samples_per_s",
            "interleaved_samples_per_s", "fifo_best_accuracy", "interleaved_best_accuracy"]
    out = []
    for label in sorted(inter, key=natural):
        if label not in fifo:
            continue
        a, b = fifo[label], inter[label]
        ratio = ""
        if a["reached"] == "True" and b["reached"] == "True":
            ratio = f"{float(b['time_to_target_s']) / float(a['time_to_target_s']):.2f}"
        out.append({"label": label, "network": b["network"], "strategy": b["strategy"],
                    "workers": b["workers"], "stragglers": b["stragglers"],
                    "fifo_time_to_target_s": a["time_to_target_s"] if a["reached"] == "True" else "",
                    "interleaved_time_to_target_s":
                        b["time_to_target_s"] if b["reached"] == "True" else "",
                    "ratio": ratio, "fifo_samples_per_s": a["samples_per_s"],
                    "interleaved_samples_per_s": b["samples_per_s"],
                    "fifo_best_accuracy": a["best_test_accuracy"],
                    "interleaved_best_accuracy": b["best_test_accuracy"]})
    write_csv(os.path.join(folder, "interleaved", "sharing.csv"), cols, out)
    order = ["async_sgd", "agn", "downpour", "dynsgd", "sync_sgd", "easgd"]
    workers = sorted({int(r["workers"]) for r in out})
    for net in sorted({r["network"] for r in out}):
        print(f"#### {net}: time to 0.90, virtual s, FIFO → interleaved (ratio)\n")
        head = [f"{w}" for w in workers] + [f"{w} st." for w in workers]
        print("| strategy | " + " | ".join(head) + " |")
        print("| --- | " + " | ".join("---:" for _ in head) + " |")
        for s in order:
            cells = []
            for none in (True, False):
                for w in workers:
                    label = next((r["label"] for r in out if r["network"] == net and
                                  r["strategy"] == s and int(r["workers"]) == w and
                                  (r["stragglers"] == "none") == none), None)
                    if label is None:
                        cells.append("")
                        continue
                    a, b = fifo[label], inter[label]
                    ratio = next(r["ratio"] for r in out if r["label"] == label)
                    cells.append(f"{cell(a)} → {cell(b)}" + (f" ({ratio})" if ratio else ""))
            print(f"| {s} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
