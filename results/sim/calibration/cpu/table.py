#!/usr/bin/env python3
"""The CPU per step of the loopback calibration's real runs against what the simulator
charges (run.sh says how they were run). Per worker count, averaged over the repetitions:
  real samples/s     the one-epoch run's summary.csv
  sim samples/s      the simulated run's (measured compute, loopback preset)
  CPU/step           (CPU of the one-epoch run - CPU of the 200-step run) / (their steps'
                     difference): every process of the run, user + system
  wall/step          the same for the training time (summary.csv wall_time_s: from the
                     workers' start to their end, without the processes' start-up)
  cores busy         CPU/step / wall/step: how many of the host's cores the run kept busy
  gradient/step      the simulated run's compute_time_s / steps (the gradient's CPU time:
                     all the simulator charges to a core)
  rest/step          CPU/step - gradient/step: the transport (ZeroMQ, the kernel's tcp,
                     copies, the shard's check and add, the client's bookkeeping)
  ns/byte            rest/step over the payload bytes a step moves (a push and its reply)
  CPU-bound samples/s  batch x 2 / CPU/step: what 2 free cores would allow at this CPU
                     per step
Then the transport charge's constants (fit.csv): per message, from the repository's
transport benchmark (results/bench/transport.csv: the tcp push of 64 bytes with 8 in
flight, CPU-bound on the two cores, so 2 x its time per round trip over its 4 message
ends); per byte, from the 2-worker runs alone: a step's rest is 4 message ends (the
push-pull's request and reply, each sent and received) of B bytes each, so
ns/byte = (rest/4 - per message) / B. The 4-worker runs are not used: they are the
prediction. Last, the simulated runs of model.sh (the charge on sim.cores = 2) against
the real ones.
Writes cpu.csv and fit.csv next to this file and prints the tables as markdown.
Usage: python3 table.py [FOLDER]"""
import csv
import glob
import os
import re
import statistics
import sys
from collections import defaultdict

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
BATCH = 32
TRANSPORT_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench",
                             "transport.csv")
PER_MESSAGE_BENCH = "BM_Push/tcp/64B/inflight:8/shards:1/clients:1"


def summary(name):
    runs = glob.glob(os.path.join(folder, "runs", f"*-{name}-s1"))
    if not runs:
        return None, None
    run = sorted(runs)[-1]
    with open(os.path.join(run, "summary.csv"), newline="") as f:
        s = next(csv.DictReader(f))
    with open(os.path.join(run, "workers.csv"), newline="") as f:
        w = list(csv.DictReader(f))
    return s, w


times = {}
loads = defaultdict(list)
with open(os.path.join(folder, "time.csv"), newline="") as f:
    for r in csv.DictReader(f):
        times[r["name"]] = (float(r["wall_s"]), float(r["user_s"]) + float(r["sys_s"]))
        loads[int(r["workers"])].append(float(r["load1"]))

per_w = defaultdict(lambda: defaultdict(list))
for name in times:
    m = re.match(r"real_epoch_w(\d+)_r(\d+)$", name)
    if not m:
        continue
    w, rep = int(m.group(1)), m.group(2)
    short = f"real_steps200_w{w}_r{rep}"
    if short not in times:
        continue
    (_, cl), (_, cs) = times[name], times[short]
    sl, _ = summary(name)
    ss, _ = summary(short)
    sim, sim_workers = summary(f"sim_w{w}_r{rep}")
    if sl is None or ss is None or sim is None:
        continue
    steps = int(sl["steps"]) - int(ss["steps"])
    d = per_w[w]
    d["real"].append(float(sl["samples_per_s"]))
    d["sim"].append(float(sim["samples_per_s"]))
    d["cpu"].append((cl - cs) / steps)
    d["wall"].append((float(sl["wall_time_s"]) - float(ss["wall_time_s"])) / steps)
    grad = sum(float(r["compute_time_s"]) for r in sim_workers) / int(sim["steps"])
    d["grad"].append(grad)
    d["bytes"].append((int(sl["bytes_pushed"]) + int(sl["bytes_pulled"])) / int(sl["steps"]))
    d["staleness"].append(float(sl["staleness_mean"]))

cols = ["workers", "reps", "load1", "real_samples_per_s", "sim_samples_per_s", "cpu_ms_per_step",
        "wall_ms_per_step", "cores_busy", "gradient_ms_per_step", "rest_ms_per_step",
        "rest_ns_per_byte", "cpu_bound_samples_per_s_2_cores"]
