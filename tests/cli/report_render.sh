#!/usr/bin/env bash
# Renders `probecost report` in headless Chromium and checks that every chart was drawn: the
# page's own script marks each chart whose data marks have a size after layout
# (data-drawn="yes"), and --dump-dom shows the DOM after that script ran.
#   report_render.sh PROBECOST FIXTURE.json
# Exit 77 (skipped) where there is no Chromium: scripts/install-deps.sh installs it, a test does
# not.
set -euo pipefail
probecost=$1
fixture=$2
charts=(cost-per-hit cpu-share markers-disabled markers-enabled scalability multi-probe)

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIPPED: no chromium here (scripts/install-deps.sh installs Debian's)"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$probecost" report --from "$fixture" -o "$tmp/report.html"

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
status=0
for chart in "${charts[@]}"; do
  if grep -Eq "data-chart=\"$chart\"[^>]*data-drawn=\"yes\"" "$tmp/dom.html"; then
    marks=$(grep -Eo "data-chart=\"$chart\"[^>]*data-marks-drawn=\"[0-9]+\"" "$tmp/dom.html" |
      grep -Eo '[0-9]+"$' | tr -d '"')
    echo "chart $chart: drawn, $marks marks with a size"
  else
    echo "FAIL: chart $chart was not drawn"
    status=1
  fi
done
grep -q "data-charts-drawn=\"${#charts[@]}\"" "$tmp/dom.html" || {
  echo "FAIL: the page counted $(grep -Eo 'data-charts-drawn="[0-9]+"' "$tmp/dom.html") charts"
  status=1
}
exit $status
