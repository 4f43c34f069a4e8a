#!/usr/bin/env python3
"""The families table and plots from suite/runs/*/{summary,convergence,config}.csv/ini:
table.csv (one row per run), table.md (time to target and bytes per network, strategy,
workers and stragglers; then every run) and time_to_target_<network>.png (a line per
strategy against workers; left panel no stragglers, right panel 5 % of the workers 4x
slower). Usage: /usr/bin/python3 table.py [FOLDER] (default: this script's folder)."""
import csv
import glob
import math
import os
import re
import sys

FAMILIES = {
    "async_sgd": "asynchronous PS", "agn": "asynchronous PS", "downpour": "asynchronous PS",
    "dynsgd": "asynchronous PS", "sync_sgd": "synchronous PS (5 % backups)",
    "easgd": "elastic", "allreduce_sgd": "collective allreduce (ring)",
    "allreduce_sgd_hd": "collective allreduce (halving-doubling)",
    "local_sgd": "local SGD (ring)", "dpsgd": "gossip (ring)",
}
ORDER = list(FAMILIES)
COLLECTIVE = ("allreduce_sgd", "allreduce_sgd_hd", "local_sgd", "dpsgd")  # no shards
LABEL = re.compile(r"^(?P<s>.+)_w(?P<w>\d+)_s(?P<f>\d+)_(?P<net>.+)$")


def read_config(path):
    cfg, section = {}, ""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]")
            elif "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                cfg[section + "." + k.strip()] = v.strip()
    return cfg


def load(folder):
    rows = []
    for run in sorted(glob.glob(os.path.join(folder, "suite", "runs", "*"))):
        if not os.path.exists(os.path.join(run, "summary.csv")):
            continue  # a run still going, or one that failed before its summary
        with open(os.path.join(run, "summary.csv"), newline="") as f:
            s = next(csv.DictReader(f))
        cfg = read_config(os.path.join(run, "config.ini"))
        m = LABEL.match(cfg["experiment.name"])
        if not m:
            continue
        with open(os.path.join(run, "convergence.csv"), newline="") as f:
            conv = list(csv.DictReader(f))
        target = float(s["target_accuracy"])
        ept = next((float(r["epoch"]) for r in conv
                    if r["test_accuracy"] not in ("", "nan") and float(r["test_accuracy"]) >= target),
                   math.nan)
        w = int(s["workers"])
        frac = float(cfg["delay.straggler_fraction"])
        ttt = float(s["time_to_target_s"])
        rows.append({
            "label": cfg["experiment.name"], "strategy": m["s"], "family": FAMILIES[m["s"]],
            "workers": w, "stragglers": f"{round(frac * w)} of {w}" if frac else "none",
            "straggler_fraction": frac, "network": m["net"], "shards": int(s["ps_shards"]),
            "learning_rate_last": float(conv[-1]["learning_rate"]),
            "reached": not math.isnan(ttt), "time_to_target_s": ttt, "epochs_to_target": ept,
            "best_test_accuracy": float(s["best_test_accuracy"]),
            "final_test_accuracy": float(s["final_test_accuracy"]),
            "virtual_time_s": float(s["wall_time_s"]), "epochs": float(s["epochs"]),
            "bytes_pushed": int(s["bytes_pushed"]), "bytes_pulled": int(s["bytes_pulled"]),
            "bytes_moved": int(s["bytes_pushed"]) + int(s["bytes_pulled"]),
            "samples_per_s": float(s["samples_per_s"]), "updates": int(s["updates"]),
            "staleness_mean": s["staleness_mean"], "dropped_pushes": int(s["dropped_pushes"]),
            "status": s["status"], "run_dir": os.path.relpath(run, folder),
        })
    rows.sort(key=lambda r: (r["network"], ORDER.index(r["strategy"]), r["workers"],
                             r["straggler_fraction"]))
    return rows


def fmt_time(r):
    if r["reached"]:
        return f"{r['time_to_target_s']:.3g}"
    return f"— ({r['best_test_accuracy']:.2f})"


