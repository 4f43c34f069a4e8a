#!/usr/bin/env python3
"""Plots for `asgd compare`.

    python3 asgd_plots.py --out DIR DIR/comparison.csv

Reads the comparison table that `asgd compare` wrote (one row per run: label, run_dir and
the run's summary.csv columns) and, from each run folder, convergence.csv and
staleness_histogram.csv (results/README.md documents both). Writes into DIR:

  accuracy.png          test accuracy vs training wall time, one line per run
  accuracy_samples.png  test accuracy vs training examples processed, one line per run
  accuracy_bytes.png    test accuracy vs bytes pushed (compression), one line per run with pushes
  staleness.png         share of pushes per staleness value, one line per algorithm
                        (summed over workers and runs); skipped if no run has
                        staleness_histogram.csv
  throughput.png        training examples per second vs workers, one line per algorithm
                        (mean over runs); only when some algorithm was run at two or
                        more worker counts

When sweep.csv (written by `asgd sweep` and `asgd sweep collect`) is next to the
comparison table, also, for each grid key K and each metric M of SWEEP_METRICS:

  sweep_M_vs_K.png      the mean of M over a grid point's seeds against K's values, one
                        line per value of the next grid key (the keys taken in order,
                        the last followed by the first), the seeds' standard deviation
                        as error bars; with more than two keys, each point is the mean
                        (and the error bar the mean std) over the other keys' values.
                        Skipped when no point has a value of M (e.g. no run reached
                        the target accuracy).

Every figure is FIGSIZE inches at DPI dots per inch: 800 x 500 pixels, drawn with the
Agg backend (no display needed). Prints "wrote PATH" or "skipped NAME: why" per figure.

Exit status: 0 done; 2 bad input (one line on stderr); 3 matplotlib is not installed for
this python3 (asgd then tries the next python3 it knows).
"""

import argparse
import csv
import math
import os
import sys
from collections import defaultdict

FIGSIZE = (8.0, 5.0)  # inches
DPI = 100  # dots per inch: FIGSIZE * DPI = 800 x 500 pixels
MANY_LINES = 6  # beyond this many lines the legend goes to the right of the axes

EXIT_BAD_INPUT = 2
EXIT_NO_MATPLOTLIB = 3


class BadInput(Exception):
    pass


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_comparison(path):
    try:
        rows = read_csv(path)
    except OSError as e:
        raise BadInput(f"{path}: cannot be read: {e.strerror}")
    needed = ["label", "run_dir", "algorithm", "workers", "seed", "samples_per_s"]
    for i, row in enumerate(rows):
        missing = [c for c in needed if c not in row or row[c] is None]
        if missing:
            raise BadInput(f"{path}:{i + 2}: expected columns {', '.join(missing)}")
    if not rows:
        raise BadInput(f"{path}: no runs (expected a header and one row per run)")
    # Runs that share a label (seeds of one sweep point) get their seed appended.
    counts = defaultdict(int)
    for row in rows:
        counts[row["label"]] += 1
    seen = defaultdict(int)
    for row in rows:
        name = row["label"]
        if counts[name] > 1:
            name = f"{name} s{row['seed']}"
            seen[name] += 1
            if seen[name] > 1:
                name = f"{name} #{seen[name]}"
        row["legend"] = name
    return rows


def common(rows, column):
    values = {row.get(column, "") for row in rows}
    return values.pop() if len(values) == 1 else ""


def subtitle(rows):
    model, dataset = common(rows, "model"), common(rows, "dataset")
    if model and dataset:
        return f" ({model} on {dataset})"
    return ""


def new_figure(plt):
    fig, ax = plt.subplots(figsize=FIGSIZE, dpi=DPI)
    ax.grid(True, alpha=0.3)
    return fig, ax


def colors(plt, n):
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(n)]


def markers(n):
    """One marker for up to 10 lines; beyond, shapes that tell similar colours apart."""
    shapes = ["o"] if n <= 10 else ["o", "s", "^", "D", "v"]
    return [shapes[i % len(shapes)] for i in range(n)]


def finish(fig, ax, path, lines):
    """Places the legend, saves at the fixed size and closes the figure."""
    if lines > MANY_LINES:
        # Outside the axes, on the right; tight_layout counts the legend in and narrows
        # the axes to leave it room.
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  ncol=1 if lines <= 20 else 2, borderaxespad=0.0)
        fig.tight_layout()
    else:
        ax.legend(fontsize="small", loc="best")
        fig.tight_layout()
    # No bbox_inches="tight": it would change the pixel size.
    fig.savefig(path, dpi=DPI)


def bytes_per_push(row):
    """Bytes one push of the run moved: summary's bytes_pushed / updates. Every push of a
    run has one size (dense float32, or one compressor's encoding of the same parts), so
    updates x this is the bytes pushed by a convergence row; nan for runs without pushes."""
    pushes, sent = number(row.get("updates")), number(row.get("bytes_pushed"))
    return sent / pushes if pushes > 0 and sent > 0 else math.nan


