#!/usr/bin/env bash
# Issue 24, item 6: the program's minor page faults while `probecost record -p` records it (the
# rings are populated when they are mapped, so the goal is none from them), and what populating
# costs at attach.
#
#   scripts/record-faults.sh [BUILD_DIR] [CALLS]
#
# 1. calls_target serve, attached by `probecost record -p PID -b add3`: its minflt
#    (/proc/PID/stat) before the attach, once probecost says it is tracing, after CALLS calls of
#    add3 (2 records each), and after the detach; the same CALLS untraced first, for the program's
#    own faults. 2. The kernel's work of the ring mapping, in a process of its own: a memfd of
#    16 MiB x CPUs (record's default) mapped MAP_SHARED with and without MAP_POPULATE, then
#    written once per page, timed (median of 5).
set -euo pipefail
build=${1:-build-release}
calls=${2:-200000}
probecost=$build/bin/probecost
target=$build/bin/calls_target
[[ -x $probecost && -x $target ]] || { echo "usage: $0 [BUILD_DIR] [CALLS] (no $probecost or $target)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'kill "${rec:-0}" "${srv:-0}" 2>/dev/null || true; rm -rf "$tmp"' EXIT

echo "machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
minflt() { awk '{print $10}' "/proc/$1/stat"; }

mkfifo "$tmp/in" "$tmp/out"
"$target" serve <"$tmp/in" >"$tmp/out" &
srv=$!
exec 3>"$tmp/in" 4<"$tmp/out"
read -r ready <&4
ask() { echo "$1" >&3; read -r answer <&4; }
ask "$calls"  # its own pages touched once
f0=$(minflt "$srv"); ask "$calls"; f1=$(minflt "$srv")
echo "untraced: $calls calls of add3: $((f1 - f0)) minor faults"

"$probecost" record -p "$srv" -b add3 -o "$tmp/t.json" 2>"$tmp/err" &
rec=$!
a0=$(minflt "$srv")
until grep -q "tracing process" "$tmp/err"; do
  kill -0 "$rec" 2>/dev/null || { cat "$tmp/err" >&2; exit 1; }
  read -r -t 0.05 <&4 || true  # a bounded wait on nothing: the target says nothing meanwhile
done
a1=$(minflt "$srv"); ask "$calls"; a2=$(minflt "$srv")
kill -INT "$rec"; wait "$rec" || true
a3=$(minflt "$srv")
echo "record -p: attach $((a1 - a0)), $calls calls recorded $((a2 - a1)), detach $((a3 - a2)) minor faults"
grep -E "^add3 " "$tmp/err" || true

cat >"$tmp/populate.c" <<'EOF'
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static long minflt(void) { struct rusage u; getrusage(RUSAGE_SELF, &u); return u.ru_minflt; }
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return (x > y) - (x < y); }
int main(void) {
  long cpus = sysconf(_SC_NPROCESSORS_CONF);
  size_t size = (size_t)cpus << 24;  /* 16 MiB per CPU */
  for (int populate = 0; populate < 2; ++populate) {
    double map_ms[5], touch_ms[5];
    long faults = 0;
    for (int run = 0; run < 5; ++run) {
      int fd = memfd_create("probecost-calls", MFD_CLOEXEC);
      if (fd < 0 || ftruncate(fd, (off_t)size)) return 1;
      double t0 = now();
      char* p = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
      double t1 = now();
      if (p == MAP_FAILED) return 1;
      long f0 = minflt();
      for (size_t i = 0; i < size; i += 4096) p[i] = 1;
      double t2 = now();
      faults = minflt() - f0;
      map_ms[run] = (t1 - t0) * 1e3;
      touch_ms[run] = (t2 - t1) * 1e3;
      munmap(p, size);
      close(fd);
    }
    qsort(map_ms, 5, sizeof *map_ms, cmp);
    qsort(touch_ms, 5, sizeof *touch_ms, cmp);
    printf("%ld MiB (%ld CPUs x 16 MiB) %-14s mmap %7.2f ms; then a write per page %7.2f ms, %ld faults "
           "(medians of 5)\n", (long)(size >> 20), cpus, populate ? "MAP_POPULATE:" : "no populate:",
           map_ms[2], touch_ms[2], faults);
  }
  return 0;
}
EOF
cc -O2 -o "$tmp/populate" "$tmp/populate.c"
"$tmp/populate"
