#!/usr/bin/env bash
# Checks that the portable build (-DASGD_NATIVE=OFF; docs/building.md#build-modes) gives
# the same simulated run on other x86-64 CPUs: it runs two small simulated configs with a
# portable asgd natively and under qemu-user emulating other CPU models (Debian's
# qemu-user: qemu-x86_64 -cpu MODEL), and compares every CSV of each run folder with the
# native run's byte for byte. Then, as evidence that the comparison can fail, the same
# configs with the native build (-march=native): natively (compared with the portable
# run) and under the last emulated CPU (a CPU without the build's instruction set stops
# it on an illegal instruction). The folder results/sim/portable/ records a run.
#
#   ASGD_DATA_DIR=<data> benchmarks/portable_check.sh [--build DIR] [--native-build DIR]
#                                                   [--cpu MODEL]... [--out DIR]
#
#   --build DIR         the portable build folder [build-portable]; configured
#                       (-DASGD_NATIVE=OFF, no CUDA, no libtorch, no tests) and asgd built
#                       there when it has no CMakeCache.txt; refused if it is not portable
#   --native-build DIR  a native build folder for the evidence [build]; skipped (saying so)
#                       when DIR/asgd is missing or DIR is not a native build
#   --cpu MODEL         a qemu CPU model (qemu-x86_64 -cpu help), repeatable
#                       [Nehalem Haswell: SSE4.2 without AVX; AVX2 and FMA without AVX-512]
#   --out DIR           where the run folders go [a temporary folder, removed at the end]
#
# Excluded from the byte comparison: summary.csv's run_id column only (the run folder's
# name, which holds the wall-clock start time). Every other column, times included, is
# virtual in a simulated run. provenance.json and config.ini are not compared (start
# time, CPU, out_dir); the script checks instead that each emulated run's provenance
# names the emulated CPU (not the host's: an exec under qemu-user runs natively) and says
# build_mode portable and libm sse2.
#
# Exit status: 0 every emulated run equals the native one; 1 a difference (listed);
# 2 bad arguments or a missing tool, build or data. About 0.5 min of qemu per config and
# CPU on the 2-core development VM; qemu-user runs one guest thread on one host thread.
set -euo pipefail

