#!/usr/bin/env python3
"""Cost per enabled USDT event: probecost (jump, int3) beside bpftrace's usdt: (a kernel uprobe),
in one run, on the same marker of the same process.

  scripts/usdt-vs-bpftrace.py [-b BUILD_DIR] [-n EVENTS] [-r REPEAT]

tests/targets/usdt_target.cpp times N markers itself (`usdt_target_pie bench N`,
probecost_test:tick with its semaphore): untraced (its semaphore down, the arguments not
computed), then launched by each tracer in turn, the modes alternating run by run so that a
change of load falls on all. The traced cost includes the marker's argument code, which runs
only while the semaphore is raised. Cost
per event = (traced - untraced) / N, median over the runs; every count is checked against N.
Needs root and bpftrace. Prints the load before and after; exits 1 when a count is inexact.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SPEC = "probecost_test:tick"


def bench_ns(out, n):
    line = next(l for l in out.splitlines() if l.startswith("bench="))  # "bench=N ns=T"
    return int(line.split("ns=")[1])


def run_untraced(path, n):
    out = subprocess.run([path, "bench", str(n)], capture_output=True, text=True, check=True).stdout
    return bench_ns(out, n), n, {"none"}


def run_probecost(probecost, path, n, via):
    with tempfile.NamedTemporaryFile(suffix=".json") as rep:
        out = subprocess.run([probecost, "trace", "-q", "-b", "usdt:" + SPEC, "--via", via, "-f",
                              "json", "-o", rep.name, "--", path, "bench", str(n)],
                             capture_output=True, text=True, check=True).stdout
        report = json.load(open(rep.name))
    hits = sum(p["hits"] for p in report["probes"])
    return bench_ns(out, n), hits, {p["via"] for p in report["probes"] if p["hits"]}


def run_bpftrace(path, n):
    # -c: bpftrace starts the program stopped, attaches (the kernel raises the semaphore), and
    # lets it run. (-p on a running usdt_target counted 0 with bpftrace 0.17 here.)
    out = subprocess.run(["bpftrace", "-e", f"usdt:{path}:{SPEC} {{ @n = count(); }}", "-c",
                          f"{path} bench {n}"], capture_output=True, text=True, check=True).stdout
    hits = int(next((l.split()[1] for l in out.splitlines() if l.startswith("@n:")), 0))
    return bench_ns(out, n), hits, {"uprobe"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-b", "--build", default="build")
    ap.add_argument("-n", "--events", type=int, default=200000)
    ap.add_argument("-r", "--repeat", type=int, default=5)
    a = ap.parse_args()
    probecost = os.path.join(a.build, "bin", "probecost")
    path = os.path.realpath(os.path.join(a.build, "bin", "usdt_target_pie"))
    load = lambda: " ".join(open("/proc/loadavg").read().split()[:3])
    print(f"load: {load()} (1, 5, 15 min), {os.cpu_count()} CPUs; {a.events} events x {a.repeat} runs")
    modes = {"untraced": [], "probecost jump": [], "probecost int3": [], "bpftrace usdt": []}
    exact = True
    runs = (("untraced", lambda: run_untraced(path, a.events)),
            ("probecost jump", lambda: run_probecost(probecost, path, a.events, "jump")),
            ("probecost int3", lambda: run_probecost(probecost, path, a.events, "int3")),
            ("bpftrace usdt", lambda: run_bpftrace(path, a.events)))
    for _ in range(a.repeat):
        for mode, run in runs:
            ns, hits, how = run()
            if hits != a.events:
                exact = False
                print(f"  {mode}: {hits} hits of {a.events} ({how})", file=sys.stderr)
            modes[mode].append(ns)
    base = statistics.median(modes["untraced"]) / a.events
    print(f"{'mode':16} {'ns/event':>10} {'cost ns/event':>14} {'min cost':>9} {'max cost':>9}")
    for mode, runs in modes.items():
        per = [r / a.events for r in runs]
        costs = [p - base for p in per]
        print(f"{mode:16} {statistics.median(per):10.1f} {statistics.median(costs):14.1f} "
              f"{min(costs):9.1f} {max(costs):9.1f}")
    print(f"counts: {'exact' if exact else 'WRONG'}; load: {load()}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
