#!/bin/bash
# Regenerates results/sim/calibration/netns/ (issue 33 item 3c): a slow network for real.
# Every role of a run is a process in a network namespace of its own (a coordinator, the
# shard servers and the workers), each joined to a bridge in one more namespace (the
# switch) by a veth pair whose two directions are shaped with tc: tbf at RATE on the
# node's side (its transmit) and on the switch's side (its receive), plus netem DELAY_MS
# on the node's side when the kernel has netem. The same config is then simulated
# (cluster.transport = sim) on the same link: network.link_gbps = RATE,
# network.latency_us = what a TCP ping-pong between two of the namespaces measured (half
# its median round trip), network.goodput = 1448/1514 (tbf counts each segment's Ethernet,
# IP and TCP headers: 1514 bytes on the qdisc for 1448 of payload).
#
# Run as root from the repository root with ASGD_DATA_DIR set, after the build of the
# top-level README (build/asgd); about 6 minutes. Environment (defaults in brackets):
# WORKERS ["2 4 8 16"], STRATEGIES ["async_sgd allreduce_sgd"], RATE_MBIT [100], DELAY_MS
# [1], HIDDEN [64,64] (the MLP's hidden layers: the message size), OUT
# [results/sim/calibration/netns], SUFFIX [""] (added to every run's name: a
# repetition, e.g. SUFFIX=_r2, is paired with its own twin), MONITOR [0] (1: sample the
# shard's two shaped queues every 20 ms into logs/real_NAME.links.csv; links.py sums them
# up). SIM_ONLY=1 runs only the simulated side (no root needed), with the one-way latency
# LATENCY_US [54, the record's]: for a strategy the simulator did not accept yet when the
# real side was recorded, or to simulate recorded real runs again with other settings:
# SIM_SET [""] adds its words to the simulated run's command line (e.g. "--set sim.cores=2
# --set sim.transport_ns_per_byte=0.5"), and SIM_PREFIX [sim] names its run
# SIM_PREFIX_NAME (a prefix other than sim keeps it out of ../pairs.py's table; cpu.py
# pairs simcpu_NAME with real_NAME). SET [""] adds its words to both sides' command lines
# (e.g. "--set collective.algorithm=halving_doubling --set collective.overlap=true").
# NODE_SYSCTL [""] sets kernel settings in every node's namespace (words key=value, e.g.
# "net.ipv4.tcp_slow_start_after_idle=0").
# Every process it starts is ended by its PID and every namespace deleted on exit (the
# trap), also on failure or Ctrl-C. Servers bind only their namespace's address
# (10.77.0.x); nothing is bound in the host's namespace.
set -euo pipefail

WORKERS=${WORKERS:-"2 4 8 16"}
STRATEGIES=${STRATEGIES:-"async_sgd allreduce_sgd"}
RATE_MBIT=${RATE_MBIT:-100}
NODE_SYSCTL=${NODE_SYSCTL:-}
DELAY_MS=${DELAY_MS:-1}
OUT=${OUT:-results/sim/calibration/netns}
CFG=experiments/configs/sim_calibration.ini
ASGD=${ASGD:-build/asgd}
# The model and run length: a smaller MLP (784-64-64-10, 55,050 parameters, 220 KB a
# message) so that one epoch at 100 Mbit/s is about half a minute and its 1,875 pushes give
# the staleness histogram.
COMMON=(--set model.hidden="${HIDDEN:-64,64}" --set experiment.epochs=1 --set experiment.progress=off
        --set metrics.eval_every_epochs=100)

SIM_ONLY=${SIM_ONLY:-0}
if [ "$SIM_ONLY" != 1 ] && [ "$(id -u)" != 0 ]; then
  echo "run.sh: needs root (ip netns, tc)" >&2
  exit 2
fi
for tool in ip tc python3; do
  command -v $tool >/dev/null || { echo "run.sh: $tool not found" >&2; exit 2; }
done
[ -x "$ASGD" ] || { echo "run.sh: $ASGD not built" >&2; exit 2; }
for w in $WORKERS; do
  [ "$w" -ge 2 ] 2>/dev/null || { echo "run.sh: WORKERS: '$w': expected counts >= 2" >&2; exit 2; }
done

