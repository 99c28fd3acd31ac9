#!/bin/bash
# Issue 26: what a stack costs per hit, in the program and in probecost.
#
#   scripts/stacks-cost.sh [BUILD_DIR] [RUNS]        (default build-release, 5 runs)
#
# 1. probecost-stack-bench: in-process, the copy alone (trace's counting jump probe, then a
#    snapshot of 1, 4, 8, 16 KiB, each copy whole) in the program's thread CPU per call, and
#    SnapshotUnwinder's CPU per stack in the reader once the modules' CFI is parsed.
# 2. End to end, stacks-cost/hits.c (hit() under 8 frames, -O2, no frame pointers) under
#    `probecost trace -b hit`: untraced, a counting jump probe, --stacks at 1/4/8 KiB, int3
#    stacks (--stack-size 0: the thread stopped and unwound over ptrace), and bpftrace's ustack
#    on a uprobe; hits back to back (GAP 0) and ~GAP multiply-adds of the program's own work
#    apart. The added ns and TSC ticks per hit (median of RUNS runs less the untraced median,
#    min and max beside), and what trace says of its snapshots (unwound, lost, reader's ns).
# 3. `probecost record -b hit` of the same calls, without and with --stacks at 1/4/8 KiB
#    (lossless: a writer that finds the snapshots' ring full waits for the unwinder), the trace
#    to /dev/null: the added ns per call, and record's lines on the drain's bytes per record and
#    the entries' stacks (the reader's CPU per stack).
# Prints figures; asserts nothing.
set -eu
build=${1:-build-release}
runs=${2:-5}
pc=$build/bin/probecost
bench=$build/bin/probecost-stack-bench
here=$(dirname "$0")
[[ -x $pc && -x $bench ]] || { echo "usage: $0 [BUILD_DIR] [RUNS] (no $pc or $bench)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) CPUs, $(uname -r), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
load() { echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"; }
cc -O2 -o "$tmp/hits" "$here/stacks-cost/hits.c"

echo "== 1. in-process (probecost-stack-bench)"; load
"$bench"

# One configuration, RUNS times: "median min max ticks" of the ns per iteration, into $tmp/fig;
# the last run's output in $tmp/out.
measure() {
  local name=$1; shift
  : >"$tmp/ns"; : >"$tmp/ticks"
  for ((r = 0; r < runs; ++r)); do
    "$@" >"$tmp/out" 2>&1 || { echo "$name: failed:"; tail -5 "$tmp/out"; return 0; }
    sed -n 's/^\([0-9.]*\) ns \([0-9.]*\) ticks per iteration$/\1 \2/p' "$tmp/out" | head -1 |
      { read -r ns ticks; echo "$ns" >>"$tmp/ns"; echo "$ticks" >>"$tmp/ticks"; }
  done
  local med min max tmed
  med=$(sort -g "$tmp/ns" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  min=$(sort -g "$tmp/ns" | head -1); max=$(sort -g "$tmp/ns" | tail -1)
  tmed=$(sort -g "$tmp/ticks" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  awk -v n="$name" -v m="$med" -v lo="$min" -v hi="$max" -v t="$tmed" -v b="${base:-$med}" \
    -v bt="${base_ticks:-$tmed}" \
    'BEGIN {printf "%-26s %10.1f %10.1f %10.1f %10.1f %10.0f\n", n, m, lo, hi, m - b, t - bt}'
  echo "$med $tmed" >"$tmp/fig"
  grep -E "^stacks of jump hits|^ +not copied|^stacks: unwinding|^probecost trace: the stack|^probecost record: (stacks|the drain)" \
    "$tmp/out" | sed 's/^/    /' || true
}

for gap in 0 3000; do
  n=200000; slow=5000
  echo "== 2. end to end: hits $n calls, $gap multiply-adds apart, $runs runs"; load
  printf "%-26s %10s %10s %10s %10s %10s\n" configuration "median ns" min max "added ns" "added tk"
  base=; base_ticks=
  measure untraced "$tmp/hits" "$n" "$gap" 0 256 0
  read -r base base_ticks <"$tmp/fig"
  measure "jump, count" "$pc" trace -b hit -- "$tmp/hits" "$n" "$gap" 8 256 0
  for s in 1024 4096 8192; do
    measure "jump + stacks $s" "$pc" trace --stacks --stack-size "$s" -b hit -- \
      "$tmp/hits" "$n" "$gap" 8 256 0
  done
  # A few thousand hits: each stops the thread (tens of us).
  base=; base_ticks=
  measure "untraced ($slow)" "$tmp/hits" "$slow" "$gap" 8 256 0
  read -r base base_ticks <"$tmp/fig"
  measure "int3 stacks ($slow)" "$pc" trace --stacks --stack-size 0 -b hit -- \
    "$tmp/hits" "$slow" "$gap" 8 256 0
  if command -v bpftrace >/dev/null && [[ $(id -u) = 0 ]]; then
    measure "bpftrace ustack ($slow)" bpftrace -q -e "uprobe:$tmp/hits:hit { @[ustack] = count(); }" \
      -c "$tmp/hits $slow $gap 8 256 0"
    echo "    bpftrace's deepest stack: $(grep -c '^ ' "$tmp/out" || true) frame lines in all"
  fi
done

for gap in 0 3000; do
  n=200000
  echo "== 3. record: hits $n calls, $gap multiply-adds apart, $runs runs"; load
  printf "%-26s %10s %10s %10s %10s %10s\n" configuration "median ns" min max "added ns" "added tk"
  base=; base_ticks=
  measure untraced "$tmp/hits" "$n" "$gap" 8 256 0
  read -r base base_ticks <"$tmp/fig"
  measure "record" "$pc" record -b hit -o /dev/null -- "$tmp/hits" "$n" "$gap" 8 256 0
  for s in 1024 4096 8192; do
    measure "record --stacks $s" "$pc" record --stacks --stack-size "$s" -b hit -o /dev/null \
      -- "$tmp/hits" "$n" "$gap" 8 256 0
  done
done
load