cd "$(dirname "$0")/.."
build="build-portable"
native_build=build
cpus=()
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --native-build) native_build=$2; shift 2 ;;
    --cpu) cpus+=("$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "portable_check: unknown argument '$1' (expected --build, --native-build, --cpu, --out)" >&2; exit 2 ;;
  esac
done
[ ${#cpus[@]} -gt 0 ] || cpus=(Nehalem Haswell)

command -v qemu-x86_64 >/dev/null || {
  echo "portable_check: qemu-x86_64 not found (Debian: apt-get install qemu-user)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "portable_check: python3 not found" >&2; exit 2; }
[ -n "${ASGD_DATA_DIR:-}" ] || {
  echo "portable_check: ASGD_DATA_DIR is not set (the folder holding mnist/)" >&2; exit 2; }
[ "$(uname -m)" = x86_64 ] || { echo "portable_check: needs an x86-64 host" >&2; exit 2; }

# A CMake cache entry's value, or "".
cache_value() { sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt" 2>/dev/null; }

if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "== configuring $build (portable)"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DASGD_NATIVE=OFF -DASGD_CUDA=OFF \
        -DASGD_TORCH=OFF -DASGD_BUILD_TESTS=OFF -DASGD_BUILD_BENCHMARKS=OFF >/dev/null
fi
if [ "$(cache_value "$build" ASGD_NATIVE)" != OFF ]; then
  echo "portable_check: $build is not a portable build (ASGD_NATIVE=$(cache_value "$build" ASGD_NATIVE); expected OFF)" >&2
  exit 2
fi
echo "== building asgd in $build"
cmake --build "$build" -j "$(nproc)" --target asgd >/dev/null

if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/asgd-portable-check.XXXXXX")
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

# Two configs that each take under a second natively, with Eigen GEMMs deep enough to be
# blocked (the 784 inputs exceed a block's depth), the log-normal step times (libm's log
# and exp), and in the second the qsgd compressor's random rounding with error feedback.
common=(--set experiment.epochs=0.05 --set data.train_limit=20000 --set data.test_limit=1000
        --set metrics.eval_every_epochs=0.01 --set experiment.progress=off
        --set experiment.log_level=warning)
names=(sync_sgd_32 async_sgd_qsgd_8)
configs=(experiments/configs/sim_mnist_mlp_1024.ini experiments/configs/mnist_mlp_async_sgd.ini)
sets=("--set algorithm.workers=32 --set algorithm.replicas_to_aggregate=30"
      "--set cluster.transport=sim --set algorithm.workers=8 --set algorithm.batch_size=16
       --set compression.name=qsgd --set compression.error_feedback=true
       --set delay.compute=lognormal --set delay.mean_ms=20 --set delay.stddev_ms=5
       --set network.preset=dc_10gbe")

# The variables the binary pins (experiments/config/cpu_dispatch.h) are cleared, so that
# its own choices are what is checked. Under qemu GLIBC_TUNABLES is set beforehand: with
# an emulated CPU that has FMA the binary would otherwise execute itself again, and an
# exec under qemu-user runs on the host's CPU.
pinned=(GLIBC_TUNABLES OPENBLAS_CORETYPE ATEN_CPU_CAPABILITY ONEDNN_MAX_CPU_ISA)
clean_env=(env)
for v in "${pinned[@]}"; do clean_env+=(-u "$v"); done
hwcaps="glibc.cpu.hwcaps=-AVX2,-FMA,-FMA4"

# run LABEL INDEX PREFIX...: runs config INDEX with PREFIX (the binary and any wrapper)
# into $out/LABEL/NAME; prints the run folder, or nothing if the run failed.
run() {
  local label=$1 i=$2; shift 2
  local dir="$out/$label/${names[$i]}"
  mkdir -p "$dir"
  # shellcheck disable=SC2086  # sets[i] is a list of words
  if "$@" run "${configs[$i]}" "${common[@]}" ${sets[$i]} --set "experiment.out_dir=$dir" \
       >"$dir.log" 2>&1; then
    find "$dir" -mindepth 1 -maxdepth 1 -type d | head -1
  else
    echo "   $label ${names[$i]}: exit status $? ($(grep -v '^qemu-x86_64: warning' "$dir.log" | tail -1))" >&2
  fi
}

# compare A B: every CSV of run folder A against B's; prints each difference, returns 1
# if there is one.
compare() {
  python3 - "$1" "$2" <<'EOF'
import csv, io, os, sys
a, b = sys.argv[1], sys.argv[2]
excluded = {"summary.csv": {"run_id"}}  # the run folder's name: the wall-clock start time
def rows(path, drop):
    text = open(path, newline="").read()
    if not drop:
        return text
    table = list(csv.reader(io.StringIO(text)))
    keep = [i for i, name in enumerate(table[0]) if name not in drop]
    return [[r[i] for i in keep if i < len(r)] for r in table]
files_a = sorted(f for f in os.listdir(a) if f.endswith(".csv"))
files_b = sorted(f for f in os.listdir(b) if f.endswith(".csv"))
bad = 0
if files_a != files_b:
    print(f"   CSV files differ: {files_a} vs {files_b}")
    bad = 1
for f in files_a:
    if f not in files_b:
        continue
    drop = excluded.get(f, set())
    x, y = rows(os.path.join(a, f), drop), rows(os.path.join(b, f), drop)
    if x != y:
        bad = 1
        lx, ly = (x.splitlines() if isinstance(x, str) else x), (y.splitlines() if isinstance(y, str) else y)
        n = next((i for i in range(min(len(lx), len(ly))) if lx[i] != ly[i]), min(len(lx), len(ly)))
        print(f"   {f} differs from line {n + 1}: {lx[n] if n < len(lx) else '(end)'} | {ly[n] if n < len(ly) else '(end)'}")
    else:
        print(f"   {f} equal" + (f" (without {', '.join(sorted(drop))})" if drop else ""))
sys.exit(bad)
EOF
}

# provenance DIR: build_mode, libm, cpu of a run folder, tab-separated.
provenance() {
  python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))
print(p.get("build_mode", "?"), p.get("libm", "?"), p.get("cpu", "?"), sep="\t")' "$1/provenance.json"
}

echo "== host: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores"
echo "== $("$build/asgd" version | head -1)"
echo "== qemu: $(qemu-x86_64 --version | head -1)"
failed=0
for i in "${!names[@]}"; do
  # shellcheck disable=SC2086  # sets[i] is a list of words
  echo "== ${names[$i]}: ${configs[$i]} $(echo "${common[@]}" ${sets[$i]} | tr -s ' \n' ' ')"
  start=$(date +%s)
  native=$(run native "$i" "${clean_env[@]}" "$build/asgd")
  [ -n "$native" ] || { failed=1; continue; }
  IFS=$'\t' read -r mode libm host_cpu < <(provenance "$native")
  echo "-- native ($(( $(date +%s) - start )) s): cpu '$host_cpu', build_mode $mode, libm $libm"
  for cpu in "${cpus[@]}"; do
    start=$(date +%s)
    emulated=$(run "qemu-$cpu" "$i" "${clean_env[@]}" GLIBC_TUNABLES="$hwcaps" \
                   qemu-x86_64 -cpu "$cpu" "$build/asgd")
    [ -n "$emulated" ] || { failed=1; continue; }
    IFS=$'\t' read -r mode libm cpu_name < <(provenance "$emulated")
    echo "-- qemu -cpu $cpu ($(( $(date +%s) - start )) s): cpu '$cpu_name', build_mode $mode, libm $libm"
    if [ "$cpu_name" = "$host_cpu" ] || [ "$mode" != portable ] || [ "$libm" != sse2 ]; then
      echo "   not an emulated portable run with libm sse2 (did it execute natively?)"
      failed=1
    fi
    compare "$native" "$emulated" || failed=1
  done
done

echo "== evidence that the comparison can fail: the native build"
if [ ! -x "$native_build/asgd" ] || [ "$(cache_value "$native_build" ASGD_NATIVE)" = OFF ]; then
  echo "-- skipped: $native_build/asgd is missing or not a native build"
else
  echo "-- $("$native_build/asgd" version | head -1)"
  for i in "${!names[@]}"; do
    portable_run=$(find "$out/native/${names[$i]}" -mindepth 1 -maxdepth 1 -type d | head -1)
    nb=$(run native-build "$i" "${clean_env[@]}" "$native_build/asgd")
    if [ -n "$nb" ] && [ -n "$portable_run" ]; then
      echo "-- ${names[$i]}: native build against the portable build, both on this CPU"
      compare "$portable_run" "$nb" || echo "   (differs, as expected of -march=native)"
    fi
    echo "-- ${names[$i]}: native build under qemu -cpu ${cpus[-1]}"
    if q=$(run native-build-qemu "$i" "${clean_env[@]}" GLIBC_TUNABLES="$hwcaps" \
             qemu-x86_64 -cpu "${cpus[-1]}" "$native_build/asgd") && [ -n "$q" ]; then
      compare "$portable_run" "$q" || echo "   (differs)"
    fi
  done
fi

if [ "$failed" -eq 0 ]; then
  echo "== PASS: every emulated portable run equals the native one"
else
  echo "== FAIL: see the differences above"
fi
exit "$failed"
