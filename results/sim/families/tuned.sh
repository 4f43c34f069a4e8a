#!/bin/sh
# Regenerates results/sim/families/tuned/: "which family wins where" with every strategy's
# learning rate tuned per comparison point (asgd's tuning protocol, docs/comparing.md), then
# three seeds at the chosen rate. Run from the repository root with ASGD_DATA_DIR set, after
# a portable build of asgd (docs/building.md: cmake -DASGD_NATIVE=OFF, so that these virtual
# times are the same on any x86-64 machine); ASGD=path/to/asgd picks the binary (default
# build/asgd). Four stages, each one `asgd suite` of a generated suite file, two runs at a
# time (ASGD_PARALLEL overrides); an interrupted stage resumes when the script is run again
# (its folder keeps plan.txt and the finished runs):
#   mlp/         the MNIST MLP: ten strategies x 16, 64, 256, 1,024 workers x dc_10gbe, wan,
#                no stragglers; each point's rate tuned, 3 seeds at the best (80 points)
#   stragglers/  the same 80 points with 5 % of the workers 4x slower, at the rates chosen
#                without stragglers, 3 seeds each (a plain suite)
#   retune64/    the 20 points at 64 workers tuned again with the stragglers, on a window of
#                five factors of 2 around the rate mlp/ chose
#   cnn/         Fashion-MNIST with asgd's CNN: one strategy of each family (async_sgd,
#                sync_sgd, easgd, allreduce_sgd, local_sgd, dpsgd) x 16, 64, 256 workers,
#                dc_10gbe, tuned the same way on a grid of factors of 4 (target 0.85)
# then trims the run folders (below) and writes the tables and plots with tuned_table.py.
# STAGES="mlp stragglers retune64 cnn" runs a subset (two instances with different STAGES
# may share an OUT: each stage has its own folder); STRATEGIES, CNN_STRATEGIES, SIZES and
# CNN_SIZES shrink a stage (for a quick check into another OUT).
set -eu
out=${OUT:-results/sim/families/tuned}
asgd=${ASGD:-build/asgd}
parallel=${ASGD_PARALLEL:-2}
stages=${STAGES:-"mlp stragglers retune64 cnn"}
strategies=${STRATEGIES:-"async_sgd agn downpour dynsgd sync_sgd easgd allreduce_sgd allreduce_sgd_hd local_sgd dpsgd"}
cnn_strategies=${CNN_STRATEGIES:-"async_sgd sync_sgd easgd allreduce_sgd local_sgd dpsgd"}
sizes=${SIZES:-"1024 256 64 16"}
cnn_sizes=${CNN_SIZES:-"256 64 16"}
[ -x "$asgd" ] || { echo "tuned.sh: $asgd not found; build it first (README)" >&2; exit 2; }
[ -n "${ASGD_DATA_DIR:-}" ] || { echo "tuned.sh: ASGD_DATA_DIR is not set (the MNIST folder's parent)" >&2; exit 2; }

# The problem and time model of ../run.sh (the untuned table): batch 8 per worker, at most 3
# epochs, stop at the target (the whole test set every 0.1 epoch), log-normal steps around
# 20 ms (sd 5 ms), stragglers 4x slower. The parameter-server strategies share links in
# random 16 KiB chunks (network.sharing = interleaved, the model that matched real TCP
# flows, ../calibration/netns); the collectives keep their own schedule model.
common="experiment.epochs=3; experiment.stop_at_target=true; algorithm.batch_size=8"
common="$common; cluster.transport=sim; delay.compute=lognormal; delay.mean_ms=20"
common="$common; delay.stddev_ms=5; delay.straggler_factor=4; metrics.eval_every_epochs=0.1"
common="$common; metrics.eval_examples=0; metrics.staleness_rows=0"
mlp="model.hidden=64"
cnn="data.dataset=fashion-mnist; model.name=cnn"

