#!/bin/bash
# Issue 24's figures: `probecost record` on programs that call faster than any tick-driven
# reader keeps up with, in its default mode (writers wait for the drain: 0 lost) and with
# --drop (written + lost = 2 x calls), the drain thread's own CPU per record (its thread CPU
# clock, as probecost prints it), the program's time, and the counts of another tool (uftrace
# -P where installed, else bpftrace's uprobe count) for the same command. Then
# `probecost compare -m jump,record`'s rows.
#
#   scripts/record-lossless.sh [BUILD_DIR]     (default build-release)
#
# Prints figures; asserts nothing. Needs python3 (to read the summaries); root for bpftrace.
set -eu
build=${1:-build-release}
pc=$build/bin/probecost
target=$build/bin/calls_target
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(nproc) CPUs, $(uname -r), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
echo "load: $(cat /proc/loadavg)"

# sort compares lines with strcoll in a UTF-8 locale.
seq 200000 | shuf --random-source=<(yes 2>/dev/null) >"$tmp/numbers" 2>/dev/null ||
  seq 200000 | shuf >"$tmp/numbers"
sort_cmd="$(command -v env) LC_ALL=C.UTF-8 $(command -v sort) $tmp/numbers -o $tmp/sorted"

# Another tool's count of `function`'s calls in `cmd`.
other_count() { # library function cmd...
  lib=$1 fn=$2
  shift 2
  # uftrace hooks the executable's PLT: it counts a libc function's calls from libc itself
  # (malloc's from opendir, say) only through bpftrace's uprobe (other=bpftrace).
  if [ "${other:-}" != bpftrace ] && command -v uftrace >/dev/null; then
    uftrace record -d "$tmp/uftrace.data" -P "$fn" --force "$@" >/dev/null 2>&1 &&
      uftrace report -d "$tmp/uftrace.data" -f call 2>/dev/null | awk -v f="$fn" '$NF == f {print "uftrace " $1}'
  elif command -v bpftrace >/dev/null && [ "$(id -u)" = 0 ]; then
    path=$lib
    [ "$lib" = libc.so.6 ] && path=$(ldd /bin/true | awk '/libc.so.6/ {print $3}')
    bpftrace -q -e "uprobe:$path:$fn /pid == cpid/ { @n = count(); }" -c "$*" 2>&1 |
      awk '/@n:/ {n = $2} END {print "bpftrace uprobe count " (n == "" ? "(none printed)" : n)}'
  else
    echo "none"
  fi
}

# One probecost record run: its summary's figures on one line.
record_run() { # mode probe cmd...
  mode=$1 probe=$2
  shift 2
  extra=
  [ "$mode" = drop ] && extra=--drop
  rm -f "$tmp/s.json" "$tmp/t.json"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$pc" record $extra -b "$probe" -o "$tmp/t.json" --summary-json "$tmp/s.json" -- "$@" \
    >/dev/null 2>"$tmp/err" || { echo "  $mode: probecost failed:"; tr '\r' '\n' <"$tmp/err" | tail -3; return; }
  end=$(date +%s.%N)
  drain=$(sed -n 's/.*the drain copied \([0-9]*\) records ([^)]*) in \([0-9.]*\) ms of its CPU (\([0-9.]*\) ns per record).*/\3 ns\/record (\1 records, \2 ms)/p' "$tmp/err")
  python3 - "$tmp/s.json" "$mode" "$start" "$end" "$drain" "$calls" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
p = s["probes"][0]
w, l, c = p["events_written"], p["events_lost"], p["calls"]
ref = int(sys.argv[6]) if sys.argv[6] else c
print(f"  {sys.argv[2]:8} calls {c:>10,}  returns {p['returns']:>10,}  written {w:>11,}  lost {l:>10,}"
      f"  written+lost-2x{ref:,} {w + l - 2 * ref:>+4}  run {float(sys.argv[4]) - float(sys.argv[3]):6.2f} s"
      f"  drain {sys.argv[5] or '-'}")
EOF
  [ "$mode" = default ] && calls=$(python3 -c "import json; print(json.load(open('$tmp/s.json'))['probes'][0]['calls'])")
  return 0
}

workload() { # title lib fn probe cmd...   (lib "": the count is known, no other tool)
  title=$1 lib=$2 fn=$3 probe=$4
  shift 4
  calls=
  echo
  echo "$title"
  [ -n "$lib" ] && echo "  other tool: $(other_count "$lib" "$fn" "$@")"
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  echo "  untraced: $(echo "$(date +%s.%N) - $start" | bc) s"
  record_run default "$probe" "$@"
  record_run drop "$probe" "$@"
}

# shellcheck disable=SC2086
workload "sort of 200,000 shuffled numbers, strcoll" libc.so.6 strcoll libc.so.6:strcoll $sort_cmd
workload "calls_target bench 10000000 (add3, 5 instructions)" "" add3 add3 \
  "$target" bench 10000000
# Debian's interpreter, PyUnicode_New in the executable (the first python3 on PATH can be a
# wrapper that execs another, as a pyenv shim is: a shell script).
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)
# uftrace sees no function of an executable not built with -pg: bpftrace's uprobe counts them.
# The program in a file: bpftrace -c splits its command at spaces, and a `-c "x=[...]"` came
# apart into a syntax error after 56 calls of python's start-up (the count printed until then).
echo "x=[str(i)+'a' for i in range(1000000)]" >"$tmp/strings.py"
other=bpftrace workload "python3: a million strings, PyUnicode_New" "$python" PyUnicode_New \
  PyUnicode_New "$python" "$tmp/strings.py"

# find's own directory walk (gnulib fts) and malloc, called from find and from libc alike:
# bpftrace's uprobe counts both by address (uftrace names readdir64's calls by find's PLT
# symbol, readdir).
find_cmd="$(command -v find) /usr -xdev"
# shellcheck disable=SC2086
other=bpftrace workload "find /usr -xdev, readdir64" libc.so.6 readdir64 libc.so.6:readdir64 $find_cmd
# shellcheck disable=SC2086
other=bpftrace workload "find /usr -xdev, malloc" libc.so.6 malloc libc.so.6:malloc $find_cmd

echo
echo "probecost compare -m jump,record (ns per hit, tracee + tracer CPU):"
"$pc" compare -m jump,record -r 3 2>&1 | grep -Ei "mechanism|^ *(baseline|jump|record)" || true
