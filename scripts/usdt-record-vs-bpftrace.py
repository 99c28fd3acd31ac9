#!/usr/bin/env python3
"""`probecost record` of USDT markers beside bpftrace's usdt: on the same workloads, by PID.

  scripts/usdt-record-vs-bpftrace.py [-b BUILD_DIR] [-n CALLS] [-t THROWS] [-r REPEAT]

Each workload waits on stdin after printing "ready"; the tracer attaches by PID, then the
workload runs and exits, which ends the tracer. Counts of the same markers must be equal:
  - python3.11: a loop of CALLS calls of f() in 3 parts, gc.collect() after each; markers
    python:line, function__entry, function__return, gc__start (all four enabled in both
    tools: python:line's semaphore changes which calls fire function__entry). From record's
    Chrome JSON: the calls of f (name f, the file, line 2) must be CALLS, and the calls plus the
    returns without an entry must be function__return's count. Then function__entry and
    function__return alone: 3.11 runs f inline and fires only its return, so no call of f, and
    every such return counted unbalanced.
  - a C++ loop of THROWS throw/catch: libstdcxx:throw and libstdcxx:catch (bpftrace reads them
    through a symlink to libstdc++: its parser refuses "++" in a path).
Needs root, bpftrace, /usr/bin/python3.11 with its markers and g++. Prints the load before and
after; exits 1 when a count differs.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PY = "/usr/bin/python3.11"
LIBSTDCXX = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
BEGIN = 'BEGIN { printf("bpftrace attached\\n"); } '
PY_MARKERS = ["line", "function__entry", "function__return", "gc__start"]

WORK_PY = """import gc, sys
def f(i):
    return i + 1
