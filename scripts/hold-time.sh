#!/bin/bash
# How long `probecost trace -p` holds a running program while its probes go in (issue 16 §1):
# gap_target times its own loop (gap_fn in the executable, malloc, free, write); each run
# measures its largest gap untraced for a second, then attaches with the four probes for
# 0.5 s, and prints held_s (with probecost's own CPU in it, and the phase that took longest),
# and the largest gap of that second; then the median and range of each. A benchmark, not a
# test: on a loaded machine the wall time is the scheduler's as much as probecost's.
#   scripts/hold-time.sh [BUILD_DIR] [RUNS] [extra trace options...]
# THREADS=N: gap_target loops in N threads (1). COMMAND=record: `probecost record -p` instead,
# at malloc, free and write (its held_s and held_phases from --summary-json).
#   for n in 1 4; do THREADS=$n scripts/hold-time.sh build-release 5; done
set -euo pipefail
build=${1:-build}; runs=${2:-5}; shift $(( $# < 2 ? $# : 2 ))
threads=${THREADS:-1}; command=${COMMAND:-trace}
out=$(mktemp /tmp/probecost-hold-XXXXXX.json)
figures=$(mktemp /tmp/probecost-hold-XXXXXX.txt)
trap 'rm -f "$out" "$figures"' EXIT
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); $command, $threads looping thread(s)"
for ((i = 1; i <= runs; i++)); do
  coproc T { "$build/bin/gap_target" "$threads"; }
  read -r line <&"${T[0]}"
  pid=${line#ready }
  sleep 1; echo gap >&"${T[1]}"; read -r untraced <&"${T[0]}"
  if [[ $command == record ]]; then
    "$build/bin/probecost" record -q -p "$pid" -b libc.so.6:malloc -b libc.so.6:free \
      -b libc.so.6:write --duration 0.5 -o "$out.trace.json" --summary-json "$out" "$@" 2>/dev/null
    rm -f "$out.trace.json"
  else
    "$build/bin/probecost" trace -q -p "$pid" -b gap_fn -b libc.so.6:malloc -b libc.so.6:free \
      -b libc.so.6:write --duration 0.5 -f json -o "$out" "$@"
  fi
  echo gap >&"${T[1]}"; read -r traced <&"${T[0]}"
  echo exit >&"${T[1]}"; read -r _ <&"${T[0]}"
  wait "$T_PID" 2>/dev/null || true
  untraced=${untraced%% *}; traced=${traced%% *}
  python3 - "$out" "$i" "${untraced#gap_us=}" "${traced#gap_us=}" "$figures" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
phases = r["held_phases"]
cpu = sum(p["cpu_s"] for p in phases)
top = max(phases, key=lambda p: p["wall_s"])
untraced, traced = int(sys.argv[3]) / 1e3, int(sys.argv[4]) / 1e3
print(f"run {sys.argv[2]}: held {r['held_s']*1e3:.1f} ms (probecost's CPU {cpu*1e3:.1f} ms; "
      f"longest: {top['phase']} {top['wall_s']*1e3:.1f} ms); largest gap untraced "
      f"{untraced:.1f} ms, the second with the attach {traced:.1f} ms")
with open(sys.argv[5], "a") as f:
    f.write(f"{r['held_s']*1e3} {cpu*1e3} {untraced} {traced}\n")
PY
done
python3 - "$figures" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
for k, name in enumerate(["held", "probecost's CPU while held", "largest gap untraced",
                          "largest gap with the attach"]):
    v = [r[k] for r in rows]
    print(f"{name}: median {statistics.median(v):.1f} ms, {min(v):.1f}-{max(v):.1f} ms")
PY
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