rows = []
for w in sorted(per_w):
    d = {k: statistics.mean(v) for k, v in per_w[w].items()}
    rest = d["cpu"] - d["grad"]
    busy = d["cpu"] / d["wall"]
    rows.append({"workers": w, "reps": len(per_w[w]["real"]),
                 "load1": f"{statistics.mean(loads[w]):.1f}",
                 "real_samples_per_s": f"{d['real']:.0f}", "sim_samples_per_s": f"{d['sim']:.0f}",
                 "cpu_ms_per_step": f"{1e3 * d['cpu']:.3f}",
                 "wall_ms_per_step": f"{1e3 * d['wall']:.3f}", "cores_busy": f"{busy:.2f}",
                 "gradient_ms_per_step": f"{1e3 * d['grad']:.3f}",
                 "rest_ms_per_step": f"{1e3 * rest:.3f}",
                 "rest_ns_per_byte": f"{1e9 * rest / d['bytes']:.3f}",
                 "cpu_bound_samples_per_s_2_cores": f"{BATCH * 2 / d['cpu']:.0f}"})
with open(os.path.join(folder, "cpu.csv"), "w", newline="") as f:
    wr = csv.DictWriter(f, fieldnames=cols)
    wr.writeheader()
    wr.writerows(rows)
print("| workers | runs | load | real samples/s | sim samples/s | CPU ms/step | wall ms/step | "
      "cores busy | gradient ms/step | rest ms/step | rest ns/byte | CPU-bound samples/s "
      "(2 cores) |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    print(f"| {r['workers']} | {r['reps']} | {r['load1']} | {r['real_samples_per_s']} | "
          f"{r['sim_samples_per_s']} | {r['cpu_ms_per_step']} | {r['wall_ms_per_step']} | "
          f"{r['cores_busy']} | {r['gradient_ms_per_step']} | {r['rest_ms_per_step']} | "
          f"{r['rest_ns_per_byte']} | {r['cpu_bound_samples_per_s_2_cores']} |")

# The charge's constants (the docstring): per message from the transport benchmark, per
# byte from the 2-worker runs.
per_message_us = None
with open(TRANSPORT_CSV, newline="") as f:
    for r in csv.DictReader(f):
        if r["name"].startswith(PER_MESSAGE_BENCH) and r["name"].endswith("_median"):
            per_message_us = 2 * float(r["real_time"]) / 4  # us: 2 cores, 4 message ends
fit = None
if per_message_us is not None and 2 in per_w:
    d = {k: statistics.mean(v) for k, v in per_w[2].items()}
    message_bytes = d["bytes"] / 2
    per_end_s = (d["cpu"] - d["grad"]) / 4
    ns_per_byte = (per_end_s * 1e9 - per_message_us * 1e3) / message_bytes
    fit = {"per_message_us": f"{per_message_us:.1f}", "ns_per_byte": f"{ns_per_byte:.3f}",
           "message_bytes": f"{message_bytes:.0f}", "per_message_from": PER_MESSAGE_BENCH,
           "ns_per_byte_from": "2-worker runs: (rest/step / 4 - per message) / message bytes"}
    with open(os.path.join(folder, "fit.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(fit))
        wr.writeheader()
        wr.writerow(fit)
    print()
    print(f"charge: {fit['per_message_us']} us per message + {fit['ns_per_byte']} ns per byte at "
          f"each end ({1e3 * per_end_s:.3f} ms per end of a {message_bytes:.0f}-byte message)")

# The simulated runs of model.sh: the charge on sim.cores = 2, per network preset.
models = defaultdict(lambda: defaultdict(list))
for run in sorted(glob.glob(os.path.join(folder, "runs", "*-charge_w*"))):
    m = re.search(r"charge_w(\d+)_([a-z0-9]+)-s1$", run)
    if not m or not os.path.exists(os.path.join(run, "summary.csv")):
        continue
    with open(os.path.join(run, "summary.csv"), newline="") as f:
        s = next(csv.DictReader(f))
    key = (int(m.group(1)), m.group(2))
    models[key]["sim"].append(float(s["samples_per_s"]))
    models[key]["staleness"].append(float(s["staleness_mean"]))
if models:
    print()
    print("| workers | network | runs | real samples/s | sim samples/s (no charge) | gap | "
          "sim samples/s (charge) | gap | real staleness mean | sim staleness mean |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (w, net), v in sorted(models.items()):
        real = statistics.mean(per_w[w]["real"]) if w in per_w else float("nan")
        plain = statistics.mean(per_w[w]["sim"]) if w in per_w and net == "loopback" else None
        sim = statistics.mean(v["sim"])
        plain_cells = (f"{plain:.0f} | {100 * (plain / real - 1):+.1f} %" if plain is not None
                       else "– | –")
        print(f"| {w} | {net} | {len(v['sim'])} | {real:.0f} | {plain_cells} | {sim:.0f} | "
              f"{100 * (sim / real - 1):+.1f} % | "
              f"{statistics.mean(per_w[w]['staleness']):.3f} | {statistics.mean(v['staleness']):.3f} |")
