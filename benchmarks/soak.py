#!/usr/bin/env python3
"""Soak test of the parameter server under load: workers push to shards as fast as they can.

    benchmarks/soak.py                                  # 8 workers, 2 shards, 600 s, tcp
    benchmarks/soak.py --seconds 60 --out /tmp/soak     # a shake-out run

Runs `asgd ps-check ps` (one process per shard) and `asgd ps-check worker` (one per worker)
with check.seconds = --seconds: the workers push as fast
as they can (4 pushes in flight each) for that long from a common start, meet at a barrier,
and each pulls the parameters and checks them exactly, including every shard's count of
every worker's pushes (experiments/cluster/ps_check.cc explains the values pushed). Meanwhile this
script samples every process's resident memory (VmRSS of /proc/PID/status) and the machine's
load, and the processes print their push counts every --report-every seconds.

It writes to --out (default results/soak/<UTC time>/):

    README.md       the summary: figures, bounds and PASS/FAIL
    throughput.csv  pushes per interval, from the workers' and the shards' progress lines
    rss.csv         time_s, role, task, pid, rss_kib, rss_anon_kib: a row per process per sample
    load.csv        time_s, loadavg_1m, cpu_busy_pct, soak_cpu_pct: what else ran
    soak.ini        the config the processes ran
    logs/           each process's output

and exits 0 on PASS, 1 on FAIL. Every process it starts is ended by PID when it exits, on
Ctrl-C or SIGTERM (SIGTERM, then SIGKILL after 5 s). results/soak/README.md explains the
columns and the bounds.
"""
import argparse
import csv
import datetime
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time

from record_bench import cpu_model  # this folder: the machine line every record shares

# Resident memory may grow by this much between the end of the warm-up and the end of the
# run (results/soak/README.md: why).
RSS_GROWTH_FRACTION = 0.10
RSS_GROWTH_KIB = 8 * 1024


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--asgd", default="build/asgd", help="the asgd binary (default build/asgd)")
    p.add_argument("--workers", type=int, default=8, help="worker processes (default 8)")
    p.add_argument("--shards", type=int, default=2, help="shard server processes (default 2)")
    p.add_argument("--seconds", type=float, default=600, help="how long the workers push (600)")
    p.add_argument("--floats", type=int, default=16384,
                   help="parameters per push, even (default 16384 = 64 KiB): a softmax "
                        "model with 2 classes and floats/2 - 1 features, split evenly "
                        "over the shards")
    p.add_argument("--transport", choices=["tcp", "ipc"], default="tcp",
                   help="tcp on 127.0.0.1 (default) or ipc sockets in --out")
    p.add_argument("--base-port", type=int, default=0,
                   help="tcp: shard i listens on base-port + i (default: free ports)")
    p.add_argument("--report-every", type=float, default=5,
                   help="seconds between progress lines (check.report_every_s; 5)")
    p.add_argument("--rss-every", type=float, default=5, help="seconds between RSS samples (5)")
    p.add_argument("--warmup", type=float, default=30,
                   help="seconds of pushing before the RSS baseline is taken (30)")
    p.add_argument("--seed", type=int, default=1, help="experiment.seed (1)")
    p.add_argument("--out", default="", help="output folder (default results/soak/<UTC time>/)")
    args = p.parse_args()
    if args.floats < 4 or args.floats % 2:
        p.error("--floats must be even and at least 4")
    if args.workers < 1 or args.shards < 1 or args.seconds <= 0:
        p.error("--workers, --shards and --seconds must be positive")
    if args.floats // args.shards < args.workers:
        p.error("every shard needs at least one parameter per worker: raise --floats")
    return args


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(args, path):
    if args.transport == "tcp":
        ports = ([args.base_port + i for i in range(args.shards)] if args.base_port
                 else [free_port() for _ in range(args.shards)])
        ps = ",".join(f"127.0.0.1:{p}" for p in ports)
        worker = ",".join(f"127.0.0.1:{i + 1}" for i in range(args.workers))
    else:
        # ipc paths are relative to the working directory, like --out.
        ps = ",".join(f"ipc://{os.path.join(args.out, f'ps-{i}.sock')}" for i in range(args.shards))
        worker = ",".join(f"ipc://{os.path.join(args.out, f'w-{i}.sock')}"
                          for i in range(args.workers))
    with open(path, "w") as f:
        f.write(f"""# benchmarks/soak.py: {args.workers} workers, {args.shards} shards
[experiment]
seed = {args.seed}
log_level = warning
[data]
dataset = synthetic
synthetic_features = {args.floats // 2 - 1}
synthetic_classes = 2
synthetic_train = 16
synthetic_test = 16
[model]
name = softmax
[check]
seconds = {args.seconds:g}
report_every_s = {args.report_every:g}
[cluster]
placement = even
ps = {ps}
# Workers bind nothing: their addresses only count them.
worker = {worker}
timeout_s = 120
""")


