#!/usr/bin/env bash
# Renders `probecost report` in headless Chromium and checks every chart: the page's own script
# marks each chart whose data marks have a size after layout (data-drawn="yes"), and counts the
# texts that stick out of it, the line labels that overlap and the value labels a whisker
# crosses, each of which must be 0; --dump-dom shows the DOM after that script ran.
#   report_render.sh PROBECOST FIXTURE.json [RESULT.json ...]
# The fixtures: the experiments' JSON, then compare and overhead results drawn after them.
# Exit 77 (skipped) where there is no Chromium: scripts/install-deps.sh installs it, a test does
# not.
set -euo pipefail
probecost=$1
shift
charts=(cost-per-hit cpu-share markers-disabled markers-enabled scalability multi-probe)
for ((i = 2; i <= $#; ++i)); do
  case $(basename "${!i}") in
    compare*) charts+=("compare-$((i - 1))-cost" "compare-$((i - 1))-share") ;;
    overhead*) charts+=("overhead-$((i - 1))-chart") ;;
  esac
done

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIPPED: no chromium here (scripts/install-deps.sh installs Debian's)"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$probecost" report --from "$@" -o "$tmp/report.html"

# Self-contained: no src/href, no @import, no url() but the page's own #fragments.
if grep -Eq '(src|href)=|@import|url\((["'\'']?)(https?:|//)' "$tmp/report.html"; then
  echo "FAIL: the report loads something from outside itself"
  exit 1
fi

# As root Chromium needs --no-sandbox; a fresh profile keeps runs independent.
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$tmp/profile" \
  --dump-dom "file://$tmp/report.html" >"$tmp/dom.html" 2>"$tmp/chromium.log" || {
  echo "FAIL: chromium did not render the page"
  tail -20 "$tmp/chromium.log"
  exit 1
}
attribute() {  # the value of attribute $2 on chart $1's <svg>
  grep -Eo "data-chart=\"$1\"[^>]*$2=\"[0-9]+\"" "$tmp/dom.html" | grep -Eo '[0-9]+"$' | tr -d '"'
}
status=0
for chart in "${charts[@]}"; do
  if ! grep -Eq "data-chart=\"$chart\"[^>]*data-drawn=\"yes\"" "$tmp/dom.html"; then
    echo "FAIL: chart $chart was not drawn"
    status=1
    continue
  fi
  echo "chart $chart: drawn, $(attribute "$chart" data-marks-drawn) marks with a size"
  for check in data-text-outside data-labels-overlapping data-whiskers-through-values; do
    n=$(attribute "$chart" $check)
    if [ "$n" != 0 ]; then
      echo "FAIL: chart $chart: $check=$n"
      status=1
    fi
  done
done
grep -q "data-charts-drawn=\"${#charts[@]}\"" "$tmp/dom.html" || {
  echo "FAIL: the page counted $(grep -Eo 'data-charts-drawn="[0-9]+"' "$tmp/dom.html") charts"
  status=1
}
exit $status
