#!/usr/bin/env bash
# A private single-node SLURM for the tests labelled `slurm`: munged, slurmctld and slurmd
# from Debian's munge, slurmctld, slurmd and slurm-client packages, with their config,
# key, state, spool, logs and pid files under DIR and their own free ports on 127.0.0.1.
# The node uses no cgroups, so it also starts in a root without /sys/fs/cgroup.
#
#   slurm_fixture.sh start DIR [OWNER_PID]
#                                start the daemons; wait (at most 60 s) until sinfo shows
#                                the node idle; print SLURM_CONF=DIR/slurm.conf. With
#                                OWNER_PID (the test process), a watchdog (its own session,
#                                pid in DIR/run/watchdog.pid) stops the daemons by PID when
#                                that process is gone, e.g. killed by a ctest timeout
#                                before its TearDown could run.
#   slurm_fixture.sh stop DIR    stop every daemon (and the watchdog) by the PID in its
#                                pid file
#   slurm_fixture.sh check       exit 0 if a cluster can start here, else print why, exit 77
#
# Clients find the cluster through SLURM_CONF=DIR/slurm.conf. `start` exits 77 (ctest's
# skip code) with the reason when SLURM cannot start here (not root, packages absent),
# and 1 when the daemons fail (their logs are printed).
set -uo pipefail

SKIP=77
SBIN=/usr/sbin

why_not() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "not root (the daemons run as root here)"; return
  fi
  for p in munged slurmctld slurmd; do
    [ -x "$SBIN/$p" ] || { echo "$SBIN/$p absent (install munge slurmctld slurmd slurm-client)"; return; }
  done
  for p in sinfo sbatch srun squeue scancel scontrol; do
    command -v "$p" >/dev/null || { echo "$p absent (install slurm-client)"; return; }
  done
}

# A free TCP port on 127.0.0.1 (bound and released by the kernel's choice).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

stop_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null)
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null
}

stop_daemons() {
  local dir=$1
  # slurmd first (it may still run job steps), then the controller, then munge.
  stop_pidfile "$dir/run/slurmd.pid"
  stop_pidfile "$dir/run/slurmctld.pid"
  stop_pidfile "$dir/run/munged.pid"
}

stop() {
  stop_pidfile "$1/run/watchdog.pid"
  stop_daemons "$1"
}

# Polls OWNER_PID every second; once it is gone, stops the daemons (twice, a few seconds
# apart, in case a start was still under way).
watch() {
  local dir=$1 owner=$2
  while kill -0 "$owner" 2>/dev/null; do sleep 1; done
  echo "owner $owner is gone: stopping the daemons"
  stop_daemons "$dir"
  sleep 3
  stop_daemons "$dir"
}

start() {
  local dir=$1 owner=${2:-}
  local reason
  reason=$(why_not)
  if [ -n "$reason" ]; then
    echo "SLURM cannot start here: $reason"
    exit $SKIP
  fi
  mkdir -p "$dir"/{run,log,state,spool,munge}
  dir=$(cd "$dir" && pwd)
  if [ -n "$owner" ]; then
    setsid /bin/bash "$0" watch "$dir" "$owner" >"$dir/log/watchdog.log" 2>&1 </dev/null &
    echo $! >"$dir/run/watchdog.pid"
  fi
  local host
  host=$(hostname -s)
  local ctld_port slurmd_port
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done

  head -c 1024 /dev/urandom > "$dir/munge/munge.key"
  chmod 0400 "$dir/munge/munge.key"
  chmod 0700 "$dir/munge"
  /usr/sbin/munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munge.seed" --force || { cat "$dir/log/munged.log"; exit 1; }

  cat > "$dir/slurm.conf" <<CONF
ClusterName=asgdtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MinJobAge=600
SchedulerParameters=sched_interval=1
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
  # No cgroups: processes are tracked through /proc (proctrack/linuxproc), tasks are not
  # confined (task/none) and nothing is gathered from cgroups. slurmd of SLURM 22.05
  # (Debian 12) still loads a cgroup plugin at start, and by default it detects the
  # version from /sys/fs/cgroup, failing ("cgroup filesystem not mounted ... slurmd
  # initialization failed") in a root without that file system (a container or a chroot).
  # Naming the version skips the detection; with the plugins above nothing uses it, so
  # the node starts with or without cgroups mounted, v1 or v2.
  printf 'CgroupPlugin=cgroup/v1\n' >"$dir/cgroup.conf"
  export SLURM_CONF="$dir/slurm.conf"
  /usr/sbin/slurmctld -f "$SLURM_CONF" -i || { cat "$dir/log/slurmctld.log"; stop "$dir"; exit 1; }
  /usr/sbin/slurmd -f "$SLURM_CONF" || { cat "$dir/log/slurmd.log"; stop "$dir"; exit 1; }
  for _ in $(seq 120); do
    if sinfo -h -o '%t' 2>/dev/null | grep -qx 'idle'; then
      echo "SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 0.5
  done
  echo "the node did not become idle within 60 s:"
  sinfo 2>&1 | head -5
  tail -20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log"
  stop "$dir"
  exit 1
}

case "${1:-}" in
  start) [ $# -eq 2 ] || [ $# -eq 3 ] || { echo "usage: $0 start DIR [OWNER_PID]"; exit 2; }
    start "$2" "${3:-}" ;;
  watch) [ $# -eq 3 ] || { echo "usage: $0 watch DIR OWNER_PID"; exit 2; }; watch "$2" "$3" ;;
  stop) [ $# -eq 2 ] || { echo "usage: $0 stop DIR"; exit 2; }; stop "$2" ;;
  check) r=$(why_not); if [ -n "$r" ]; then echo "$r"; exit $SKIP; fi ;;
  *) echo "usage: $0 start DIR [OWNER_PID] | stop DIR | check"; exit 2 ;;
esac
