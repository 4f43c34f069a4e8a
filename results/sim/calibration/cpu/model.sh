#!/bin/sh
# The second half of results/sim/calibration/cpu/ (after run.sh and table.py): the
# simulator with the run's whole CPU per step on the host's cores. For each worker count
# of cpu.csv, every simulated step takes exactly the CPU a real step took in all the run's
# processes (delay.compute = constant, delay.mean_ms = CPU/step: the gradient and the
# transport) on a core of sim.cores, with sim.cores = 1 and 2, on the loopback network
# preset and on the zero one (the loopback preset charges transfers as a network; on this
# host they are CPU, so with the whole CPU on the cores the loopback preset counts them
# twice and zero not at all). A constant step time, not the measured one scaled: the
# measured gradient time swung by 2x from run to run on the loaded host. table.py
# compares them with the real runs. Run from the repository root with ASGD_DATA_DIR set;
# about 2 minutes.
set -eu
OUT=${OUT:-results/sim/calibration/cpu}
CFG=experiments/configs/sim_calibration.ini
tail -n +2 "$OUT/cpu.csv" | while IFS=, read -r w _ _ _ _ cpu _; do
  for cores in 1 2; do
    for net in loopback zero; do
      name=model_w${w}_c${cores}_$net
      build/asgd run "$CFG" --set algorithm.workers="$w" --set metrics.eval_every_epochs=100 \
        --set delay.compute=constant --set delay.mean_ms="$cpu" --set sim.cores=$cores \
        --set network.preset=$net \
        --set experiment.name="$name" --set experiment.out_dir="$OUT/runs" \
        --set experiment.progress=off >"$OUT/logs/$name.log" 2>&1
    done
  done
done
# The per-push rows (staleness.csv) are left out of the record.
rm -f "$OUT"/runs/*/staleness.csv
# The logs name the data folder as $ASGD_DATA_DIR, not this machine's path.
[ -z "${ASGD_DATA_DIR:-}" ] || sed -i "s|$ASGD_DATA_DIR|\$ASGD_DATA_DIR|g" "$OUT"/logs/*.log
