#!/usr/bin/env python3
"""CPU time per request of each thread of one transport_bench case, asgd against raw ZeroMQ, for one or two builds, alternating.

    benchmarks/transport_cpu_ab.py --case Push/tcp/1MiB/inflight:1 --rounds 5 \\
        --a OLD/benchmarks/transport_bench --b build/benchmarks/transport_bench

Runs each binary in turn, once per round, under `perf record -e cpu-clock` (10 kHz) on the
case and its raw baseline (BM_<case>/shards:1/clients:1 and BM_Raw<case>/clients:1, each
with --benchmark_repetitions=3), counts the samples of every thread and divides by the
requests the benchmark made: microseconds of CPU per request for the client (the main
thread), the server (asgd-ps-* for asgd, raw-server for raw) and ZeroMQ's I/O thread, their
total, the wall time per request and vs_raw. A thread's CPU per request moves much less with
the machine's load than the wall time does (2 cores shared with other jobs move vs_raw by
±50 % from run to run), so it shows where asgd spends what raw ZeroMQ does not even on a
busy machine. Samples are attributed to the asgd case while a shard thread lives and to
the raw case otherwise. Prints each round and the medians with their range over the rounds.
Needs perf (Debian: linux-perf) with permission to sample (perf_event_paranoid <= 2 for
one's own processes). Exit status 2 when perf or a binary fails, naming it.
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROLES = ("client", "server", "io")


def fail(message):
    print(f"transport_cpu_ab: {message}", file=sys.stderr)
    sys.exit(2)


def role(comm, tid, main_tid):
    if comm.startswith("ZMQbg/IO"):
        return "io"
    if comm.startswith("ZMQbg"):
        return "zmq"  # the reaper
    # The shard thread (asgd-ps-N) or the raw server (raw-server; unnamed in older builds).
    return "client" if tid == main_tid else "server"


def measure(binary, case, reps, workdir):
    """One run of binary on the case; CPU us per request per thread role, wall and vs_raw."""
    op, rest = case.split("/", 1)
    pattern = f"^BM_(Raw{op}/{rest}/clients:1|{op}/{rest}/shards:1/clients:1)/"
    data = os.path.join(workdir, "perf.data")
    run = subprocess.run(
        ["perf", "record", "-q", "-e", "cpu-clock", "-F", "10000", "-o", data, binary,
         "--benchmark_filter=" + pattern, f"--benchmark_repetitions={reps}",
         "--benchmark_format=json"], capture_output=True, text=True)
    if run.returncode != 0:
        tail = run.stderr.strip().splitlines()[-1:] or ["(no output)"]
        fail(f"perf record of {binary} failed with status {run.returncode}: {tail[0]}")
    requests = collections.Counter()
    wall = collections.defaultdict(list)
    vs_raw = []
    for b in json.loads(run.stdout)["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        kind = "raw" if b["name"].startswith("BM_Raw") else "asgd"
        requests[kind] += b["iterations"]
        wall[kind].append(b["real_time"])
        if kind == "asgd":
            vs_raw.append(b["vs_raw"])
    if not requests["raw"] or not requests["asgd"]:
        fail(f"{binary} ran no {case} (asgd and raw): check --case")
    script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,time"],
                            capture_output=True, text=True)
    if script.returncode != 0:
        fail(f"perf script failed with status {script.returncode}")
    samples = []
    for line in script.stdout.splitlines():
        m = re.match(r"^\s*(.*?)\s+(\d+)\s+([\d.]+):", line)
        if m:
            samples.append((m.group(1), int(m.group(2)), float(m.group(3))))
    main_tid = min(tid for _, tid, _ in samples)
    shard_life = {}
    for comm, tid, t in samples:
        if comm.startswith("asgd-ps"):
            first, last = shard_life.get(tid, (t, t))
            shard_life[tid] = (min(first, t), max(last, t))

    def in_asgd(t):
        return any(first - 0.003 <= t <= last + 0.003 for first, last in shard_life.values())

    out = {}
    for kind in ("raw", "asgd"):
        counts = collections.Counter(role(c, tid, main_tid) for c, tid, t in samples
                                     if in_asgd(t) == (kind == "asgd"))
        per_request = 100.0 / requests[kind]  # a sample is 100 us
        row = {r: counts[r] * per_request for r in ROLES}
        row["total"] = sum(counts.values()) * per_request
        row["wall"] = statistics.median(wall[kind])
        out[kind] = row
    out["asgd"]["vs_raw"] = statistics.median(vs_raw)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--case", required=True,
                   help="<Op>/<endpoint>/<size>/inflight:<d>, e.g. Push/tcp/64KiB/inflight:8")
    p.add_argument("--a", required=True, help="a transport_bench binary")
    p.add_argument("--b", help="a second build, run alternately with --a")
    p.add_argument("--rounds", type=int, default=5, help="runs of each binary")
    p.add_argument("--repetitions", type=int, default=3, help="--benchmark_repetitions per run")
    args = p.parse_args()
    if args.rounds < 1 or args.repetitions < 1:
        fail("--rounds and --repetitions must be at least 1")
    if not re.fullmatch(r"(Push|Pull|PushPull)/(inproc|ipc|tcp)/\w+/inflight:\d+", args.case):
        fail(f"--case {args.case}: expected <Op>/<endpoint>/<size>/inflight:<d>, "
             "e.g. Push/tcp/64KiB/inflight:8")
    binaries = {"a": args.a}
    if args.b:
        binaries["b"] = args.b
    for path in binaries.values():
        if not os.access(path, os.X_OK):
            fail(f"{path} is not an executable transport_bench")
    keys = [f"{k}.{r}" for k in ("raw", "asgd") for r in ROLES + ("total", "wall")] + ["asgd.vs_raw"]
    results = {label: collections.defaultdict(list) for label in binaries}
    with tempfile.TemporaryDirectory(prefix="asgd-cpu-ab-") as workdir:
        for r in range(args.rounds):
            for label, path in binaries.items():
                one = measure(path, args.case, args.repetitions, workdir)
                for key in keys:
                    kind, field = key.split(".")
                    results[label][key].append(one[kind][field])
                print(f"round {r + 1} {label}: " + "  ".join(
                    f"{k} {results[label][k][-1]:.1f}" for k in keys if k.startswith("asgd")),
                    flush=True)
    print(f"{args.case}: CPU us per request by thread, wall us per request, vs_raw; "
          f"medians [min-max] over {args.rounds} rounds")
    for key in keys:
        print(f"  {key:12s}" + "".join(
            f"  {label} {statistics.median(v[key]):8.2f} [{min(v[key]):.2f}-{max(v[key]):.2f}]"
            for label, v in results.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