class Processes:
    """The processes this script started, ended by PID."""

    def __init__(self):
        self.procs = []  # (role, task, Popen, log file)

    def start(self, role, task, argv, log_path):
        log = open(log_path, "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        self.procs.append((role, task, proc, log))
        return proc

    def end_all(self):
        live = [p for _, _, p, _ in self.procs if p.poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in live:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for _, _, _, log in self.procs:
            log.close()


def rss_kib(pid):
    """(VmRSS, RssAnon) of /proc/PID/status in KiB, or None once the process is gone."""
    values = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "RssAnon:")):
                    values[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    if "VmRSS" not in values:
        return None
    return values["VmRSS"], values.get("RssAnon", 0)


def cpu_ticks(pid):
    """utime + stime of a process, in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def machine_ticks():
    """(busy, total) clock ticks of all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def loadavg_1m():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def wait_for_line(path, needle, proc, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(path) as f:
            if needle in f.read():
                return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


WORKER_PROGRESS = re.compile(r"^ps_check worker (\d+) progress: unix_s=([0-9.]+) pushes=(\d+)")
WORKER_DONE = re.compile(r"^ps_check worker (\d+) done: pushes=(\d+) seconds=([0-9.]+)")
WORKER_EXACT = re.compile(r"^ps_check worker \d+: all \d+ parameters equal")
PS_PROGRESS = re.compile(r"^ps (\d+) progress: unix_s=([0-9.]+) pushes_applied=(\d+) "
                         r"requests=\d+ bytes_received=(\d+) errors=(\d+)")
PS_STOPPED = re.compile(r"^ps (\d+): stopped at version \d+ after \d+ requests "
                        r"\((\d+) pushes applied, \d+ pulls, (\d+) error replies\)")
PS_SERVING = re.compile(r"^ps \d+: serving \d+ of (\d+) parameters")


def read_lines(path):
    with open(path, errors="replace") as f:
        return f.read().splitlines()


def ticks_of(progress, every):
    """{tick index: count} of the periodic lines (not the first and last, taken off the grid)."""
    out = {}
    for unix_s, count in progress[1:-1]:
        k = round(unix_s / every)
        if abs(unix_s - k * every) < every / 2:
            out[k] = count
    return out


def throughput_rows(workers, shards, every, t0, bytes_per_push):
    """One row per interval of the wall-clock grid, plus the partial first and last ones."""
    start = max(p[0][0] for p in workers.values())
    end = min(p[-1][0] for p in workers.values())
    w_ticks = {w: ticks_of(p, every) for w, p in workers.items()}
    s_ticks = {s: ticks_of(p, every) for s, p in shards.items()}
    grid = [k for k in sorted(set.intersection(*(set(t) for t in w_ticks.values())))
            if start <= k * every <= end]
    # Boundaries: the common start, every grid line, the common end. At the start every
    # worker has pushed 0; at the end each has pushed its total.
    points = [(start, {w: 0 for w in workers}, "start")]
    points += [(k * every, {w: w_ticks[w][k] for w in workers}, k) for k in grid]
    points.append((end, {w: p[-1][1] for w, p in workers.items()}, "end"))
    rows = []
    for (ta, ca, ka), (tb, cb, kb) in zip(points, points[1:]):
        if tb <= ta:
            continue
        pushes = sum(cb[w] - ca[w] for w in workers)
        row = {
            "t_start_s": f"{ta - t0:.3f}",
            "t_end_s": f"{tb - t0:.3f}",
            "full": int(isinstance(ka, int) and isinstance(kb, int)),
            "worker_pushes": pushes,
            "pushes_per_s": f"{pushes / (tb - ta):.1f}",
            "mib_per_s": f"{pushes * bytes_per_push / (tb - ta) / 2**20:.2f}",
        }
        for s in sorted(shards):
            a = s_ticks[s].get(ka) if isinstance(ka, int) else None
            b = s_ticks[s].get(kb) if isinstance(kb, int) else None
            row[f"ps{s}_pushes_applied"] = b - a if a is not None and b is not None else ""
        rows.append(row)
    return rows


def write_csv(path, rows, columns):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)


def mib(kib):
    return f"{kib / 1024:.1f}"


def main():
    args = parse_args()
    started_utc = datetime.datetime.now(datetime.timezone.utc)
    if not args.out:
        args.out = os.path.join("results", "soak", started_utc.strftime("%Y%m%dT%H%M%SZ"))
    logs = os.path.join(args.out, "logs")
    os.makedirs(logs, exist_ok=True)
    config = os.path.join(args.out, "soak.ini")
    write_config(args, config)
    # The run's token, inherited by every role: worker 0's stop request must carry it
    # for the shard servers to obey it (docs/failure-model.md).
    os.environ.setdefault("ASGD_RUN_TOKEN", secrets.token_hex(16))

    # Ctrl-C, SIGTERM and SIGHUP end the run through the finally below. Set explicitly:
    # a shell starts background jobs with SIGINT ignored.
    def stop(signum, _frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    procs = Processes()
    rss_rows, load_rows = [], []
    interrupted = None
    t0 = time.time()
    try:
        for i in range(args.shards):
            log = os.path.join(logs, f"ps-{i}.log")
            p = procs.start("ps", i, [args.asgd, "ps-check", "ps", "--config", config,
                                      "--task", str(i)], log)
            if not wait_for_line(log, "serving", p, 60):
                raise RuntimeError(f"ps {i} did not start: see {log}")
        for i in range(args.workers):
            procs.start("worker", i, [args.asgd, "ps-check", "worker", "--config", config,
                                      "--task", str(i)],
                        os.path.join(logs, f"worker-{i}.log"))
        print(f"soak: {args.shards} ps and {args.workers} workers started "
              f"({', '.join(str(p.pid) for _, _, p, _ in procs.procs)}); "
              f"pushing for {args.seconds:g} s, writing {args.out}", flush=True)

        deadline = time.monotonic() + args.seconds + 300
        last_busy, last_total = machine_ticks()
        last_soak = {p.pid: cpu_ticks(p.pid) or 0 for _, _, p, _ in procs.procs}
        next_sample = time.monotonic()
        next_note = time.monotonic() + 60
        while any(p.poll() is None for _, _, p, _ in procs.procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"still running {args.seconds + 300:g} s after the start")
            for role, task, p, _ in procs.procs:
                if p.poll() not in (None, 0):
                    lines = read_lines(os.path.join(logs, f"{role}-{task}.log"))
                    raise RuntimeError(f"{role} {task} exited with status {p.returncode}: "
                                       + (lines[-1] if lines else "(no output)"))
            now = time.monotonic()
            if now >= next_sample:
                t = time.time() - t0
                for role, task, p, _ in procs.procs:
                    rss = rss_kib(p.pid) if p.poll() is None else None
                    if rss is not None:
                        rss_rows.append({"time_s": f"{t:.1f}", "role": role, "task": task,
                                         "pid": p.pid, "rss_kib": rss[0],
                                         "rss_anon_kib": rss[1]})
                busy, total = machine_ticks()
                soak = {p.pid: cpu_ticks(p.pid) for _, _, p, _ in procs.procs}
                soak_ticks = sum(v - last_soak.get(pid, 0) for pid, v in soak.items()
                                 if v is not None)
                # Both in clock ticks summed over every core: percentages of the machine.
                elapsed_ticks = max(1, total - last_total)
                load_rows.append({
                    "time_s": f"{t:.1f}",
                    "loadavg_1m": loadavg_1m(),
                    "cpu_busy_pct": f"{100 * (busy - last_busy) / elapsed_ticks:.0f}",
                    "soak_cpu_pct": f"{100 * soak_ticks / elapsed_ticks:.0f}",
                })
                last_busy, last_total = busy, total
                last_soak.update({pid: v for pid, v in soak.items() if v is not None})
                next_sample += args.rss_every
            if now >= next_note:
                print(f"soak: {time.time() - t0:.0f} s", flush=True)
                next_note += 60
            time.sleep(min(0.2, max(0.01, next_sample - time.monotonic())))
    except KeyboardInterrupt as e:
        interrupted = f"interrupted ({e or 'SIGINT'})"
    except RuntimeError as e:
        interrupted = str(e)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C does not stop the cleanup
        procs.end_all()
        for name in os.listdir(args.out):
            if name.endswith(".sock"):  # ipc sockets the servers left
                os.remove(os.path.join(args.out, name))
    wall_s = time.time() - t0

    write_csv(os.path.join(args.out, "rss.csv"), rss_rows,
              ["time_s", "role", "task", "pid", "rss_kib", "rss_anon_kib"])
    write_csv(os.path.join(args.out, "load.csv"), load_rows,
              ["time_s", "loadavg_1m", "cpu_busy_pct", "soak_cpu_pct"])
    return summarize(args, procs, rss_rows, load_rows, t0, wall_s, started_utc, interrupted)


def summarize(args, procs, rss_rows, load_rows, t0, wall_s, started_utc, interrupted):
    failures = []
    if interrupted:
        failures.append(interrupted)
    workers, shards, wire_bytes = {}, {}, {}
    done, exact, stopped, mismatches = {}, set(), {}, []
    n_params = None
    for role, task, p, _ in procs.procs:
        path = os.path.join(args.out, "logs", f"{role}-{task}.log")
        lines = read_lines(path)
        if p.returncode != 0 and not interrupted:  # else: ended by this script
            tail = lines[-1] if lines else ""
            failures.append(f"{role} {task} exited with status {p.returncode}: {tail}")
        for line in lines:
            if "MISMATCH" in line:
                mismatches.append(line)
            if m := WORKER_PROGRESS.match(line):
                workers.setdefault(task, []).append((float(m[2]), int(m[3])))
            elif m := WORKER_DONE.match(line):
                done[task] = (int(m[2]), float(m[3]))
            elif WORKER_EXACT.match(line):
                exact.add(task)
            elif m := PS_PROGRESS.match(line):
                shards.setdefault(task, []).append((float(m[2]), int(m[3])))
                wire_bytes[task] = int(m[4])
            elif m := PS_STOPPED.match(line):
                stopped[task] = (int(m[2]), int(m[3]))
            elif m := PS_SERVING.match(line):
                n_params = int(m[1])
    failures += mismatches
    bytes_per_push = 4 * (n_params or args.floats)

    pushed = sum(d[0] for d in done.values())
    # Counts compare only when every worker finished: a stopped run is a failure already.
    complete = not interrupted and len(done) == args.workers
    lost = duplicated = None
    if complete:
        lost = duplicated = 0
        for s in range(args.shards):
            if s not in stopped:
                failures.append(f"ps {s} did not report its pushes applied")
                continue
            applied, errors = stopped[s]
            lost += max(0, pushed - applied)
            duplicated += max(0, applied - pushed)
            if errors:
                failures.append(f"ps {s} sent {errors} error replies")
        for w in range(args.workers):
            if w not in exact:
                failures.append(f"worker {w} did not find the parameters exact")
        if lost or duplicated:
            failures.append(f"{lost} pushes lost, {duplicated} duplicated (workers' total "
                            f"{pushed} against each shard's pushes applied)")
    elif not interrupted:
        failures.append("workers " + ", ".join(str(w) for w in range(args.workers)
                                               if w not in done) + " did not finish their pushes")

    rows = []
    if len(workers) == args.workers and all(len(p) >= 2 for p in workers.values()):
        rows = throughput_rows(workers, shards, args.report_every, t0, bytes_per_push)
    columns = ["t_start_s", "t_end_s", "full", "worker_pushes", "pushes_per_s", "mib_per_s"]
    columns += [f"ps{s}_pushes_applied" for s in range(args.shards)]
    write_csv(os.path.join(args.out, "throughput.csv"), rows, columns)
    full = [float(r["pushes_per_s"]) for r in rows if r["full"]]
    push_seconds = max((d[1] for d in done.values()), default=0)
    mean_rate = pushed / push_seconds if push_seconds else 0
    stalls = sum(1 for r in rows if r["worker_pushes"] == 0)
    if stalls:
        failures.append(f"{stalls} intervals without a push")

    # RSS per process: the first sample; the baseline, the first sample after the warm-up;
    # the end, the last sample before the pushes ended. Later samples (the final check and
    # the exit, when the libraries' exit code faults in more of their file pages) are in
    # rss.csv but not judged.
    push_start = min((p[0][0] for p in workers.values()), default=t0) - t0
    push_end = min((p[-1][0] for p in workers.values()), default=t0 + wall_s) - t0
    rss_table = []
    for role, task, p, _ in procs.procs:
        samples = [(float(r["time_s"]), r["rss_kib"], r["rss_anon_kib"]) for r in rss_rows
                   if r["role"] == role and r["task"] == task]
        if not samples:
            failures.append(f"no RSS sample of {role} {task}")
            continue
        row = {"role": role, "task": task, "pid": p.pid, "first": samples[0][1]}
        rss_table.append(row)
        judged = [s for s in samples if push_start + args.warmup <= s[0] <= push_end]
        if len(judged) < 2:
            if complete:
                failures.append(f"{role} {task}: fewer than 2 RSS samples between the warm-up "
                                "and the end of the pushes")
            continue
        base, end = judged[0], judged[-1]
        row.update(base=base[1], end=end[1], peak=max(s[1] for s in judged),
                   growth=end[1] - base[1], anon_growth=end[2] - base[2],
                   bound=RSS_GROWTH_FRACTION * base[1] + RSS_GROWTH_KIB)
        row["ok"] = row["growth"] <= row["bound"]
        if not row["ok"]:
            failures.append(f"{role} {task}: RSS grew {mib(row['growth'])} MiB after the "
                            f"warm-up, more than the bound {mib(row['bound'])} MiB")

    verdict = "FAIL" if failures else "PASS"
    args.wire_bytes = sum(wire_bytes.values())  # all request frames the shards received
    write_summary(args, verdict, failures, pushed, done, stopped, lost, duplicated, rows, full,
                  mean_rate, push_seconds, bytes_per_push, n_params, rss_table, load_rows,
                  wall_s, started_utc)
    counted = (f"{lost} lost, {duplicated} duplicated" if complete
               else "lost and duplicated not counted")
    print(f"soak: {verdict}: {pushed} pushes, {mean_rate:.0f}/s mean, {counted}; "
          f"{os.path.join(args.out, 'README.md')}")
    for f in failures:
        print(f"soak: {f}")
    return 0 if verdict == "PASS" else 1


def git_describe():
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return commit + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_summary(args, verdict, failures, pushed, done, stopped, lost, duplicated, rows, full,
                  mean_rate, push_seconds, bytes_per_push, n_params, rss_table, load_rows,
                  wall_s, started_utc):
    def pct(column):
        values = [float(r[column]) for r in load_rows[1:]]  # the first covers no interval
        return (f"{sum(values) / len(values):.0f} % mean, {max(values):.0f} % max"
                if values else "n/a")

    loads = [float(r["loadavg_1m"]) for r in load_rows]
    cmd = ("benchmarks/soak.py " + " ".join(sys.argv[1:])).strip()
    out = []
    out.append(f"# Soak: {args.workers} workers, {args.shards} shards, {args.transport}, "
               f"{args.seconds:g} s — {verdict}\n")
    out.append(f"- command: `{cmd}`")
    out.append(f"- started: {started_utc.strftime('%Y-%m-%d %H:%M:%S')} UTC; wall time "
               f"{wall_s:.0f} s")
    out.append(f"- asgd: git {git_describe()}; machine: {cpu_model()}, "
               f"{os.cpu_count()} hardware threads")
    out.append(f"- payload: {n_params or args.floats} float32 per push "
               f"({bytes_per_push / 1024:.0f} KiB), split evenly over the shards; 4 pushes in "
               f"flight per worker; transport {args.transport}"
               + (" on 127.0.0.1" if args.transport == "tcp" else ""))
    out.append(f"- load while it ran: all cores busy {pct('cpu_busy_pct')}; the soak's own "
               f"processes {pct('soak_cpu_pct')}; 1-min load average "
               + (f"{min(loads):.1f}–{max(loads):.1f}" if loads else "n/a")
               + " (load.csv: the difference is other jobs on the machine)")
    out.append("")
    out.append("## Verdict\n")
    out.append(f"**{verdict}**" + (": every bound below holds." if not failures else ":"))
    for f in failures:
        out.append(f"- {f}")
    out.append("")
    out.append("## Updates\n")
    out.append(f"- pushes made by the workers: **{pushed}** in {push_seconds:.1f} s")
    for s in sorted(stopped):
        out.append(f"- pushes applied by shard {s}: {stopped[s][0]} "
                   f"({stopped[s][1]} error replies)")
    if lost is None:
        out.append("- lost, duplicated: not counted, the run did not complete")
    else:
        out.append(f"- lost: **{lost}**, duplicated: **{duplicated}** (bound: 0 and 0). Each "
                   "shard applies one piece of every push, so each shard's count must equal "
                   "the workers' total; each worker also read back, exactly, every shard's "
                   "count of its own pushes and found all parameters equal to the initial "
                   "values plus every push")
    out.append("")
    out.append("| worker | pushes | seconds | pushes/s |")
    out.append("| --- | --- | --- | --- |")
    for w in sorted(done):
        n, s = done[w]
        out.append(f"| {w} | {n} | {s:.1f} | {n / s:.0f} |" if s else f"| {w} | {n} | {s} | |")
    out.append("")
    out.append("## Throughput\n")
    wire = args.wire_bytes / push_seconds / 2**20 if push_seconds else 0
    out.append(f"- mean: **{mean_rate:.0f} pushes/s**, {mean_rate * bytes_per_push / 2**20:.1f} "
               f"MiB/s of payload ({mean_rate * args.shards:.0f} requests/s over the shards; "
               f"{wire:.1f} MiB/s received by the shards, headers, pulls and barriers "
               "included)")
    if full:
        out.append(f"- over the {len(full)} full {args.report_every:g}-s intervals: mean "
                   f"{sum(full) / len(full):.0f}, min **{min(full):.0f}**, max {max(full):.0f} "
                   f"pushes/s (throughput.csv)")
    out.append("")
    out.append("## Resident memory (VmRSS)\n")
    out.append(f"Bound: growth from the first sample {args.warmup:g} s after the pushes "
               f"started to the last sample before they ended ≤ {RSS_GROWTH_FRACTION:.0%} of "
               f"that baseline + {RSS_GROWTH_KIB // 1024} MiB, per process "
               "(results/soak/README.md explains the bound). `first` is the first sample, as "
               "the process starts; `anon growth` the part of the growth in anonymous memory "
               "(RssAnon: the heap, where a leak would show).\n")
    out.append("| role | task | pid | first MiB | after warm-up MiB | end MiB | peak MiB | "
               "growth MiB | bound MiB | anon growth MiB | |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rss_table:
        head = f"| {r['role']} | {r['task']} | {r['pid']} | {mib(r['first'])} |"
        if "base" not in r:
            out.append(head + " | | | | | | FAIL |")
        else:
            out.append(head + f" {mib(r['base'])} | {mib(r['end'])} | {mib(r['peak'])} | "
                       f"{r['growth'] / 1024:+.1f} | {mib(r['bound'])} | "
                       f"{r['anon_growth'] / 1024:+.1f} | {'ok' if r['ok'] else 'FAIL'} |")
    out.append("")
    out.append("## Files\n")
    out.append("`throughput.csv` (pushes per interval, both sides), `rss.csv` (every "
               f"{args.rss_every:g} s), `load.csv`, `soak.ini` (the config), `logs/` (each "
               "process's output). Columns: results/soak/README.md.")
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    sys.exit(main())
