#!/usr/bin/env python3
"""The tuned families tables and plots, from the stage folders tuned.sh writes (mlp/,
stragglers/, retune64/, cnn/: each an `asgd suite` folder with best.csv and tune.csv, or
comparison.csv for the plain straggler suite) and the untuned table beside them (../table.csv,
../interleaved/table.csv). Writes, into FOLDER:
  table.csv   one row per (problem, stage, strategy, workers, network): the tuned rate, the
              metric's seeds (n, mean, std, 95 % half-width, low, high), reached or not, the
              best accuracy, and whether the point's interval overlaps its column's winner's
  table.md    the pivot tables (strategy x workers per network and problem), winners in
              bold, points the seeds do not separate from the winner marked ~
  time_to_target_<problem>_<network>.png   mean with its interval against workers
Usage: /usr/bin/python3 tuned_table.py [FOLDER] (default: tuned/ beside this script)."""
import csv
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from table import FAMILIES  # noqa: E402 (the untuned table's family names, beside this script)

ORDER = list(FAMILIES)
POINT = re.compile(r"^(?P<s>.+)_w(?P<w>\d+)_(?P<net>dc_10gbe|wan)$")
# t(0.975, df) for the seeds' intervals of the straggler suite (its comparison gives means).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}


def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def interval(values):
    """n, mean, std, 95 % half-width of the finite values (nan where too few)."""
    v = [x for x in values if not math.isnan(x)]
    n = len(v)
    if n == 0:
        return 0, math.nan, math.nan, math.nan
    mean = sum(v) / n
    if n == 1:
        return 1, mean, math.nan, math.nan
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1))
    return n, mean, std, T975.get(n - 1, 1.96) * std / math.sqrt(n)


def tuned_points(folder, problem, stage):
    """The rows of a tuned stage: best.csv's chosen value and interval, with the seeds' best
    accuracy from tune.csv (the accuracy a point that missed the target reached)."""
    path = os.path.join(folder, stage)
    if not os.path.exists(os.path.join(path, "best.csv")):
        return []
    seeds_best = {}
    tries = {}
    for r in read_csv(os.path.join(path, "tune.csv")):
        if r["stage"] == "seeds":
            seeds_best.setdefault(r["point"], []).append(num(r["best_test_accuracy"]))
        else:
            tries[r["point"]] = tries.get(r["point"], 0) + 1
    rows = []
    for b in read_csv(os.path.join(path, "best.csv")):
        m = POINT.match(b["point"])
        n_seeds = int(b["seeds"])
        n = int(b["n"] or 0)
        rows.append({
            "problem": problem, "stage": stage, "strategy": m["s"], "family": FAMILIES[m["s"]],
            "workers": int(m["w"]), "network": m["net"],
            "learning_rate": b["algorithm.learning_rate"], "grid_runs": tries.get(b["point"], 0),
            "on_edge": b["on_edge"], "seeds": n_seeds, "reached": n,
            "mean": num(b["mean"]), "std": num(b["std"]), "ci95": num(b["ci95"]),
            "low": num(b["low"]), "high": num(b["high"]),
            "final_accuracy": num(b["final_accuracy_mean"]),
            "best_accuracy": max(seeds_best.get(b["point"], [math.nan])),
        })
    return rows


def straggler_points(folder):
    """The plain straggler suite: its seeds of each point (comparison.csv's rows grouped)."""
    path = os.path.join(folder, "stragglers", "comparison.csv")
    if not os.path.exists(path):
        return []
    rate = {}
    for r in tuned_points(folder, "mlp", "mlp"):
        rate[(r["strategy"], r["workers"], r["network"])] = r["learning_rate"]
    groups = {}
    for r in read_csv(path):
        groups.setdefault(r["label"], []).append(r)
    rows = []
    for label, runs in groups.items():
        m = POINT.match(label)
        times = [num(r["time_to_target_s"]) for r in runs]
        n, mean, std, ci = interval(times)
        key = (m["s"], int(m["w"]), m["net"])
        rows.append({
            "problem": "mlp", "stage": "stragglers", "strategy": m["s"],
            "family": FAMILIES[m["s"]], "workers": int(m["w"]), "network": m["net"],
            "learning_rate": rate.get(key, ""), "grid_runs": 0, "on_edge": "",
            "seeds": len(runs), "reached": n if n == len(runs) else 0,
            "mean": mean if n == len(runs) else math.nan,
            "std": std, "ci95": ci,
            "low": mean - ci if n > 1 else math.nan, "high": mean + ci if n > 1 else math.nan,
            "final_accuracy": interval([num(r["final_test_accuracy"]) for r in runs])[1],
            "best_accuracy": max(num(r["best_test_accuracy"]) for r in runs),
        })
    return rows


