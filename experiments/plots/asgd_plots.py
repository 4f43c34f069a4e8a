#!/usr/bin/env python3
"""Plots for `asgd compare`.

    python3 asgd_plots.py --out DIR DIR/comparison.csv

Reads the comparison table that `asgd compare` wrote (one row per run: label, run_dir,
group and the run's summary.csv columns) and, from each run folder, convergence.csv and
staleness_histogram.csv (results/README.md documents both). Writes into DIR:

  accuracy.png          test accuracy vs training wall time, one line per group
  accuracy_samples.png  test accuracy vs training examples processed, one line per group
  accuracy_bytes.png    test accuracy vs bytes pushed (compression), one line per group
                        with pushes

A group is the runs that differ only in their seed (the comparison's `group` column): one
run is drawn as its curve; several as the mean of their curves, the evaluations matched
by their order (each seed evaluates at the same epochs) and x the seeds' mean, with a
shaded band from the lowest to the highest seed's accuracy.
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
                        the last followed by the first), with a shaded band from the
                        lowest to the highest seed (sweep.csv's min and max); with more
                        than two keys, each point and band edge is the mean over the
                        other keys' values. Skipped when no point has a value of M (e.g.
                        no run reached the target accuracy).

When tune.csv and best.csv (written by `asgd tune` and tuned suites) are next to the
comparison table, also, for each tuned key K:

  tune_M_vs_K.png       the tune's metric M of each run against K's values, a line per
                        point through its runs whose other keys hold the chosen values;
                        runs that did not reach the target, failed or left no record as
                        crosses on the top edge; the chosen value's seeds as their mean
                        with the 95 % confidence interval as an error bar (best.csv).

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
    # A legend per group of seeds: its label, with the number of seeds when several.
    sizes = defaultdict(int)
    for row in rows:
        row["group_key"] = row.get("group") or row["run_dir"]
        sizes[row["group_key"]] += 1
    for row in rows:
        name = row.get("group") or row["label"]
        n = sizes[row["group_key"]]
        row["legend"] = f"{name} ({n} seeds)" if n > 1 else name
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


def run_curve(row, x_column, scale, log_x):
    """(x, y) of a run's evaluations, or [] without convergence.csv."""
    path = os.path.join(row["run_dir"], "convergence.csv")
    if not os.path.isfile(path):
        return []
    factor = scale(row) if scale else 1.0
    points = []
    for r in read_csv(path):
        x, y = number(r.get(x_column)) * factor, number(r.get("test_accuracy"))
        if log_x and not x > 0:
            continue  # the initial row (nothing pushed yet) has no place on a log axis
        if not math.isnan(x) and not math.isnan(y):
            points.append((x, y))
    return points


def group_curve(curves):
    """Seeds' curves -> (xs, mean ys, low ys, high ys), evaluations matched by order."""
    n = min(len(c) for c in curves)
    xs = [sum(c[i][0] for c in curves) / len(curves) for i in range(n)]
    ys = [[c[i][1] for c in curves] for i in range(n)]
    return xs, [sum(v) / len(v) for v in ys], [min(v) for v in ys], [max(v) for v in ys]


def plot_accuracy(plt, rows, out_dir, x_column, name, xlabel, title, scale=None, log_x=False):
    groups = {}  # group key -> (legend, [curve, ...]), in order of appearance
    for row in rows:
        points = run_curve(row, x_column, scale, log_x)
        if points:
            groups.setdefault(row["group_key"], (row["legend"], []))[1].append(points)
    if not groups:
        return f"skipped {name}: no run has a convergence.csv with rows"
    fig, ax = new_figure(plt)
    later = []
    for (legend, curves), color, marker in zip(groups.values(), colors(plt, len(groups)),
                                               markers(len(groups))):
        xs, ys, low, high = group_curve(curves)
        ax.plot(xs, ys, marker=marker, markersize=3, linewidth=1.5, color=color, label=legend)
        if len(curves) > 1:
            ax.fill_between(xs, low, high, color=color, alpha=0.2, linewidth=0)
        later += low[1:] + high[1:]
    # The learning curves differ near the top: show the range the runs reach after their
    # first evaluation (the initial parameters' accuracy, near chance, would squash it).
    if later:
        low = min(later)
        ax.set_ylim(max(0.0, low - 0.02 * max(0.05, 1.0 - low)), min(1.0, max(later) + 0.005))
    if log_x:
        ax.set_xscale("log")  # compressed and dense runs differ by orders of magnitude
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test accuracy (after the first evaluation)" if later else "test accuracy")
    banded = any(len(c) > 1 for _, c in groups.values())
    ax.set_title(title + subtitle(rows) + (": mean over seeds, band min-max" if banded else ""))
    path = os.path.join(out_dir, name)
    finish(fig, ax, path, len(groups))
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


