#!/usr/bin/env python3
"""The parameter-server rows simulated again with fair sharing (network.sharing = fair,
sim/network_model.h): each real run real_KEY of FOLDER/runs that has a simfair_KEY twin
(run.sh with SIM_ONLY=1, SIM_PREFIX=simfair and network.sharing=fair in SIM_SET) is
compared with it, with its plain twin sim_KEY (FIFO) and, where there is one, with
simfaircpu_KEY (fair sharing plus the transport's CPU charge, SIM_PREFIX=simfaircpu):
samples/s and the gap (sim / real - 1), mean staleness, the share of pushes at staleness
exactly workers - 1 (the strict rotation), and the Kolmogorov-Smirnov distance of the
staleness histograms (../pairs.py's). Writes FOLDER/fair.csv and prints the table as
markdown.

Usage: python3 fair.py [FOLDER]"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pairs import load_runs, twin_rows, write_csv  # noqa: E402

KINDS = ("sim", "simfair", "simfaircpu")


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    cols, rows = twin_rows(load_runs(folder, ("real",) + KINDS), KINDS, "simfair")
    write_csv(os.path.join(folder, "fair.csv"), cols, rows)
    print("| run | workers | real samples/s | fifo | gap | fair | gap | fair + CPU | gap | "
          "staleness mean: real / fifo / fair | at workers − 1: real / fifo / fair | "
          "KS: fifo / fair / fair + CPU |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        g = lambda c: r.get(c) or "–"
        print(f"| {r['key']} | {r['workers']} | {r['real_samples_per_s']} | "
              f"{g('sim_samples_per_s')} | {g('sim_gap_pct')} % | {g('simfair_samples_per_s')} | "
              f"{g('simfair_gap_pct')} % | {g('simfaircpu_samples_per_s')} | "
              f"{g('simfaircpu_gap_pct')} % | {r['real_staleness_mean']} / "
              f"{g('sim_staleness_mean')} / {g('simfair_staleness_mean')} | "
              f"{r['real_rotation']} / {g('sim_rotation')} / {g('simfair_rotation')} | "
              f"{g('sim_staleness_ks')} / {g('simfair_staleness_ks')} / "
              f"{g('simfaircpu_staleness_ks')} |")


if __name__ == "__main__":
    main()