def write(folder, rows):
    keys = list(rows[0].keys())
    with open(os.path.join(folder, "table.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    workers = sorted({r["workers"] for r in rows})
    fracs = sorted({r["straggler_fraction"] for r in rows})
    nets = sorted({r["network"] for r in rows})
    idx = {(r["network"], r["strategy"], r["workers"], r["straggler_fraction"]): r for r in rows}
    out = []
    head = " | ".join(f"{w}{' st.' if f else ''}" for f in fracs for w in workers)
    for what, title, cell in (
            ("time", "time to 0.90 test accuracy, virtual s (— = not reached in 3 epochs: best "
             "accuracy in brackets)", fmt_time),
            ("bytes", "GB through the workers' NICs (sent + received, summed over workers) until "
             "the target or the 3-epoch cap", lambda r: f"{r['bytes_moved'] / 1e9:.3g}"
             + ("" if r["reached"] else "*"))):
        for net in nets:
            out.append(f"### {net}: {title}\n")
            out.append("Columns: workers; `st.` = 5 % of them 4× slower.\n")
            out.append(f"| strategy | family | {head} |")
            out.append("| --- | --- |" + " ---: |" * (len(workers) * len(fracs)))
            for s in ORDER:
                cells = [cell(idx[(net, s, w, f)]) if (net, s, w, f) in idx else "(missing)"
                         for f in fracs for w in workers]
                if all(c == "(missing)" for c in cells):
                    continue
                out.append(f"| {s} | {FAMILIES[s]} | " + " | ".join(cells) + " |")
            if what == "bytes":
                out.append("\n\\* target not reached: the bytes of the whole 3 epochs.")
            out.append("")
    out.append("### Every run\n")
    out.append("| strategy | workers | stragglers | network | shards | time to 0.90 (virtual s) "
               "| epochs to 0.90 | best acc. | final acc. | virtual s run | epochs run | "
               "bytes moved (GB) | samples/s (virtual) | last learning rate |")
    out.append("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
               "| ---: | ---: |")
    for r in rows:
        out.append(
            f"| {r['strategy']} | {r['workers']} | {r['stragglers']} | {r['network']} | "
            f"{r['shards'] if r['strategy'] not in COLLECTIVE else '—'} | "
            f"{r['time_to_target_s']:.4g} | {r['epochs_to_target']:.2f} | "
            f"{r['best_test_accuracy']:.4f} | {r['final_test_accuracy']:.4f} | "
            f"{r['virtual_time_s']:.4g} | {r['epochs']:.2f} | {r['bytes_moved'] / 1e9:.3g} | "
            f"{r['samples_per_s']:.4g} | {r['learning_rate_last']:.4g} |".replace("| nan |", "| — |"))
    with open(os.path.join(folder, "table.md"), "w") as f:
        f.write("\n".join(out).replace("| nan |", "| — |") + "\n")


def plot(folder, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    styles = {s: (c, m) for s, c, m in zip(ORDER, plt.cm.tab10.colors, "os^vDPXh*p")}
    fracs = sorted({r["straggler_fraction"] for r in rows})
    workers = sorted({r["workers"] for r in rows})
    for net in sorted({r["network"] for r in rows}):
        sub = [r for r in rows if r["network"] == net]
        reached = [r["time_to_target_s"] for r in sub if r["reached"]]
        if not reached:
            continue
        ceiling = max(reached) * 3  # where "not reached" is drawn
        fig, axes = plt.subplots(1, len(fracs), figsize=(12, 5.5), sharey=True, dpi=100)
        for ax, frac in zip(axes, fracs):
            for s in ORDER:
                pts = sorted((r["workers"], r) for r in sub
                             if r["strategy"] == s and r["straggler_fraction"] == frac)
                if not pts:
                    continue
                c, m = styles[s]
                xs = [w for w, r in pts if r["reached"]]
                ys = [r["time_to_target_s"] for w, r in pts if r["reached"]]
                ax.plot(xs, ys, marker=m, color=c, label=s)
                miss = [w for w, r in pts if not r["reached"]]
                ax.scatter(miss, [ceiling] * len(miss), marker=m, facecolors="none",
                           edgecolors=c, s=60)
            ax.axhline(ceiling, color="0.7", lw=0.8, ls=":")
            ax.text(workers[0], ceiling * 1.15, "not reached in 3 epochs (hollow)", fontsize=8,
                    color="0.4")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(workers)
            ax.set_xticklabels([str(w) for w in workers])
            ax.set_xlabel("workers")
            ax.set_title("no stragglers" if not frac else
                         f"{frac:.0%} of the workers 4× slower")
            ax.grid(True, which="both", alpha=0.3)
        axes[0].set_ylabel("virtual seconds to 0.90 test accuracy")
        axes[-1].legend(fontsize=8, loc="lower right")
        fig.suptitle(f"MNIST MLP 784-64-10, batch 8 per worker, network {net}: "
                     "time to 0.90 test accuracy")
        fig.tight_layout()
        fig.savefig(os.path.join(folder, f"time_to_target_{net}.png"))
        plt.close(fig)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rows = load(folder)
    if not rows:
        sys.exit(f"table.py: no runs under {folder}/suite/runs")
    write(folder, rows)
    plot(folder, rows)
    print(f"{len(rows)} runs: table.csv, table.md, time_to_target_*.png in {folder}")


if __name__ == "__main__":
    main()
