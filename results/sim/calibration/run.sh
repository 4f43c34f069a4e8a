#!/bin/sh
# Regenerates results/sim/calibration/ (issue 13's calibration): the same config
# (experiments/configs/sim_calibration.ini) at 2 and 4 workers, run for real as processes
# over tcp (asgd launch) and simulated (asgd run, measured compute, loopback network), with
# a machine per simulated worker and with the workers sharing this host's cores (sim.cores),
# one after the other, then compared by asgd compare. Run from the repository root with
# ASGD_DATA_DIR set, after the build of the top-level README.
set -eu
out=results/sim/calibration
cfg=experiments/configs/sim_calibration.ini
rm -rf "$out/runs" "$out/logs"
mkdir -p "$out/runs" "$out/logs"
for w in 2 4; do
  build/asgd launch "$cfg" --set cluster.transport=inproc --set algorithm.workers=$w \
    --set experiment.name=real_tcp_w$w --set experiment.out_dir=$out/runs \
    --set experiment.progress=off >"$out/logs/real_tcp_w$w.log" 2>&1
  build/asgd run "$cfg" --set algorithm.workers=$w \
    --set experiment.name=sim_loopback_w$w --set experiment.out_dir=$out/runs \
    --set experiment.progress=off >"$out/logs/sim_loopback_w$w.log" 2>&1
  # The same, with the workers sharing the host's cores (sim.cores = this machine's).
  build/asgd run "$cfg" --set algorithm.workers=$w --set sim.cores="$(nproc)" \
    --set experiment.name=sim_cores_w$w --set experiment.out_dir=$out/runs \
    --set experiment.progress=off >"$out/logs/sim_cores_w$w.log" 2>&1
done
build/asgd compare "$out"/runs/* --out "$out"
