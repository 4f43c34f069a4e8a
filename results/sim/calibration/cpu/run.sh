#!/bin/sh
# Regenerates results/sim/calibration/cpu/ (issue 33 item 3b): how much CPU the loopback
# calibration's real runs spend per step, beside the gradient the simulator charges. The
# loopback calibration's config (experiments/configs/sim_calibration.ini: async_sgd, MNIST
# MLP 784-256-256-10, batch 32, 1 shard) at 2 and 4 workers as processes over tcp on
# 127.0.0.1 (asgd launch), each twice: one epoch (1,875 steps) and 200 steps, under
# /usr/bin/time (launch waits for every role, so its children's CPU is all of the run's).
# The difference between the two lengths leaves out what does not grow with the steps
# (starting the processes, loading MNIST in each, the evaluations at the start and the
# end): CPU per step = (CPU long - CPU short) / (steps long - steps short), and the same
# for the wall time. The simulated run of the same config (asgd run, measured compute,
# loopback preset) gives the gradient's CPU per step, the only CPU the simulator charges.
# table.py compares them.
#
# Run from the repository root with ASGD_DATA_DIR set, after the build of the top-level
# README; about 2 minutes on an idle machine. Environment: WORKERS ["2 4"], REPS [2],
# OUT [results/sim/calibration/cpu].
set -eu
WORKERS=${WORKERS:-"2 4"}
REPS=${REPS:-2}
OUT=${OUT:-results/sim/calibration/cpu}
CFG=experiments/configs/sim_calibration.ini
mkdir -p "$OUT/runs" "$OUT/logs"
[ -f "$OUT/time.csv" ] || echo "name,workers,length,rep,wall_s,user_s,sys_s,load1" >"$OUT/time.csv"
rep=1
while [ $rep -le "$REPS" ]; do
  for w in $WORKERS; do
    for length in epoch steps200; do
      if [ $length = epoch ]; then len="--set experiment.epochs=1"; else
        len="--set experiment.max_steps=200"; fi
      name=real_${length}_w${w}_r$rep
      load=$(cut -d' ' -f1 /proc/loadavg)
      # shellcheck disable=SC2086
      /usr/bin/time -f "%e,%U,%S" -o "$OUT/logs/$name.time" build/asgd launch "$CFG" \
        --set cluster.transport=inproc --set algorithm.workers="$w" $len \
        --set metrics.eval_every_epochs=100 --set experiment.name="$name" \
        --set experiment.out_dir="$OUT/runs" --set experiment.progress=off \
        >"$OUT/logs/$name.log" 2>&1
      echo "$name,$w,$length,$rep,$(tail -n 1 "$OUT/logs/$name.time"),$load" >>"$OUT/time.csv"
    done
    name=sim_w${w}_r$rep
    build/asgd run "$CFG" --set algorithm.workers="$w" --set metrics.eval_every_epochs=100 \
      --set experiment.name="$name" --set experiment.out_dir="$OUT/runs" \
      --set experiment.progress=off >"$OUT/logs/$name.log" 2>&1
  done
  rep=$((rep + 1))
done
# The per-push rows (staleness.csv) are left out of the record.
rm -f "$OUT"/runs/*/staleness.csv
# The logs name the data folder as $ASGD_DATA_DIR, not this machine's path.
[ -z "${ASGD_DATA_DIR:-}" ] || sed -i "s|$ASGD_DATA_DIR|\$ASGD_DATA_DIR|g" "$OUT"/logs/*.log
