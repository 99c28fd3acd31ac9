#!/bin/bash
# Issue 26: redis-server under redis-benchmark, untraced and with `probecost trace -p` on
# lookupKey, with and without --stacks: requests per second of each (RUNS rounds of one run of
# each configuration), the loss of each traced run against its round's untraced one, what trace
# says of its snapshots, and the folded stacks (flame graph input).
#
#   scripts/stacks-redis.sh [BUILD_DIR] [RUNS] [REQUESTS]   (default build-release, 3, 200000)
# Needs redis-server and redis-benchmark (apt-get install redis-server redis-tools); uses port
# 6399. Prints figures; asserts nothing.
set -eu
build=${1:-build-release}
runs=${2:-3}
requests=${3:-200000}
pc=$build/bin/probecost
here=$(dirname "$0")
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

# Requests per second of GET, one run.
rps() {
  redis-benchmark -p "$port" -t get -n "$requests" -r 100000 -q | tr -d '\r' |
    sed -n 's/.*GET: \([0-9.]*\) requests per second.*/\1/p' | tail -1
}

# One run while trace holds the server with `$@`; trace's report into $tmp/trace.out.
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

# The machine is shared and its load drifts over minutes: the configurations are run in
# rounds (untraced, counting, --stacks 4 KiB, 8 KiB, one run each), and each traced run is
# compared with its round's untraced one.
names=(untraced counting "--stacks 4096" "--stacks 8192")
for ((r = 0; r < runs; ++r)); do
  u=$(rps)
  c=$(traced)
  s4=$(traced --stacks --stack-size 4096 --stack-depth 64 --folded "$tmp/folded.4096")
  cp "$tmp/trace.out" "$tmp/trace.4096"
  s8=$(traced --stacks --stack-size 8192 --stack-depth 64 --folded "$tmp/folded.8192")
  cp "$tmp/trace.out" "$tmp/trace.8192"
  echo "round $((r + 1)): $u $c $s4 $s8 GET/s (load $(cut -d' ' -f1 /proc/loadavg))"
  echo "$u $c $s4 $s8" >>"$tmp/rounds"
done
echo "GET/s, median (min-max) of $runs rounds; loss: the median (min-max) of each round's"
echo "traced run against its untraced one"
for i in 1 2 3 4; do
  awk -v i="$i" -v n="${names[$((i - 1))]}" '
    { v[NR] = $i; l[NR] = 100 * (1 - $i / $1) }
    function med(a, k,   j, t, x, y) { for (x = 1; x <= k; ++x) for (y = x + 1; y <= k; ++y)
        if (a[y] < a[x]) { t = a[x]; a[x] = a[y]; a[y] = t }; return a[int((k + 1) / 2)] }
    END { m = med(v, NR); lo = v[1]; hi = v[NR]; printf "%-16s %9.0f (%.0f-%.0f)", n, m, lo, hi
          if (i > 1) { lm = med(l, NR); printf "   loss %5.1f %% (%.1f to %.1f)", lm, l[1], l[NR] }
          printf "\n" }' "$tmp/rounds"
done
for size in 4096 8192; do
  echo "--stacks --stack-size $size, the last round's trace:"
  grep -E "^stacks of jump hits|^  (bytes|not copied)|^lookupKey " "$tmp/trace.$size" | sed 's/^/  /' || true
done
echo "folded stacks (--stack-size 8192), the 5 most frequent:"
sort -t' ' -k2 -n -r "$tmp/folded.8192" | head -5 | cut -c1-300
# The flame graph: flamegraph.pl where installed, else scripts/flamegraph.py (the same picture).
if command -v flamegraph.pl >/dev/null; then
  flamegraph.pl "$tmp/folded.8192" >redis-lookupKey.svg
else
  "$here/flamegraph.py" "$tmp/folded.8192" "redis-server lookupKey, probecost trace --stacks" \
    >redis-lookupKey.svg
fi && echo "redis-lookupKey.svg written"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
