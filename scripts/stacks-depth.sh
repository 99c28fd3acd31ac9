#!/bin/bash
# Issue 26: how deep real stacks are at probes, to choose --stack-size's default. Each program
# is traced with the largest copy (--stack-size 65408) and every frame (--stack-depth 4096);
# trace says how many bytes from rsp the complete stacks needed (median, 90%, 99%, most) and
# JSON how many fit in 4, 8 and 16 KiB. A snapshot the unwinding could not keep up with is
# dropped (lost), so the figures are of those unwound.
#
#   scripts/stacks-depth.sh [BUILD_DIR]
# Prints figures; asserts nothing.
set -eu
build=${1:-build-release}
pc=$build/bin/probecost
[[ -x $pc ]] || { echo "usage: $0 [BUILD_DIR] (no $pc)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
find /usr/include -name '*.h' -print0 | xargs -0 cat 2>/dev/null | tr -cs 'A-Za-z' '\n' |
  head -200000 >"$tmp/words"

depth() {
  local name=$1 probe=$2; shift 2
  "$pc" trace --stacks --stack-size 65408 --stack-depth 4096 -b "$probe" -f json \
    -o "$tmp/r.json" -- "$@" >/dev/null 2>"$tmp/err" || { echo "$name: failed"; tail -3 "$tmp/err"; return 0; }
  python3 - "$name" "$tmp/r.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
s = json.load(open(path))["snapshots"]
n = s.get("needed_bytes", {})
complete = s["unwound"] - s["truncated"]
frames = max((len(x["frames"]) for v in json.load(open(path))["stacks"].values() for x in v), default=0)
def share(k):
    return 100.0 * n.get(k, 0) / complete if complete else 0.0
print(f"{name}: {s['taken']} snapshots, {s['unwound']} unwound, {s['truncated']} cut at 64 KiB, "
      f"{s['lost']} lost; deepest {frames} frames")
print(f"  bytes needed: median {n.get('median')}, 90% {n.get('p90')}, 99% {n.get('p99')}, "
      f"most {n.get('max')}; complete within 4 KiB {share('within_4096'):.1f}%, "
      f"8 KiB {share('within_8192'):.1f}%, 16 KiB {share('within_16384'):.1f}%")
PY
}

LC_ALL=C.UTF-8 depth "sort (strcoll, C.UTF-8, 200000 words)" strcoll sort -o "$tmp/sorted" "$tmp/words"
depth "find /usr (readdir64)" libc.so.6:readdir64 find /usr -name '*.h'
depth "python3 compileall (PyUnicode_New)" PyUnicode_New \
  /usr/bin/python3.11 -m compileall -q -f -d "$tmp" -o 0 /usr/lib/python3.11/json /usr/lib/python3.11/email /usr/lib/python3.11/xml
depth "python3 json (PyUnicode_New)" PyUnicode_New /usr/bin/python3.11 -c \
  'import json; d=[{"k%d" % i: [str(i)] * 3} for i in range(50000)]; print(len(json.loads(json.dumps(d))))'
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
