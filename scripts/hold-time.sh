#!/bin/bash
# How long `probecost trace -p` holds a running program while its probes go in (issue 16 §1):
# gap_target times its own loop (gap_fn in the executable, malloc, free, write); each run
# measures its largest gap untraced for a second, then attaches with the four probes for
# 0.5 s, and prints held_s and the largest gap of that second. A benchmark, not a test.
#   scripts/hold-time.sh [BUILD_DIR] [RUNS] [extra trace options...]
set -euo pipefail
build=${1:-build}; runs=${2:-5}; shift $(( $# < 2 ? $# : 2 ))
out=$(mktemp /tmp/probecost-hold-XXXXXX.json)
trap 'rm -f "$out"' EXIT
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= runs; i++)); do
  coproc T { "$build/bin/gap_target"; }
  read -r line <&"${T[0]}"
  pid=${line#ready }
  sleep 1; echo gap >&"${T[1]}"; read -r untraced <&"${T[0]}"
  "$build/bin/probecost" trace -q -p "$pid" -b gap_fn -b libc.so.6:malloc -b libc.so.6:free \
    -b libc.so.6:write --duration 0.5 -f json -o "$out" "$@"
  echo gap >&"${T[1]}"; read -r traced <&"${T[0]}"
  echo exit >&"${T[1]}"; read -r _ <&"${T[0]}"
  wait "$T_PID" 2>/dev/null || true
  held=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(f\"{r['held_s']*1e3:.1f}\")" "$out")
  echo "run $i: held ${held} ms; largest gap untraced ${untraced%% *}, the second with the attach ${traced%% *}"
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
