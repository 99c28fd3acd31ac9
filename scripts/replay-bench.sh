#!/usr/bin/env bash
# Issue 28 item 5: how long `probecost replay` takes to read a recording of 10 million events
# (5 million calls, 4 threads, 2 arguments each), in both of record's formats: the recording is
# made by record/'s own writers (replay_make_recording), then read with --report and as the
# tree (to /dev/null). Prints wall and CPU seconds, the maximum RSS and the size read.
#
#   scripts/replay-bench.sh [BUILD_DIR] [MILLIONS_OF_EVENTS]
set -euo pipefail
build=${1:-build-release}
millions=${2:-10}
probecost=$build/bin/probecost
make=$build/bin/replay_make_recording
[[ -x $probecost && -x $make ]] ||
  { echo "usage: $0 [BUILD_DIR] [MILLIONS] (no $probecost or $make: ninja probecost replay_make_recording)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/replay-bench-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
for format in chrome ctf; do
  path=$tmp/rec.json
  [[ $format == ctf ]] && path=$tmp/ctf/
  "$make" "$path" "$format" "$millions" >/dev/null
  size=$(du -sb "$path" | cut -f1)
  for mode in --report tree; do
    args=("$path")
    [[ $mode == --report ]] && args=(--report "$path")
    /usr/bin/time -f "%e %U %S %M" -o "$tmp/time" "$probecost" replay "${args[@]}" >/dev/null
    read -r wall user sys rss <"$tmp/time"
    printf '%-6s %-8s %s M events, %6.0f MB: %6.2f s wall, %6.2f s CPU (user %s + sys %s), max RSS %d MB\n' \
      "$format" "$mode" "$millions" "$(echo "$size / 1000000" | bc -l)" "$wall" \
      "$(echo "$user + $sys" | bc -l)" "$user" "$sys" "$((rss / 1024))"
  done
  rm -rf "$path"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
