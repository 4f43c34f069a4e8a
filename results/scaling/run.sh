#!/bin/bash
# Test accuracy of the shipped MNIST configs at 4, 8 and 16 workers (threads in one
# process), 2 epochs, seed 1. Usage, from the repository root after a build:
#   ASGD_DATA_DIR=... results/scaling/run.sh build/asgd results/scaling/<folder>
set -eu
asgd=${1:?usage: run.sh ASGD OUT_DIR}
out=${2:?usage: run.sh ASGD OUT_DIR}
mkdir -p "$out"
csv="$out/accuracy.csv"
echo "config,workers,final_test_accuracy,staleness_mean,wall_time_s" > "$csv"
for cfg in async_sgd downpour agn dynsgd sync_sgd easgd; do
  for w in 4 8 16; do
    runs="$out/runs"
    "$asgd" run "experiments/configs/mnist_mlp_$cfg.ini" --set "algorithm.workers=$w" \
      --set experiment.epochs=2 --set experiment.seed=1 --set "experiment.out_dir=$runs" \
      --set experiment.progress=off --set experiment.log_level=warning > /dev/null
    run=$(ls -t "$runs" | head -1)
    python3 - "$runs/$run/summary.csv" "$cfg" "$w" >> "$csv" <<'PY'
import csv, sys
row = next(csv.DictReader(open(sys.argv[1])))
print(",".join([sys.argv[2], sys.argv[3], row["final_test_accuracy"], row["staleness_mean"],
                row["wall_time_s"]]))
PY
  done
done
cat "$csv"