def read_table(path, first, last):
    """A CSV written by asgd -> (the columns between first and last, rows)."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            rows = list(reader)
    except OSError as e:
        raise BadInput(f"{path}: cannot be read: {e.strerror}")
    if first not in header or last not in header:
        raise BadInput(f"{path}: expected the columns {first} and {last}")
    return header[header.index(first) + 1:header.index(last)], rows


def read_sweep(path):
    """sweep.csv -> (grid keys, rows); the grid keys are the columns between label and runs."""
    return read_table(path, "label", "runs")


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
                px, py, plow, phigh = [], [], [], []
                for x, pos in zip(xs, positions):
                    chosen = [r for r in rows
                              if r[key] == x and (other is None or r[other] == group)]
                    means = [number(r.get(metric + "_mean")) for r in chosen]
                    lows = [number(r.get(metric + "_min")) for r in chosen]
                    highs = [number(r.get(metric + "_max")) for r in chosen]
                    means = [m for m in means if not math.isnan(m)]
                    lows = [v for v in lows if not math.isnan(v)]
                    highs = [v for v in highs if not math.isnan(v)]
                    if not means:
                        continue
                    px.append(pos)
                    py.append(sum(means) / len(means))
                    plow.append(sum(lows) / len(lows) if lows else py[-1])
                    phigh.append(sum(highs) / len(highs) if highs else py[-1])
                if not px:
                    continue
                drawn += 1
                label = f"{other.split('.')[-1]} = {group}" if other else metric
                ax.plot(px, py, marker="o", color=palette[g], label=label)
                ax.fill_between(px, plow, phigh, color=palette[g], alpha=0.2, linewidth=0)
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
            ax.set_ylabel(ylabel + " (mean over seeds, band min-max)")
            ax.set_title(f"Sweep: {ylabel} vs {key.split('.')[-1]}")
            path = os.path.join(out_dir, name)
            finish(fig, ax, path, drawn)
            plt.close(fig)
            messages.append(f"wrote {path}")
    return messages


def plot_tune(plt, tune_csv, best_csv, out_dir):
    keys, runs = read_table(tune_csv, "label", "seed")
    best_keys, best = read_table(best_csv, "point", "metric")
    if keys != best_keys:
        raise BadInput(f"{best_csv}: its keys {best_keys} are not tune.csv's {keys}")
    if not best:
        return ["skipped tune_*.png: best.csv has no point"]
    metric, unit = best[0]["metric"], best[0]["unit"]
    ylabel = metric.replace("_", " ") + (f" ({unit})" if unit else "")
    messages = []
    for key in keys:
        name = f"tune_{metric}_vs_{key.replace('.', '_')}.png"
        others = [k for k in keys if k != key]
        fig, ax = new_figure(plt)
        palette = colors(plt, len(best))
        drawn, missed, all_x = 0, [], []
        for b, color in zip(best, palette):
            chosen = [r for r in runs if r["point"] == b["point"] and r["stage"] != "seeds"
                      and all(r[k] == b[k] for k in others)]
            scored = sorted((number(r[key]), number(r["score"])) for r in chosen
                            if r["outcome"] == "scored")
            missed += [number(r[key]) for r in chosen if r["outcome"] != "scored"]
            all_x += [number(r[key]) for r in chosen]
            if scored:
                ax.plot([x for x, _ in scored], [y for _, y in scored], marker="o",
                        color=color, label=f"{b['point']}: one seed per value")
                drawn += 1
            mean, half = number(b["mean"]), number(b["ci95"])
            if not math.isnan(mean):
                ax.errorbar([number(b[key])], [mean], yerr=[0.0 if math.isnan(half) else half],
                            marker="s", markersize=8, capsize=5, color=color, linestyle="none",
                            label=f"{b['point']}: {key.split('.')[-1]} = {b[key]}, "
                                  f"{b['n']} seeds, 95 % CI")
                drawn += 1
        if drawn == 0:
            plt.close(fig)
            messages.append(f"skipped {name}: no run was scored")
            continue
        if missed:
            top = ax.get_ylim()[1]
            ax.plot(missed, [top] * len(missed), "x", color="black", clip_on=False,
                    label="not reached, failed or no record")
        xs = [x for x in all_x if not math.isnan(x)]
        if xs and min(xs) > 0 and max(xs) / min(xs) >= 100:
            ax.set_xscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel(ylabel)
        ax.set_title(f"Tune: {metric.replace('_', ' ')} vs {key.split('.')[-1]}")
        path = os.path.join(out_dir, name)
        finish(fig, ax, path, drawn + (1 if missed else 0))
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
        tune_csv = os.path.join(os.path.dirname(sweep_csv), "tune.csv")
        best_csv = os.path.join(os.path.dirname(sweep_csv), "best.csv")
        if os.path.isfile(tune_csv) and os.path.isfile(best_csv):
            messages += plot_tune(plt, tune_csv, best_csv, args.out)
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
