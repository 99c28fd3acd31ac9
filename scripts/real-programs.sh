#!/usr/bin/env bash
# Probes in programs nobody here wrote, counted three ways and timed against the untraced run:
# the kernel's uprobe (bpftrace), probecost --via int3 and probecost --via jump.
#
#   scripts/real-programs.sh [RUNS]        (default 3; needs root, bpftrace and a build)
#
# For each workload: the untraced wall time (median of RUNS), then for each way of probing the
# hit count and the wall time (median), the slowdown and the cost per hit
# ((traced - untraced) / hits). bpftrace's own start-up (an empty probe on a program that exits
# at once) is taken off its time. Counts must agree exactly.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
pc=build/bin/probecost
libc=$(ldconfig -p | awk '/libc.so.6 .*x86-64/ {print $NF; exit}')
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
command -v bpftrace >/dev/null || { echo "bpftrace is needed (apt-get install bpftrace)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# A python3 workload with a fixed amount of allocation (hash seed fixed: same calls every run).
cat >"$tmp/alloc.py" <<'EOF'
import sys
n = int(sys.argv[1])
total = 0
for i in range(n):
    xs = [str(j) for j in range(100)]
    total += len(xs)
print(total)
EOF
py=$(command -v python3)
[ -x /usr/bin/python3 ] && py=/usr/bin/python3

export PYTHONHASHSEED=0
# bpftrace -c wants a program path that names one binary.
workloads=(
  "find|readdir64|$(command -v find) /usr/lib /usr/share -xdev"
  "python3|malloc|$py $tmp/alloc.py 20000"
  "sort|strcoll|$(command -v sort) $tmp/words"
)
# Input for sort: 20,000 lines (sort compares them with strcoll in a UTF-8 locale; about
# 290,000 calls, which int3 makes a run of ~15 s).
seq 20000 | sed 's/^/w/' | shuf --random-source=<(yes) >"$tmp/words"
export LC_ALL=C.UTF-8

time_untraced() {
  for _ in $(seq "$runs"); do
    local t0; t0=$(now); bash -c "$1" >/dev/null 2>&1; echo "$(now) - $t0" | bc
  done | median
}

# bpftrace: count the uprobe in the command's process (cpid; a uprobe on a library path fires in
# every process that maps it); prints "hits seconds"
time_bpftrace() {
  local fn=$1 cmd=$2 empty prog="uprobe:$libc:$fn /pid == cpid/ { @n = count(); }"
  empty=$(for _ in $(seq "$runs"); do
    t0=$(now); bpftrace -q -e "$prog" -c /usr/bin/true >/dev/null 2>&1
    echo "$(now) - $t0" | bc; done | median)
  for _ in $(seq "$runs"); do
    t0=$(now)
    n=$(bpftrace -q -f json -e "$prog" -c "$cmd" 2>/dev/null |
      sed -n 's/.*"@n": \([0-9]*\).*/\1/p' | tail -1)
    echo "$n $(echo "$(now) - $t0 - $empty" | bc)"
  done | sort -k2 -g | awk -v r="$runs" 'NR == int((r+1)/2)'
}

# probecost trace --via VIA; prints "hits seconds how". The time is the whole command's wall
# time less probecost's own start-up (the same trace of /usr/bin/true), as for bpftrace.
time_probecost() {
  local via=$1 fn=$2 cmd=$3 empty
  empty=$(for _ in $(seq "$runs"); do
    t0=$(now); $pc trace -q --via "$via" -b "libc.so.6:$fn" -o /dev/null -- /usr/bin/true >/dev/null 2>&1
    echo "$(now) - $t0" | bc; done | median)
  for _ in $(seq "$runs"); do
    t0=$(now)
    # shellcheck disable=SC2086
    $pc trace -q --via "$via" -b "libc.so.6:$fn" -f json -o "$tmp/r.json" -- $cmd >/dev/null 2>&1 || true
    t=$(echo "$(now) - $t0 - $empty" | bc)
    n=$(sed -n 's/^  "hits": \([0-9]*\),/\1/p' "$tmp/r.json" | head -1)
    how=$(sed -n 's/.*"step_over": "\(.*\)",/\1/p' "$tmp/r.json" | head -1)
    echo "$n $t $how"
  done | sort -k2 -g | awk -v r="$runs" 'NR == int((r+1)/2)'
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(uname -r), $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-8s %-10s %-16s %12s %9s %9s %12s  %s\n' workload probe how hits wall_s slowdown ns/hit note
for w in "${workloads[@]}"; do
  IFS='|' read -r name fn cmd <<<"$w"
  bash -c "$cmd" >/dev/null 2>&1  # warm the caches
  base=$(time_untraced "$cmd")
  printf '%-8s %-10s %-16s %12s %9.3f %9s %12s\n' "$name" "$fn" untraced - "$base" 1.00 -
  read -r n t <<<"$(time_bpftrace "$fn" "$cmd")"
  printf '%-8s %-10s %-16s %12s %9.3f %9.2f %12.0f  %s\n' "$name" "$fn" "uprobe(bpftrace)" "$n" "$t" \
    "$(echo "$t / $base" | bc -l)" "$(echo "($t - $base) * 1000000000 / $n" | bc -l)" "start-up taken off"
  for via in int3 jump; do
    read -r n t how <<<"$(time_probecost "$via" "$fn" "$cmd")"
    printf '%-8s %-10s %-16s %12s %9.3f %9.2f %12.0f  %s\n' "$name" "$fn" "probecost $via" "$n" "$t" \
      "$(echo "$t / $base" | bc -l)" "$(echo "($t - $base) * 1000000000 / $n" | bc -l)" "$how"
  done
done

# A running python3, attached by PID: rounds of a fixed allocation loop ("go" on its stdin,
# "done" on stdout). One round is counted by bpftrace, the next ones by probecost --via jump
# and --via int3, each attached before its round and detached after it: never two at once on
# one function (a uprobe's int3 and a jump over the same bytes would meet).
cat >"$tmp/rounds.py" <<'EOF'
import sys
for line in sys.stdin:
    for i in range(100000):
        b = bytearray(2048)
    print("done", flush=True)
EOF
mkfifo "$tmp/in" "$tmp/out"
$py "$tmp/rounds.py" <"$tmp/in" >"$tmp/out" &
ppid=$!
exec 7>"$tmp/in" 8<"$tmp/out"
round() { echo go >&7; read -r _ <&8; }
timed_round() { local t0; t0=$(now); round; echo "$(now) - $t0" | bc; }
round # warm up
base=$(timed_round)
bpftrace -f json -e "uprobe:$libc:malloc /pid == $ppid/ { @n = count(); }" >"$tmp/bt.json" 2>&1 &
btpid=$!
# bpftrace says when its probes are in: {"type": "attached_probes", ...}.
until grep -q attached_probes "$tmp/bt.json"; do sleep 0.05; done
t=$(timed_round)
kill -INT "$btpid"
wait "$btpid" || true
bt=$(sed -n 's/.*"@n": \([0-9]*\).*/\1/p' "$tmp/bt.json" | tail -1)
printf '%-8s %-10s %-16s %12s %9.3f %9.2f\n' python-p malloc untraced - "$base" 1.00
printf '%-8s %-10s %-16s %12s %9.3f %9.2f %12.0f\n' python-p malloc "uprobe(bpftrace)" "$bt" "$t" \
  "$(echo "$t / $base" | bc -l)" "$(echo "($t - $base) * 1000000000 / $bt" | bc -l)"
for via in jump int3; do
  $pc trace -p "$ppid" --via "$via" -b libc.so.6:malloc -f json -o "$tmp/p.json" 2>"$tmp/p.err" &
  tpid=$!
  until grep -q "tracing process" "$tmp/p.err"; do sleep 0.05; done
  t=$(timed_round)
  kill -INT "$tpid"
  wait "$tpid" || true
  n=$(sed -n 's/^  "hits": \([0-9]*\),/\1/p' "$tmp/p.json" | head -1)
  printf '%-8s %-10s %-16s %12s %9.3f %9.2f %12.0f\n' python-p malloc "probecost $via" "$n" "$t" \
    "$(echo "$t / $base" | bc -l)" "$(echo "($t - $base) * 1000000000 / $n" | bc -l)"
done
exec 7>&-
wait "$ppid" || true
