#!/bin/sh
# Regenerates results/sim/calibration/delay/ (issue 33 item 3a): where this host's CPU is
# not the bottleneck. Every worker step is made to take tens of milliseconds by an injected
# step time ([delay]: the real runners sleep after the gradient until the step took the
# model's time; the simulator takes the model's time as the step's virtual time), so the
# real runs are dominated by sleeps, not by the two cores. async_sgd on a small MLP
# (784-64-64-10, 220 KB a message), 1 shard, at 2, 4, 8 and 16 workers, each run for real
# as threads (asgd run, ZeroMQ inproc) and as processes (asgd launch, tcp on 127.0.0.1),
# and simulated (cluster.transport = sim, the loopback network preset), for two step-time
# models: constant 30 ms and exponential with mean 30 ms. The epochs grow with the workers
# (workers / 2, at least 1) so that every run takes about 30 s of training.
#
# Run from the repository root with ASGD_DATA_DIR set, after the build of the top-level
# README; about 15 minutes. Environment: WORKERS ["2 4 8 16"], MODELS ["constant
# exponential"], OUT [results/sim/calibration/delay].
set -eu
WORKERS=${WORKERS:-"2 4 8 16"}
MODELS=${MODELS:-"constant exponential"}
OUT=${OUT:-results/sim/calibration/delay}
CFG=experiments/configs/sim_calibration.ini
mkdir -p "$OUT/runs" "$OUT/logs"
for model in $MODELS; do
  for w in $WORKERS; do
    epochs=$((w / 2 > 1 ? w / 2 : 1))
    set -- --set algorithm.workers="$w" --set model.hidden=64,64 --set experiment.epochs=$epochs \
      --set delay.compute="$model" --set delay.mean_ms=30 --set metrics.eval_every_epochs=100 \
      --set experiment.progress=off --set experiment.out_dir="$OUT/runs"
    key=${model}_w$w
    build/asgd run "$CFG" "$@" --set cluster.transport=inproc \
      --set experiment.name="real_threads_$key" >"$OUT/logs/real_threads_$key.log" 2>&1
    build/asgd launch "$CFG" "$@" --set cluster.transport=inproc \
      --set experiment.name="real_processes_$key" >"$OUT/logs/real_processes_$key.log" 2>&1
    # One simulated run is the twin of both real ones (pairs.py pairs real_MODE_KEY with
    # sim_KEY).
    build/asgd run "$CFG" "$@" --set cluster.transport=sim --set network.preset=loopback \
      --set experiment.name="sim_$key" >"$OUT/logs/sim_$key.log" 2>&1
  done
done
# The per-push rows (staleness.csv) are left out of the record: the histograms are what
# the comparison reads.
rm -f "$OUT"/runs/*/staleness.csv
# The logs name the data folder as $ASGD_DATA_DIR, not this machine's path.
[ -z "${ASGD_DATA_DIR:-}" ] || sed -i "s|$ASGD_DATA_DIR|\$ASGD_DATA_DIR|g" "$OUT"/logs/*.log