# Today's policy (../run.sh): each shipped config's rate times 8 / its batch size; sync_sgd
# and allreduce_sgd keep linear scaling (the rate times the replicas, warmed up over 0.5
# epoch), so their grid is over the base rate that the scaling multiplies.
policy() {
  case $1 in
    async_sgd) echo 0.0125 ;;        # 0.1 at batch 64
    downpour) echo 0.025 ;;          # 0.1 at batch 32
    easgd) echo 0.0375 ;;            # 0.3 at batch 64
    *) echo 0.00625 ;;               # agn, dynsgd, sync_sgd, allreduce_sgd, local_sgd, dpsgd
  esac
}
# The grid: a rate times 2^k for k = KMIN, KMIN + STEP, ..., KMAX. mlp/ uses the policy's rate
# times 2^-6 .. 2^3 (ten values, factors of 2 from 1/64 to 8 times it: so today's rate is one
# value of every point's grid); the edge rule goes two steps further where the best is an end.
# Cheaper grids where the whole run would not fit a 2-core machine in a session: cnn/ (each
# run ~10x an MLP run's cost) the same range in factors of 4 (2^-6, 2^-4, ..., 2^2: five
# values), retune64/ a window of five factors of 2 around the rate mlp/ chose for its point
# (2^-2 .. 2^2; the edge rule extends it as anywhere).
rate_grid() {  # RATE KMIN KMAX STEP
  awk -v p="$1" -v a="$2" -v b="$3" -v d="$4" 'BEGIN { s = ""; for (k = a; k <= b; k += d) { s = s (k > a ? "," : "") sprintf("%.6g", p * 2 ^ k) } print s }'
}
grid() { rate_grid "$(policy "$1")" -6 3 1; }
chosen() {  # POINT: the rate mlp/best.csv chose for it
  /usr/bin/python3 -c 'import csv, sys
rates = [r["algorithm.learning_rate"] for r in csv.DictReader(open(sys.argv[1])) if r["point"] == sys.argv[2]]
if not rates: sys.exit("tuned.sh: %s has no point %s (run the mlp stage first)" % (sys.argv[1], sys.argv[2]))
print(rates[0])' "$out/mlp/best.csv" "$1"
}
point_grid() {  # KIND STRATEGY POINT
  case $1 in
    policy) grid "$2" ;;
    coarse) rate_grid "$(policy "$2")" -6 2 2 ;;
    around) r=$(chosen "$3") && rate_grid "$r" -2 2 1 || echo "missing" ;;  # asgd refuses "missing"
  esac
}
config_of() { case $1 in allreduce_sgd_hd) echo allreduce_sgd ;; *) echo "$1" ;; esac; }
# A point's own keys: workers, shards (workers / 16: a shard NIC serves 16 workers at every
# size), sync_sgd's 5 % backups, halving-doubling, the network and its sharing.
point_sets() {  # strategy workers network stragglers(0|5)
  s=$1; w=$2; net=$3; f=$4
  sets="algorithm.workers=$w; network.preset=$net; delay.straggler_fraction=0.0$f"
  case $s in
    allreduce_sgd | allreduce_sgd_hd | local_sgd | dpsgd) ;;
    *) sets="$sets; cluster.shards=$((w / 16 > 0 ? w / 16 : 1)); network.sharing=interleaved" ;;
  esac
  case $s in
    sync_sgd) sets="$sets; algorithm.replicas_to_aggregate=$(((w * 95 + 50) / 100))" ;;
    allreduce_sgd_hd) sets="$sets; collective.algorithm=halving_doubling" ;;
  esac
  echo "$sets"
}
configs=$(/usr/bin/python3 -c 'import os, sys; print(os.path.relpath("experiments/configs", sys.argv[1]))' "$out")

# A tuned suite: tune_suite NAME TARGET PROBLEM-SETS STRATEGIES SIZES NETWORKS STRAGGLERS GRID
# (GRID: policy, coarse or around, point_grid above)
tune_suite() {
  name=$1; target=$2; problem=$3; strats=$4; ws=$5; nets=$6; f=$7; kind=$8
  echo "# Generated by results/sim/families/tuned.sh: every [run] a comparison point whose"
  case $kind in
    policy) echo "# learning rate is tuned (its own grid: its policy's rate times 2^-6 .. 2^3)." ;;
    coarse) echo "# learning rate is tuned (its own grid: its policy's rate times 4^-3 .. 4^1)." ;;
    around) echo "# learning rate is tuned (its own grid: mlp/'s chosen rate times 2^-2 .. 2^2)." ;;
  esac
  echo "[suite]"
  echo "name = families_$name"
  echo "set = $common; experiment.target_accuracy=$target; $problem"
  echo "[tune]"
  echo "grid = algorithm.learning_rate=$(grid agn)"
  echo "metric = time_to_target"
  echo "seeds = 3"
  echo "extend = 2"
  for w in $ws; do
    for s in $strats; do
      for net in $nets; do
        echo
        echo "[run ${s}_w${w}_${net}]"
        echo "config = $configs/mnist_mlp_$(config_of "$s").ini"
        echo "set = $(point_sets "$s" "$w" "$net" "$f")"
        echo "grid = algorithm.learning_rate=$(point_grid "$kind" "$s" "${s}_w${w}_${net}")"
      done
    done
  done
}