def mark_winners(rows):
    """Per (problem, stage, network, workers): the lowest mean wins; a point whose interval
    overlaps the winner's is 'not separated' from it."""
    cols = {}
    for r in rows:
        cols.setdefault((r["problem"], r["stage"], r["network"], r["workers"]), []).append(r)
    for col in cols.values():
        scored = [r for r in col if r["reached"] == r["seeds"] and not math.isnan(r["mean"])]
        for r in col:
            r["verdict"] = "not reached" if r not in scored else "slower"
        if not scored:
            continue
        best = min(scored, key=lambda r: r["mean"])
        for r in scored:
            if r is best:
                r["verdict"] = "winner"
            elif not math.isnan(r["low"]) and not math.isnan(best["high"]) and r["low"] <= best["high"]:
                r["verdict"] = "not separated"


def g3(x):
    return "—" if math.isnan(x) else f"{x:.3g}"


def cell(r):
    if r is None:
        return ""
    if r["verdict"] == "not reached" or r["reached"] < r["seeds"]:
        part = f" {r['reached']}/{r['seeds']}" if r["reached"] else ""
        return f"—{part} ({r['best_accuracy']:.2f}) η {float(r['learning_rate']):.3g}" if r["learning_rate"] else "—"
    text = f"{g3(r['mean'])} ± {g3(r['ci95'])}"
    if r["verdict"] == "winner":
        text = f"**{text}**"
    elif r["verdict"] == "not separated":
        text = f"~{text}"
    return f"{text} η {float(r['learning_rate']):.3g}"


def pivot(rows, problem, stage, network, md, title):
    sel = [r for r in rows if r["problem"] == problem and r["stage"] == stage and r["network"] == network]
    if not sel:
        return
    sizes = sorted({r["workers"] for r in sel})
    md.append(f"#### {title}\n")
    md.append("| strategy | family | " + " | ".join(str(w) for w in sizes) + " |")
    md.append("| --- | --- | " + " | ".join("---:" for _ in sizes) + " |")
    for s in ORDER:
        by = {r["workers"]: r for r in sel if r["strategy"] == s}
        if not by:
            continue
        md.append(f"| {s} | {FAMILIES[s]} | " + " | ".join(cell(by.get(w)) for w in sizes) + " |")
    md.append("")


def untuned(folder):
    """The untuned table (one policy, one seed): the collectives from ../table.csv (FIFO; they
    keep their own model), the parameter servers from ../interleaved/table.csv."""
    base = os.path.dirname(os.path.abspath(folder))
    rows = {}
    for name in ("table.csv", os.path.join("interleaved", "table.csv")):
        path = os.path.join(base, name)
        if not os.path.exists(path):
            continue
        for r in read_csv(path):
            if r["stragglers"] != "none":
                continue
            ps = r["strategy"] not in ("allreduce_sgd", "allreduce_sgd_hd", "local_sgd", "dpsgd")
            if ps == name.startswith("interleaved"):
                rows[(r["strategy"], int(r["workers"]), r["network"])] = r
    return rows


