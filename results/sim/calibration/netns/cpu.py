#!/usr/bin/env python3
"""The parameter-server rows simulated again with the transport's CPU on the host's cores:
each real run real_KEY of FOLDER/runs that has a simcpu_KEY twin (run.sh with SIM_ONLY=1,
SIM_PREFIX=simcpu and the charge in SIM_SET) is compared with it and with its plain twin
sim_KEY (no charge, sim.cores = 0): samples/s and the gap (sim / real - 1), mean staleness,
and the Kolmogorov-Smirnov distance of the staleness histograms (../pairs.py's). Writes
FOLDER/cpu.csv and prints the table as markdown.

Usage: python3 cpu.py [FOLDER]"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pairs import ks, load_runs, natural, write_csv  # noqa: E402



def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    runs = load_runs(folder, ("real", "sim", "simcpu"))
    keys = sorted({k for k, kind in runs if kind == "simcpu" and (k, "real") in runs},
                  key=natural)
    cols = ["key", "workers", "real_samples_per_s", "sim_samples_per_s", "sim_gap_pct",
            "simcpu_samples_per_s", "simcpu_gap_pct", "real_staleness_mean",
            "simcpu_staleness_mean", "sim_staleness_ks", "simcpu_staleness_ks"]
    rows = []
    for k in keys:
        rs, rh = runs[(k, "real")]
        cs, ch = runs[(k, "simcpu")]
        real, cpu = float(rs["samples_per_s"]), float(cs["samples_per_s"])
        row = {"key": k, "workers": rs["workers"], "real_samples_per_s": f"{real:.1f}",
               "simcpu_samples_per_s": f"{cpu:.1f}", "simcpu_gap_pct": f"{100 * (cpu / real - 1):+.1f}",
               "real_staleness_mean": f"{float(rs['staleness_mean']):.3f}",
               "simcpu_staleness_mean": f"{float(cs['staleness_mean']):.3f}",
               "simcpu_staleness_ks": f"{ks(rh, ch):.3f}"}
        if (k, "sim") in runs:
            ss, sh = runs[(k, "sim")]
            plain = float(ss["samples_per_s"])
            row.update({"sim_samples_per_s": f"{plain:.1f}",
                        "sim_gap_pct": f"{100 * (plain / real - 1):+.1f}",
                        "sim_staleness_ks": f"{ks(rh, sh):.3f}"})
        rows.append(row)
    write_csv(os.path.join(folder, "cpu.csv"), cols, rows)
    print("| run | workers | real samples/s | sim samples/s | gap | with the charge | gap | "
          "real staleness mean | with the charge | KS distance: sim / with the charge |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        g = lambda c: r.get(c) or "–"
        print(f"| {r['key']} | {r['workers']} | {r['real_samples_per_s']} | "
              f"{g('sim_samples_per_s')} | {g('sim_gap_pct')} % | {r['simcpu_samples_per_s']} | "
              f"{r['simcpu_gap_pct']} % | {r['real_staleness_mean']} | "
              f"{r['simcpu_staleness_mean']} | {g('sim_staleness_ks')} / "
              f"{r['simcpu_staleness_ks']} |")


if __name__ == "__main__":
    main()