P=a$$                   # namespace names: a<pid>sw, a<pid>c, a<pid>p0, a<pid>w0 ...
SW=${P}sw
NAMESPACES=()
PIDS=()
cleanup() {
  local pid ns
  for pid in "${PIDS[@]:-}"; do
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
  done
  sleep 0.5
  for pid in "${PIDS[@]:-}"; do
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
  done
  for ns in "${NAMESPACES[@]:-}"; do
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null || true
  done
  NAMESPACES=()
  PIDS=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

APPLIED_DELAY_MS=0  # SIM_ONLY: LATENCY_US is the whole one-way latency
if [ "$SIM_ONLY" != 1 ]; then
  ip netns add ${P}probe
  NAMESPACES+=(${P}probe)
  ip -n ${P}probe link add d0 type veth peer name d1
  if tc -n ${P}probe qdisc add dev d0 root netem delay 1ms 2>/dev/null; then
    APPLIED_DELAY_MS=$DELAY_MS
  else
    echo "netem is not in this kernel (CONFIG_NET_SCH_NETEM): links shaped by rate only," \
         "no added delay" >&2
  fi
  ip netns del ${P}probe
  NAMESPACES=()
fi

# shape DEV NS DELAY: tbf at RATE_MBIT (and netem DELAY ms before it when DELAY > 0).
# tbf: burst 32 KB; a queue of up to 500 ms at the rate, so that the switch port of a
# shard receiving from every worker at once queues rather than drops.
shape() {
  local dev=$1 ns=$2 delay=$3 parent=root
  if [ "$delay" != 0 ]; then
    tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "${delay}ms" limit 100000
    parent="parent 1:1"
  fi
  # shellcheck disable=SC2086
  tc -n "$ns" qdisc add dev "$dev" $parent handle 10: tbf rate "${RATE_MBIT}mbit" \
    burst 32kb latency 500ms
}

# node NAME ADDRESS SHAPED: a namespace a<pid>NAME joined to the switch, address 10.77.0.x.
node() {
  local ns=${P}$1 addr=$2 shaped=$3
  ip netns add "$ns"
  NAMESPACES+=("$ns")
  ip -n "$SW" link add "v$1" type veth peer name eth0 netns "$ns"
  ip -n "$SW" link set "v$1" master br0 up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  local kv
  for kv in $NODE_SYSCTL; do ip netns exec "$ns" sysctl -qw "$kv"; done
  if [ "$shaped" = 1 ]; then
    shape eth0 "$ns" "$APPLIED_DELAY_MS"  # the node's transmit
    shape "v$1" "$SW" 0                   # its receive (the switch port's transmit)
  fi
}

# topology W SHARDS: the switch, the coordinator (unshaped: the control plane, which the
# simulator does not model), the shards and W workers (shaped).
topology() {
  local w=$1 shards=$2 i
  ip netns add "$SW"
  NAMESPACES+=("$SW")
  ip -n "$SW" link add br0 type bridge
  ip -n "$SW" link set br0 up
  node c 10.77.0.1 0
  for ((i = 0; i < shards; i++)); do node "p$i" "10.77.0.$((10 + i))" 1; done
  for ((i = 0; i < w; i++)); do node "w$i" "10.77.0.$((100 + i))" 1; done
}

# The one-way latency, in whole µs, of a trip between two nodes (worker 0 to worker 1: its
# transmit and the other's receive, as a worker's request to a shard): half the median
# round trip of 300 ping-pongs of 64-byte TCP messages (the first 20 left out).
measure_latency_us() {
  python3 - "$P" <<'EOF'
import os, socket, statistics, subprocess, sys, time
p = sys.argv[1]
srv = subprocess.Popen(["ip", "netns", "exec", p + "w1", "python3", "-c", """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.0.101", 23999)); s.listen(1); c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    b = c.recv(64, socket.MSG_WAITALL)
    if len(b) < 64: break
    c.sendall(b)
"""])
try:
    out = subprocess.run(["ip", "netns", "exec", p + "w0", "python3", "-c", """
import socket, statistics, time
for _ in range(100):
    try:
        c = socket.create_connection(("10.77.0.101", 23999)); break
    except OSError: time.sleep(0.05)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtt = []
for i in range(300):
    t = time.perf_counter(); c.sendall(b"x" * 64); c.recv(64, socket.MSG_WAITALL)
    rtt.append(time.perf_counter() - t)
print(statistics.median(rtt[20:]) * 1e6)
"""], capture_output=True, text=True, check=True, timeout=60).stdout
finally:
    try:
        srv.wait(timeout=10)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv.wait()
print(f"{float(out) / 2:.0f}")
EOF
}

# monitor CSV: every 20 ms, the bytes the shard's two tbf queues have sent and their
# backlog (tc's counters: the shard's transmit, eth0 in its namespace, and its receive, the
# switch port vp0), until ended by cleanup or until its namespaces are gone.
monitor() {
  python3 - "$P" "$1" <<'EOF'
import json, subprocess, sys, time
p, out = sys.argv[1], sys.argv[2]
def tbf(ns, dev):
    r = subprocess.run(["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(0)
    q = [x for x in json.loads(r.stdout) if x["kind"] == "tbf"][0]
    return q["bytes"], q["backlog"]
with open(out, "w") as f:
    f.write("t_s,shard_tx_bytes,shard_tx_backlog,shard_rx_bytes,shard_rx_backlog\n")
    t0 = time.monotonic()
    while True:
        tx, rx = tbf(p + "p0", "eth0"), tbf(p + "sw", "vp0")
        f.write(f"{time.monotonic() - t0:.4f},{tx[0]},{tx[1]},{rx[0]},{rx[1]}\n")
        f.flush()
        time.sleep(0.02)
EOF
}

start() {  # start NS LOG CMD...: run CMD in namespace a<pid>NS, output to LOG; PID in LAST
  local ns=${P}$1 log=$2
  shift 2
  ip netns exec "$ns" "$@" >"$log" 2>&1 &
  LAST=$!
  PIDS+=("$LAST")
}

# real_run STRATEGY W SHARDS NAME: the run in namespaces; sets REAL_EXIT.
real_run() {
  local strategy=$1 w=$2 shards=$3 name=$4 i t pid alive coordinator workers_list ps_list log
  topology "$w" "$shards"
  if [ -z "$MEASURED_US" ]; then
    MEASURED_US=$(measure_latency_us)
    echo "measured one-way latency of a shaped link: ${MEASURED_US} us" >&2
  fi
  workers_list=$(for ((i = 0; i < w; i++)); do printf '10.77.0.%d:%d,' $((100 + i)) $((24000 + i)); done)
  ps_list=$(for ((i = 0; i < shards; i++)); do printf '10.77.0.%d:%d,' $((10 + i)) $((23500 + i)); done)
  local CLUSTER=(--set "cluster.coordinator=10.77.0.1:23400" --set "cluster.ps=${ps_list%,}"
                 --set "cluster.worker=${workers_list%,}" --set cluster.allow_plain_remote=true
                 --set cluster.transport=inproc)
  log=$OUT/logs/real_$name
  start c "$log.coordinator.log" "$ASGD" coordinator --config "$CFG" "${RUN[@]}" "${CLUSTER[@]}" \
    --set cluster.bind_host=10.77.0.1 --set experiment.name="real_$name" \
    --set experiment.out_dir="$OUT/runs"
  coordinator=$LAST
  if [ "$strategy" != allreduce_sgd ]; then
    for ((i = 0; i < shards; i++)); do
      start "p$i" "$log.ps$i.log" "$ASGD" ps --config "$CFG" --task $i "${RUN[@]}" \
        "${CLUSTER[@]}" --set cluster.bind_host=10.77.0.$((10 + i))
    done
  fi
  for ((i = 0; i < w; i++)); do
    start "w$i" "$log.worker$i.log" "$ASGD" worker --config "$CFG" --task $i "${RUN[@]}" \
      "${CLUSTER[@]}"
  done
  if [ "${MONITOR:-0}" = 1 ] && [ "$strategy" != allreduce_sgd ]; then
    monitor "$OUT/logs/real_$name.links.csv" &
    PIDS+=("$!")
  fi
  REAL_EXIT=0
  wait "$coordinator" || REAL_EXIT=$?
  # The others end once the coordinator has told them; 20 s, then cleanup ends them by PID.
  for ((t = 0; t < 200; t++)); do
    alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  cleanup
}

mkdir -p "$OUT/runs" "$OUT/logs"
ASGD_RUN_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
export ASGD_RUN_TOKEN
MEASURED_US=""
[ "$SIM_ONLY" = 1 ] && MEASURED_US=${LATENCY_US:-54}
[ -f "$OUT/runs.csv" ] ||
  echo "name,strategy,workers,rate_mbit,netem_delay_ms,measured_one_way_us,real_exit,sim_exit" \
    >"$OUT/runs.csv"
for strategy in $STRATEGIES; do
  for w in $WORKERS; do
    name=${strategy}_w$w${SUFFIX:-}
    shards=1
    # shellcheck disable=SC2206
    RUN=(--set algorithm.name="$strategy" --set algorithm.workers="$w" "${COMMON[@]}" ${SET:-})
    REAL_EXIT=-
    [ "$SIM_ONLY" = 1 ] || real_run "$strategy" "$w" $shards "$name"
    # The same link, simulated (exit 2 and one line in its log if asgd does not simulate
    # the strategy).
    sim_exit=0
    sim_name=${SIM_PREFIX:-sim}_$name
    # shellcheck disable=SC2086
    "$ASGD" run "$CFG" "${RUN[@]}" --set cluster.transport=sim --set cluster.shards=$shards \
      --set network.preset=dc_10gbe --set network.link_gbps="$(python3 -c "print($RATE_MBIT / 1000)")" \
      --set network.goodput=0.956406869 \
      --set network.latency_us=$((MEASURED_US + APPLIED_DELAY_MS * 1000)) \
      ${SIM_SET:-} --set experiment.name="$sim_name" --set experiment.out_dir="$OUT/runs" \
      >"$OUT/logs/$sim_name.log" 2>&1 || sim_exit=$?
    echo "$name,$strategy,$w,$RATE_MBIT,$APPLIED_DELAY_MS,$MEASURED_US,$REAL_EXIT,$sim_exit" \
      >>"$OUT/runs.csv"
  done
done
# The per-push rows (staleness.csv) are left out of the record: the histograms are what
# the comparison reads.
rm -f "$OUT"/runs/*/staleness.csv
# The logs name the data folder as $ASGD_DATA_DIR, not this machine's path.
[ -z "${ASGD_DATA_DIR:-}" ] || sed -i "s|$ASGD_DATA_DIR|\$ASGD_DATA_DIR|g" "$OUT"/logs/*.log