print('ready', flush=True)
sys.stdin.readline()
for k in range(3):
    s = 0
    for i in range({n} // 3):
        s += f(i)
    gc.collect()
print('done', flush=True)
"""

WORK_CC = r"""#include <cstdio>
#include <stdexcept>
int main(int, char** argv) {
  std::printf("ready\n");
  std::fflush(stdout);
  std::getchar();
  long n = std::atol(argv[1]), caught = 0;
  for (long i = 0; i < n; ++i) {
    try { throw std::runtime_error("x"); } catch (const std::exception&) { ++caught; }
  }
  std::printf("done %ld\n", caught);
}
"""


def load():
    return open("/proc/loadavg").read().split()[:3]


def workload(argv):
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def run_traced(argv, tracer, ready_on_stderr):
    """The workload started, `tracer(pid)` attached, the workload let go; the tracer's output."""
    w = workload(argv)
    t = subprocess.Popen(tracer(w.pid), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = t.stderr if ready_on_stderr else t.stdout
    seen = []
    for line in ready:
        seen.append(line)
        # bpftrace runs BEGIN once every probe is attached ("Attaching N probes" comes before).
        if "tracing process" in line or line.startswith("bpftrace attached"):
            break
    w.stdin.write("go\n")
    w.stdin.flush()
    done = w.stdout.readline().strip()
    w.wait()
    out, err = t.communicate(timeout=600)
    return done, "".join(seen) + out, err


def bpftrace_counts(text):
    counts = {}
    for line in text.splitlines():
        if line.startswith("@") and ":" in line:
            name, value = line.split(":", 1)
            counts[name[1:]] = int(value)
    return counts


def python_run(probecost, script, tmp, n, markers):
    def bpf(pid):
        prog = " ".join(f"usdt:{PY}:python:{m} {{ @{m} = count(); }}" for m in markers)
        return ["bpftrace", "-B", "none", "-p", str(pid), "-e", BEGIN + prog]

    _, out, _ = run_traced([PY, script], bpf, False)
    theirs = bpftrace_counts(out)
    trace, summary = os.path.join(tmp, "py.json"), os.path.join(tmp, "py.sum.json")

    def rec(pid):
        specs = sum((["-b", f"usdt:python:{m}"] for m in markers), [])
        return [probecost, "record", "-p", str(pid), *specs, "-o", trace, "--summary-json", summary]

    _, _, err = run_traced([PY, script], rec, True)
    s = json.load(open(summary))
    ours = {m["marker"].split(":")[1]: m for m in s["markers"]}
    calls = orphans = f_calls = 0
    for e in json.load(open(trace))["traceEvents"]:
        if e.get("cat") != "usdt":
            continue
        calls += e["ph"] == "X"
        orphans += e["ph"] == "i" and "entry" in e["args"]
        a = e.get("args", {})
        f_calls += e["ph"] == "X" and e["name"] == "f" and a.get("file") == script and a.get("line") == 2
    ok = True
    print(f"python3.11, {n} calls of f() by PID (bpftrace -p / probecost record -p):")
    for m in markers:
        mine, theirs_m = ours[m]["hits"], theirs.get(m)
        ok &= mine == theirs_m
        print(f"  python:{m:18} bpftrace {theirs_m:>8}  probecost {mine:>8}  {'=' if mine == theirs_m else 'DIFFERENT'}")
    ret = ours["function__return"]
    print(f"  record's Chrome JSON: {calls} calls (X) + {orphans} returns without an entry (i) = "
          f"{calls + orphans}; function__return hits {ret['hits']}; calls of f named with file "
          f"and line: {f_calls} of {n}")
    ok &= calls + orphans == ret["hits"] and calls == ret["calls"]
    # Without python:line, 3.11 runs f inline and fires no entry for it: no call of f.
    return ok and f_calls == (n if "line" in markers else 0)


def cxx_run(probecost, binary, tmp, n):
    link = os.path.join(tmp, "libstdcxx.so")
    if not os.path.exists(link):
        os.symlink(os.path.realpath(LIBSTDCXX), link)

    def bpf(pid):
        prog = " ".join(f"usdt:{link}:libstdcxx:{m} {{ @{m} = count(); }}" for m in ("throw", "catch"))
        return ["bpftrace", "-B", "none", "-p", str(pid), "-e", BEGIN + prog]

    done, out, _ = run_traced([binary, str(n)], bpf, False)
    theirs = bpftrace_counts(out)
    summary = os.path.join(tmp, "cc.sum.json")

    def rec(pid):
        return [probecost, "record", "-p", str(pid), "-b", "usdt:libstdcxx:throw", "-b",
                "usdt:libstdcxx:catch", "-o", os.path.join(tmp, "cc.json"), "--summary-json", summary]

    done2, _, err = run_traced([binary, str(n)], rec, True)
    ours = {m["marker"].split(":")[1]: m["hits"] for m in json.load(open(summary))["markers"]}
    ok = True
    print(f"C++, {n} throw/catch by PID ({done} / {done2}):")
    for m in ("throw", "catch"):
        ok &= ours.get(m) == theirs.get(m) == n
        print(f"  libstdcxx:{m:6} bpftrace {theirs.get(m):>8}  probecost {ours.get(m):>8}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-b", "--build", default="build")
    ap.add_argument("-n", "--calls", type=int, default=20000)
    ap.add_argument("-t", "--throws", type=int, default=100000)
    ap.add_argument("-r", "--repeat", type=int, default=1)
    a = ap.parse_args()
    probecost = os.path.join(a.build, "bin", "probecost")
    os.makedirs("/sys/kernel/tracing", exist_ok=True)
    if not os.path.exists("/sys/kernel/tracing/events"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)
    print("load before:", *load())
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "w.py")
        open(script, "w").write(WORK_PY.format(n=a.calls))
        src, binary = os.path.join(tmp, "throw.cpp"), os.path.join(tmp, "throw")
        open(src, "w").write(WORK_CC)
        subprocess.run(["g++", "-O2", "-o", binary, src], check=True)
        for _ in range(a.repeat):
            n = a.calls - a.calls % 3
            ok &= python_run(probecost, script, tmp, n, PY_MARKERS)
            ok &= python_run(probecost, script, tmp, n, PY_MARKERS[1:3])
            ok &= cxx_run(probecost, binary, tmp, a.throws)
    print("load after:", *load())
    print("all counts equal" if ok else "COUNTS DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
