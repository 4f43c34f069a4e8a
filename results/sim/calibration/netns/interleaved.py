#!/usr/bin/env python3
"""The parameter-server rows simulated again with interleaved chunks (network.sharing =
interleaved, sim/network_model.h): each real run real_KEY of FOLDER/runs that has a
simil16_KEY twin (run.sh with SIM_ONLY=1, SIM_PREFIX=simil16 and
"--set network.sharing=interleaved --set network.chunk_kib=16" in SIM_SET) is compared
with it, with its FIFO twin sim_KEY and, where there are, with the chunk sweep's twins
simil8_KEY, simil32_KEY and simil64_KEY (chunks of 8, 32 and 64 KiB): samples/s and the gap
(sim / real - 1), mean staleness, the share of pushes at staleness exactly workers - 1
(the strict rotation), and the Kolmogorov-Smirnov distance of the staleness histograms
(../pairs.py's). Writes FOLDER/interleaved.csv and prints the table as markdown.

Usage: python3 interleaved.py [FOLDER]"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pairs import load_runs, twin_rows, write_csv  # noqa: E402

SWEEP = ("simil8", "simil32", "simil64")
KINDS = ("sim", "simil16") + SWEEP


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    cols, rows = twin_rows(load_runs(folder, ("real",) + KINDS), KINDS, "simil16")
    write_csv(os.path.join(folder, "interleaved.csv"), cols, rows)
    print("| run | workers | real samples/s | fifo | gap | interleaved 16 KiB | gap | "
          "8 / 32 / 64 KiB: gap | staleness mean: real / fifo / 16 KiB | "
          "at workers − 1: real / fifo / 16 KiB | KS: fifo / 16 KiB | "
          "KS: 8 / 32 / 64 KiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        g = lambda c: r.get(c) or "–"
        sweep_gap = " / ".join(f"{g(k + '_gap_pct')} %" if r.get(k + "_gap_pct") else "–"
                               for k in SWEEP)
        sweep_ks = " / ".join(g(k + "_staleness_ks") for k in SWEEP)
        print(f"| {r['key']} | {r['workers']} | {r['real_samples_per_s']} | "
              f"{g('sim_samples_per_s')} | {g('sim_gap_pct')} % | "
              f"{g('simil16_samples_per_s')} | {g('simil16_gap_pct')} % | {sweep_gap} | "
              f"{r['real_staleness_mean']} / {g('sim_staleness_mean')} / "
              f"{g('simil16_staleness_mean')} | {r['real_rotation']} / {g('sim_rotation')} / "
              f"{g('simil16_rotation')} | {g('sim_staleness_ks')} / "
              f"{g('simil16_staleness_ks')} | {sweep_ks} |")


if __name__ == "__main__":
    main()