# The straggler runs at the rates mlp/ chose: a plain suite, 3 seeds of every point.
straggler_suite() {
  echo "# Generated by results/sim/families/tuned.sh: the points of mlp/ with 5 % of the"
  echo "# workers 4x slower, at the learning rate mlp/best.csv chose, 3 seeds each."
  echo "[suite]"
  echo "name = families_stragglers"
  echo "set = $common; experiment.target_accuracy=0.90; $mlp"
  /usr/bin/python3 - "$out/mlp/best.csv" <<'EOF' | while IFS=' ' read -r label s w net rate; do
import csv, re, sys
for row in csv.DictReader(open(sys.argv[1])):
    m = re.fullmatch(r"(.+)_w([0-9]+)_(.+)", row["point"])
    print(row["point"], m.group(1), m.group(2), m.group(3), row["algorithm.learning_rate"])
EOF
    echo
    echo "[run ${label}]"
    echo "config = $configs/mnist_mlp_$(config_of "$s").ini"
    echo "set = $(point_sets "$s" "$w" "$net" 5); algorithm.learning_rate=$rate"
  done
}

# Keep what the tables, the plots and a reader need: every run's summary.csv and
# convergence.csv, and the provenance.json (build, commit, seed) of the runs at the chosen
# rates; drop config.ini (the suite file and plan.txt give it), workers.csv, the empty
# staleness.csv, staleness_histogram.csv, the logs and the suite's plots (hundreds of lines).
trim() {
  d=$1
  rm -f "$d"/runs/*/workers.csv "$d"/runs/*/staleness.csv "$d"/runs/*/staleness_histogram.csv \
    "$d"/runs/*/config.ini "$d"/*.png
  rm -rf "$d/logs" "$d/interrupted"
  /usr/bin/python3 - "$d" <<'EOF'
import csv, os, sys
d = sys.argv[1]
keep = set()
if os.path.exists(os.path.join(d, "tune.csv")):
    for row in csv.DictReader(open(os.path.join(d, "tune.csv"))):
        if row["stage"] == "seeds":
            keep.add(os.path.basename(row["run_dir"]))
else:
    keep = set(os.listdir(os.path.join(d, "runs")))
for run in os.listdir(os.path.join(d, "runs")):
    p = os.path.join(d, "runs", run, "provenance.json")
    if run not in keep and os.path.exists(p):
        os.remove(p)
EOF
}

run_stage() {  # name suite-file [asgd suite options]
  name=$1; file=$2; shift 2
  # A stage that ended (its comparison written, its folder trimmed) is not run again.
  if [ -f "$out/$name/comparison.csv" ]; then
    echo "tuned.sh: stage $name is done ($out/$name/comparison.csv); remove its folder to run it again"
    return
  fi
  echo "tuned.sh: stage $name ($(grep -c '^\[run' "$file") runs in the suite), $(date -u +%H:%M:%S) UTC"
  "$asgd" suite "$file" --parallel "$parallel" --no-plots --out "$out/$name" "$@" || {
    st=$?
    # A failed run (a diverged grid value) is part of a tuned suite's result, not an error;
    # any other status stops here (a signal: run the script again to resume).
    [ "$st" -eq 2 ] && [ -f "$out/$name/comparison.csv" ] || exit "$st"
  }
  trim "$out/$name"
}

mkdir -p "$out"
for stage in $stages; do
  case $stage in
    mlp) tune_suite mlp 0.90 "$mlp" "$strategies" "$sizes" "dc_10gbe wan" 0 policy >"$out/mlp.ini"
      run_stage mlp "$out/mlp.ini" ;;
    stragglers) straggler_suite >"$out/stragglers.ini"
      run_stage stragglers "$out/stragglers.ini" --seeds 3 ;;
    retune64) tune_suite retune64 0.90 "$mlp" "$strategies" 64 "dc_10gbe wan" 5 around >"$out/retune64.ini"
      run_stage retune64 "$out/retune64.ini" ;;
    cnn) tune_suite cnn 0.85 "$cnn" "$cnn_strategies" "$cnn_sizes" dc_10gbe 0 coarse >"$out/cnn.ini"
      run_stage cnn "$out/cnn.ini" ;;
    *) echo "tuned.sh: unknown stage $stage (expected mlp, stragglers, retune64, cnn)" >&2; exit 2 ;;
  esac
done
/usr/bin/python3 results/sim/families/tuned_table.py "$out"
