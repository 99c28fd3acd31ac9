#!/bin/bash
# Issue 24, items 6 and the drain's CPU: what a kept record costs, and where the cost went.
#
#   scripts/record-cost.sh [BUILD_DIR] [CALLS]      (default build-release, 2000000)
#
# 1. The first write to a page of a shared memfd mapping, per address space (record-cost/
#    first-touch.c): populated or not, written before by another process or not.
# 2. The drain's copy of a ring per record (record-cost/drain-copy.c): write(2) from a cold or a
#    warm mapping, copy_file_range, splice, sendfile (per 16-byte record); to ext4 (/var/tmp)
#    and tmpfs (/dev/shm).
# 3. `probecost compare -m jump,record -r 3` with the call buffer only populated
#    (PROBECOST_COLD_RINGS=1, as before) and written through by the program at attach.
# 4. `probecost record -v -p` of calls_target serve, both ways: the hold's phases, the
#    program's minor faults (/proc/PID/stat) after the attach, the drain's CPU per record.
# Prints figures; asserts nothing.
set -eu
build=${1:-build-release}
calls=${2:-2000000}
pc=$build/bin/probecost
target=$build/bin/calls_target
here=$(dirname "$0")
[[ -x $pc && -x $target ]] || { echo "usage: $0 [BUILD_DIR] [CALLS] (no $pc or $target)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'kill "${rec:-0}" "${srv:-0}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
echo "machine: $(nproc) CPUs, $(uname -r), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)," \
  "$(dmesg 2>/dev/null | sed -n 's/.*Hypervisor detected: /hypervisor /p' | head -1)"
load() { echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"; }

cc -O2 -o "$tmp/first-touch" "$here/record-cost/first-touch.c"
cc -O2 -o "$tmp/drain-copy" "$here/record-cost/drain-copy.c"
echo "== 1. first write per page (thread CPU clock)"; load
"$tmp/first-touch" 32
echo "== 2. the drain's copy, 4 laps of a 16 MiB ring"; load
"$tmp/drain-copy" /var/tmp 4
"$tmp/drain-copy" /dev/shm 4

echo "== 3. compare"; load
echo "-- the call buffer populated only (PROBECOST_COLD_RINGS=1):"
PROBECOST_COLD_RINGS=1 "$pc" compare -m jump,record -r 3 | grep -E '^(mechanism|jump|record) '
load
echo "-- written through by the program at attach (the default):"
"$pc" compare -m jump,record -r 3 | grep -E '^(mechanism|jump|record) '

echo "== 4. record -p of calls_target serve, $calls calls of add3"
minflt() { awk '{print $10}' "/proc/$1/stat"; }
mkfifo "$tmp/in" "$tmp/out"
"$target" serve <"$tmp/in" >"$tmp/out" &
srv=$!
exec 3>"$tmp/in" 4<"$tmp/out"
read -r ready <&4
ask() { echo "$1" >&3; read -r answer <&4; }
ask "$calls"  # its own pages touched once
for cold in 1 0; do
  load
  PROBECOST_COLD_RINGS=$cold "$pc" record -v -p "$srv" -b add3 -f ctf -o "$tmp/t$cold/" 2>"$tmp/err" &
  rec=$!
  until grep -q "tracing process" "$tmp/err"; do
    kill -0 "$rec" 2>/dev/null || { cat "$tmp/err" >&2; exit 1; }
    read -r -t 0.05 <&4 || true  # a bounded wait on nothing: the target says nothing meanwhile
  done
  f0=$(minflt "$srv"); ask "$calls"; f1=$(minflt "$srv")
  kill -INT "$rec"; wait "$rec" || true
  echo "-- PROBECOST_COLD_RINGS=$cold: the program's minor faults while recording: $((f1 - f0))"
  grep -E "^held stopped|^ +[0-9.]+ ms \(.*(call buffer|calls: before)|drain copied|^add3 " "$tmp/err" || true
  rm -rf "$tmp/t$cold"
done