def untuned_pivot(rows, network, md):
    sel = {k: v for k, v in rows.items() if k[2] == network}
    if not sel:
        return
    sizes = sorted({k[1] for k in sel})
    md.append(f"#### {network}: untuned (one policy, one seed), time to 0.90, virtual s\n")
    md.append("| strategy | " + " | ".join(str(w) for w in sizes) + " |")
    md.append("| --- | " + " | ".join("---:" for _ in sizes) + " |")
    for s in ORDER:
        cells = []
        for w in sizes:
            r = sel.get((s, w, network))
            if r is None:
                cells.append("")
            elif r["reached"] == "True":
                cells.append(f"{num(r['time_to_target_s']):.3g} η {num(r['learning_rate_last']):.3g}")
            else:
                cells.append(f"— ({num(r['best_test_accuracy']):.2f})")
        if any(cells):
            md.append(f"| {s} | " + " | ".join(cells) + " |")
    md.append("")


def plot(rows, problem, stage, network, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("tuned_table.py: no matplotlib; plots skipped", file=sys.stderr)
        return
    sel = [r for r in rows if r["problem"] == problem and r["stage"] == stage and r["network"] == network]
    if not sel:
        return
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    for s in ORDER:
        pts = sorted((r["workers"], r["mean"], r["ci95"]) for r in sel
                     if r["strategy"] == s and r["reached"] == r["seeds"] and not math.isnan(r["mean"]))
        if not pts:
            continue
        ws, ms, cs = zip(*pts)
        ax.errorbar(ws, ms, yerr=[0 if math.isnan(c) else c for c in cs], marker="o",
                    capsize=3, label=s)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("workers")
    ax.set_ylabel("time to target, virtual s (mean of 3 seeds, 95 % CI)")
    ax.set_title(f"{problem}, {network}: tuned rates")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "tuned")
    rows = (tuned_points(folder, "mlp", "mlp") + straggler_points(folder)
            + tuned_points(folder, "mlp", "retune64") + tuned_points(folder, "cnn", "cnn"))
    mark_winners(rows)
    columns = ["problem", "stage", "strategy", "family", "workers", "network", "learning_rate",
               "grid_runs", "on_edge", "seeds", "reached", "mean", "std", "ci95", "low", "high",
               "final_accuracy", "best_accuracy", "verdict"]
    with open(os.path.join(folder, "table.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.6g}" if isinstance(r[k], float) else r[k]) for k in columns})
    md = ["# Tuned families: the tables", "",
          "Written by `tuned_table.py`. A cell: mean ± the 95 % half-width (Student's t) of the "
          "time to the target over 3 seeds at the chosen rate η, virtual seconds. **Bold**: the "
          "column's winner (lowest mean); ~: its interval overlaps the winner's, so these seeds "
          "do not separate the two. — (0.62): not every seed reached the target within 3 "
          "epochs (k/3: how many did); the best accuracy in brackets.", ""]
    for net in ("dc_10gbe", "wan"):
        pivot(rows, "mlp", "mlp", net, md, f"MNIST MLP, {net}, no stragglers, tuned")
        pivot(rows, "mlp", "stragglers", net, md,
              f"MNIST MLP, {net}, 5 % stragglers 4× slower, at the rates tuned without them")
        pivot(rows, "mlp", "retune64", net, md,
              f"MNIST MLP, {net}, 5 % stragglers, tuned again with them (64 workers)")
    pivot(rows, "cnn", "cnn", "dc_10gbe", md, "Fashion-MNIST CNN, dc_10gbe, tuned (target 0.85)")
    old = untuned(folder)
    for net in ("dc_10gbe", "wan"):
        untuned_pivot(old, net, md)
    with open(os.path.join(folder, "table.md"), "w") as f:
        f.write("\n".join(md))
    for net in ("dc_10gbe", "wan"):
        plot(rows, "mlp", "mlp", net, os.path.join(folder, f"time_to_target_mlp_{net}.png"))
    plot(rows, "cnn", "cnn", "dc_10gbe", os.path.join(folder, "time_to_target_cnn_dc_10gbe.png"))
    print(f"wrote {folder}/table.csv, table.md and the plots ({len(rows)} points)")


if __name__ == "__main__":
    main()