def plot_accuracy(plt, rows, out_dir, x_column, name, xlabel, title, scale=None, log_x=False):
    curves = []
    for row in rows:
        path = os.path.join(row["run_dir"], "convergence.csv")
        if not os.path.isfile(path):
            continue
        factor = scale(row) if scale else 1.0
        points = []
        for r in read_csv(path):
            x, y = number(r.get(x_column)) * factor, number(r.get("test_accuracy"))
            if log_x and not x > 0:
                continue  # the initial row (nothing pushed yet) has no place on a log axis
            if not math.isnan(x) and not math.isnan(y):
                points.append((x, y))
        if points:
            curves.append((row["legend"], points))
    if not curves:
        return f"skipped {name}: no run has a convergence.csv with rows"
    fig, ax = new_figure(plt)
    for (legend, points), color, marker in zip(curves, colors(plt, len(curves)),
                                               markers(len(curves))):
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker=marker, markersize=3, linewidth=1.5, color=color, label=legend)
    # The learning curves differ near the top: show the range the runs reach after their
    # first evaluation (the initial parameters' accuracy, near chance, would squash it).
    later = [y for _, points in curves for (_, y) in points[1:]]
    if later:
        low = min(later)
        ax.set_ylim(max(0.0, low - 0.02 * max(0.05, 1.0 - low)), min(1.0, max(later) + 0.005))
    if log_x:
        ax.set_xscale("log")  # compressed and dense runs differ by orders of magnitude
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test accuracy (after the first evaluation)" if later else "test accuracy")
    ax.set_title(title + subtitle(rows))
    path = os.path.join(out_dir, name)
    finish(fig, ax, path, len(curves))
    plt.close(fig)
    return f"wrote {path}"


def plot_staleness(plt, rows, out_dir):
    name = "staleness.png"
    by_algorithm = defaultdict(lambda: defaultdict(int))
    order = []
    for row in rows:
        path = os.path.join(row["run_dir"], "staleness_histogram.csv")
        if not os.path.isfile(path):
            continue
        algorithm = row["algorithm"]
        for r in read_csv(path):
            s, c = number(r.get("staleness")), number(r.get("count"))
            if math.isnan(s) or math.isnan(c):
                continue
            if algorithm not in order:
                order.append(algorithm)
            by_algorithm[algorithm][int(s)] += int(c)
    order = [a for a in order if sum(by_algorithm[a].values()) > 0]
    if not order:
        return f"skipped {name}: no run has a staleness_histogram.csv (sgd has none)"
    fig, ax = new_figure(plt)
    for algorithm, color, marker in zip(order, colors(plt, len(order)), markers(len(order))):
        hist = by_algorithm[algorithm]
        total = sum(hist.values())
        xs = sorted(hist)
        ys = [hist[x] / total for x in xs]
        mean = sum(x * hist[x] for x in xs) / total
        unit = " clocks" if algorithm == "ssp" else ""
        ax.plot(xs, ys, marker=marker, markersize=4, linewidth=1.5, color=color, label=f"{algorithm} ({total:,} pushes, mean {mean:.2f}{unit})")
    ax.set_xlabel("staleness (updates applied between a worker's pull and its push)")
    ax.set_ylabel("share of pushes")
    ax.set_ylim(bottom=0.0)
    ax.set_title("Staleness of pushes, by algorithm" + subtitle(rows))
    path = os.path.join(out_dir, name)
    finish(fig, ax, path, len(order))
    plt.close(fig)
    return f"wrote {path}"


def plot_throughput(plt, rows, out_dir):
    name = "throughput.png"
    by_algorithm = defaultdict(lambda: defaultdict(list))
    order = []
    for row in rows:
        w, rate = number(row["workers"]), number(row["samples_per_s"])
        if math.isnan(w) or math.isnan(rate):
            continue
        if row["algorithm"] not in order:
            order.append(row["algorithm"])
        by_algorithm[row["algorithm"]][int(w)].append(rate)
    # A line needs an algorithm run at two worker counts or more; runs that differ only
    # by algorithm (sgd's 1 worker against the others' 4) would give isolated dots.
    if not any(len(by_algorithm[a]) > 1 for a in order):
        return f"skipped {name}: no algorithm was run at more than one worker count"
    workers = {w for a in order for w in by_algorithm[a]}
    fig, ax = new_figure(plt)
    for algorithm, color, marker in zip(order, colors(plt, len(order)), markers(len(order))):
        points = by_algorithm[algorithm]
        xs = sorted(points)
        ys = [sum(points[x]) / len(points[x]) for x in xs]
        ax.plot(xs, ys, marker=marker, markersize=5, linewidth=1.5, color=color, label=algorithm)
    ax.set_xticks(sorted(workers))
    ax.set_xlabel("workers")
    ax.set_ylabel("training examples per second")
    ax.set_ylim(bottom=0.0)
    ax.set_title("Throughput vs workers, mean over runs" + subtitle(rows))
    path = os.path.join(out_dir, name)
    finish(fig, ax, path, len(order))
    plt.close(fig)
    return f"wrote {path}"


