#!/usr/bin/env bash
# Cross-checks probecost's `uprobe` mechanisms against bpftrace counting the same kernel uprobe
# on the same inferior site, measured the same way: the inferior's own loop time per iteration,
# minus the unprobed site's (the baseline), everything pinned to CPU 0. Runs alternate, so a
# change in the machine's load falls on both.
#
#   scripts/uprobe-vs-bpftrace.sh [-b BUILD_DIR] [-n ITERATIONS] [-r REPEAT]
#
# Needs root, bpftrace (apt-get install bpftrace) and tracefs, which it mounts where missing.
# Prints, per site, both costs per hit, their ratio, and whether both counted every hit; exits 1
# when a count is inexact or the two differ by more than 35%.
set -euo pipefail
build=build
iterations=20000
repeat=5
while getopts "b:n:r:" opt; do
  case $opt in
    b) build=$OPTARG ;;
    n) iterations=$OPTARG ;;
    r) repeat=$OPTARG ;;
    *) exit 2 ;;
  esac
done
probecost=$build/bin/probecost
inferior=$(realpath "$build/bin/probecost-inferior")
command -v bpftrace >/dev/null || { echo "bpftrace is not installed (apt-get install bpftrace)"; exit 2; }
if ! mountpoint -q /sys/kernel/tracing; then
  mount -t tracefs nodev /sys/kernel/tracing
fi

# The inferior's ns per iteration (median thread) from its JSON report on stdin.
ns_per_iter() {
  python3 -c 'import json,sys
for line in sys.stdin:
    if line.startswith("{"):
        d = json.loads(line); print(d["threads"][0]["ns"] / d["iterations"])'
}
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

# site name in the inferior, its symbol, the probecost mechanism, how the kernel handles it
sites=("probe probecost_site_probe uprobe single-stepped"
       "nop5 probecost_site_nop5 uprobe-nop5 nop5-optimised"
       "push probecost_site_push uprobe-push emulated")
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min), $(nproc) CPUs; $iterations hits x $repeat runs"
printf '%-12s %-15s %14s %14s %7s  %s\n' site kernel "probecost ns" "bpftrace ns" ratio hits
status=0
for entry in "${sites[@]}"; do
  read -r site symbol mechanism how <<<"$entry"
  perf=() bpf=() exact=yes
  for ((i = 0; i < repeat; i++)); do
    base=$(taskset -c 0 "$inferior" --site plain --iterations "$iterations" | ns_per_iter)
    json=$("$probecost" compare -m "$mechanism" -n "$iterations" -r 1 -f json)
    perf+=("$(python3 -c 'import json,sys; m=json.load(sys.stdin)["mechanisms"][1]
assert m["hits_exact"], m; print(m["per_hit_ns"]["median"])' <<<"$json")") || exact=no
    out=$(taskset -c 0 bpftrace -e "uprobe:$inferior:$symbol { @n = count(); }" \
      -c "$inferior --site $site --iterations $iterations" 2>/dev/null)
    count=$(grep -Eo '^@n: [0-9]+' <<<"$out" | grep -Eo '[0-9]+$' || echo 0)
    [ "$count" = "$iterations" ] || exact=no
    traced=$(ns_per_iter <<<"$out")
    bpf+=("$(python3 -c "print($traced - $base)")")
  done
  p=$(median "${perf[@]}")
  b=$(median "${bpf[@]}")
  ratio=$(python3 -c "print(f'{$p / $b:.2f}')")
  printf '%-12s %-15s %14.0f %14.0f %7s  %s\n' "$site" "$how" "$p" "$b" "$ratio" \
    "$([ $exact = yes ] && echo exact || echo WRONG)"
  if [ $exact != yes ] || ! python3 -c "import sys; sys.exit(0 if abs($ratio - 1) <= 0.35 else 1)"; then
    status=1
  fi
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
