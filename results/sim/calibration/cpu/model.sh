#!/bin/sh
# The second half of results/sim/calibration/cpu/ (after run.sh and table.py): the
# simulator with the transport's CPU charged on the host's cores. table.py derives the
# charge (fit.csv: per message from the transport benchmark, per byte from the 2-worker
# real runs); this runs the loopback calibration's config simulated with it
# (sim.transport_us_per_message, sim.transport_ns_per_byte) on sim.cores = 2, the host's
# two cores, at each worker count of cpu.csv, on the loopback network preset (as the
# config) and on the zero one (the cores alone: on loopback the preset's transfers are
# CPU work too, so with the charge it counts them twice). Every step's gradient takes the
# gradient's CPU time per step measured beside the real runs (cpu.csv, from run.sh's
# simulated runs; delay.compute = constant): the gradient measured now would be this
# moment's load's (on the shared host it moved from 0.8 to 1.4 ms between runs), and a
# constant makes the runs deterministic. table.py then compares them with the real runs.
# Run from the repository root with ASGD_DATA_DIR set; under a minute. Environment: OUT
# [results/sim/calibration/cpu].
set -eu
OUT=${OUT:-results/sim/calibration/cpu}
CFG=experiments/configs/sim_calibration.ini
[ -f "$OUT/fit.csv" ] || { echo "model.sh: $OUT/fit.csv missing: run table.py first" >&2; exit 2; }
IFS=, read -r per_message ns_per_byte _ <<EOF
$(sed -n 2p "$OUT/fit.csv")
EOF
tail -n +2 "$OUT/cpu.csv" | while IFS=, read -r w _ _ _ _ _ _ _ grad _; do
  for net in loopback zero; do
    name=charge_w${w}_$net
    build/asgd run "$CFG" --set algorithm.workers="$w" --set metrics.eval_every_epochs=100 \
      --set delay.compute=constant --set delay.mean_ms="$grad" --set sim.cores=2 \
      --set sim.transport_us_per_message="$per_message" \
      --set sim.transport_ns_per_byte="$ns_per_byte" --set network.preset=$net \
      --set experiment.name="$name" --set experiment.out_dir="$OUT/runs" \
      --set experiment.progress=off >"$OUT/logs/$name.log" 2>&1
  done
done
# The per-push rows (staleness.csv) are left out of the record.
rm -f "$OUT"/runs/*/staleness.csv
# The logs name the data folder as $ASGD_DATA_DIR, not this machine's path.
[ -z "${ASGD_DATA_DIR:-}" ] || sed -i "s|$ASGD_DATA_DIR|\$ASGD_DATA_DIR|g" "$OUT"/logs/*.log