SWEEP_METRICS = [
    ("final_test_accuracy", "final test accuracy"),
    ("time_to_target_s", "time to target accuracy (s)"),
    ("samples_per_s", "training examples per second"),
    ("staleness_mean", "mean staleness (updates)"),
]


def read_sweep(path):
    """sweep.csv -> (grid keys, rows); the grid keys are the columns between label and runs."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            rows = list(reader)
    except OSError as e:
        raise BadInput(f"{path}: cannot be read: {e.strerror}")
    if "label" not in header or "runs" not in header:
        raise BadInput(f"{path}: expected the columns label and runs")
    keys = header[header.index("label") + 1:header.index("runs")]
    return keys, rows


def ordered_values(rows, key):
    values = []
    for row in rows:
        if row[key] not in values:
            values.append(row[key])
    if all(not math.isnan(number(v)) for v in values):
        values.sort(key=number)
    return values


def plot_sweep(plt, sweep_csv, out_dir):
    keys, rows = read_sweep(sweep_csv)
    messages = []
    if not keys or not rows:
        return ["skipped sweep_*.png: the sweep has no grid keys"]
    for metric, ylabel in SWEEP_METRICS:
        for i, key in enumerate(keys):
            name = f"sweep_{metric}_vs_{key.replace('.', '_')}.png"
            other = keys[(i + 1) % len(keys)] if len(keys) > 1 else None
            xs = ordered_values(rows, key)
            numeric = all(not math.isnan(number(v)) for v in xs)
            positions = [number(v) for v in xs] if numeric else list(range(len(xs)))
            groups = ordered_values(rows, other) if other else [None]
            fig, ax = new_figure(plt)
            drawn = 0
            palette = colors(plt, len(groups))
            for g, group in enumerate(groups):
                px, py, pe = [], [], []
                for x, pos in zip(xs, positions):
                    chosen = [r for r in rows
                              if r[key] == x and (other is None or r[other] == group)]
                    means = [number(r.get(metric + "_mean")) for r in chosen]
                    stds = [number(r.get(metric + "_std")) for r in chosen]
                    means = [m for m in means if not math.isnan(m)]
                    stds = [d for d in stds if not math.isnan(d)]
                    if not means:
                        continue
                    px.append(pos)
                    py.append(sum(means) / len(means))
                    pe.append(sum(stds) / len(stds) if stds else 0.0)
                if not px:
                    continue
                drawn += 1
                label = f"{other.split('.')[-1]} = {group}" if other else metric
                ax.errorbar(px, py, yerr=pe, marker="o", capsize=4, color=palette[g],
                            label=label)
            if drawn == 0:
                plt.close(fig)
                messages.append(f"skipped {name}: no grid point has a value of {metric}")
                continue
            if not numeric:
                ax.set_xticks(positions)
                ax.set_xticklabels(xs)
            elif len(positions) > 2 and min(positions) > 0 and max(positions) / min(positions) >= 100:
                ax.set_xscale("log")
            ax.set_xlabel(key)
            ax.set_ylabel(ylabel + " (mean ± std over seeds)")
            ax.set_title(f"Sweep: {ylabel} vs {key.split('.')[-1]}")
            path = os.path.join(out_dir, name)
            finish(fig, ax, path, drawn)
            plt.close(fig)
            messages.append(f"wrote {path}")
    return messages


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("comparison", help="comparison.csv written by asgd compare")
    parser.add_argument("--out", required=True, help="folder to write the PNGs into")
    args = parser.parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"asgd_plots.py: matplotlib is not installed for {sys.executable} ({e})",
              file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    try:
        rows = read_comparison(args.comparison)
        os.makedirs(args.out, exist_ok=True)
        messages = [
            plot_accuracy(plt, rows, args.out, "time_s", "accuracy.png",
                          "training wall time (s)", "Test accuracy vs time"),
            plot_accuracy(plt, rows, args.out, "samples", "accuracy_samples.png",
                          "training examples processed (summed over workers)",
                          "Test accuracy vs examples"),
            plot_accuracy(plt, rows, args.out, "updates", "accuracy_bytes.png",
                          "bytes pushed (summed over workers)",
                          "Test accuracy vs bytes pushed", scale=bytes_per_push, log_x=True),
            plot_staleness(plt, rows, args.out),
            plot_throughput(plt, rows, args.out),
        ]
        sweep_csv = os.path.join(os.path.dirname(os.path.abspath(args.comparison)), "sweep.csv")
        if os.path.isfile(sweep_csv):
            messages += plot_sweep(plt, sweep_csv, args.out)
    except BadInput as e:
        print(f"asgd_plots.py: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for m in messages:
        if m.startswith("skipped "):
            # A plot left from an earlier comparison into this folder would mislead.
            stale = os.path.join(args.out, m[len("skipped "):].split(":")[0])
            if os.path.isfile(stale):
                os.remove(stale)
        print(m)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
