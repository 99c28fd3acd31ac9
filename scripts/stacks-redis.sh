#!/bin/bash
# Issue 26: redis-server under redis-benchmark, untraced and with `probecost trace -p` on
# lookupKey, with and without --stacks: requests per second of each (the median of RUNS
# benchmark runs), what trace says of its snapshots, and the folded stacks (flame graph input).
#
#   scripts/stacks-redis.sh [BUILD_DIR] [RUNS] [REQUESTS]   (default build-release, 3, 200000)
# Needs redis-server and redis-benchmark (apt-get install redis-server redis-tools); uses port
# 6399. Prints figures; asserts nothing.
set -eu
build=${1:-build-release}
runs=${2:-3}
requests=${3:-200000}
pc=$build/bin/probecost
[[ -x $pc ]] || { echo "usage: $0 [BUILD_DIR] [RUNS] [REQUESTS] (no $pc)" >&2; exit 2; }
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
  { echo "$0: no redis-server or redis-benchmark" >&2; exit 2; }
tmp=$(mktemp -d)
port=6399
redis-server --port "$port" --save '' --appendonly no --daemonize no >"$tmp/redis.log" 2>&1 &
srv=$!
# (Not `kill "${tr:-0}"`: kill 0 signals the whole process group, the caller's shell with it.)
trap 'if [[ -n ${tr:-} ]]; then kill "$tr" 2>/dev/null; fi; kill "$srv" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do
  kill -0 "$srv" 2>/dev/null || { cat "$tmp/redis.log" >&2; exit 1; }
done
redis-benchmark -p "$port" -t set -n 100000 -r 100000 -q >/dev/null  # keys for the GETs
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

# Requests per second of GET, the median of RUNS runs.
rps() {
  for ((r = 0; r < runs; ++r)); do
    redis-benchmark -p "$port" -t get -n "$requests" -r 100000 -q | tr -d '\r' |
      sed -n 's/.*GET: \([0-9.]*\) requests per second.*/\1/p' | tail -1
  done | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

# The benchmark while trace holds the server with `$@`; trace's report into $tmp/trace.out.
traced() {
  "$pc" trace -p "$srv" -b lookupKey "$@" >"$tmp/trace.out" 2>"$tmp/trace.err" &
  tr=$!
  until grep -q "Ctrl-C to stop" "$tmp/trace.err"; do
    kill -0 "$tr" 2>/dev/null || { cat "$tmp/trace.err" >&2; return 1; }
    read -r -t 0.05 <>"$tmp/trace.err" || true  # a bounded wait on nothing
  done
  rps
  kill -INT "$tr"; wait "$tr" || true; tr=
}

untraced=$(rps); echo "untraced:                  $untraced GET/s"
count=$(traced); echo "trace (counting):          $count GET/s"
for size in 4096 8192; do
  st=$(traced --stacks --stack-size "$size" --stack-depth 64 --folded "$tmp/folded.$size")
  echo "trace --stacks --stack-size $size: $st GET/s"
  awk -v u="$untraced" -v t="$st" 'BEGIN {printf "  loss against untraced: %.1f %%\n", 100 * (1 - t / u)}'
  grep -E "^stacks of jump hits|^  (bytes|not copied)|^lookupKey " "$tmp/trace.out" | sed 's/^/  /' || true
done
echo "folded stacks (--stack-size 8192), the 5 most frequent:"
sort -t' ' -k2 -n -r "$tmp/folded.8192" | head -5 | cut -c1-300
if command -v flamegraph.pl >/dev/null; then flamegraph.pl "$tmp/folded.8192" >redis-lookupKey.svg && echo "redis-lookupKey.svg written"; fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
