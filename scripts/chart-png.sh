#!/usr/bin/env bash
# One chart of a `probecost report` page as a PNG (the README's picture), rendered by headless
# Chromium at the chart's own size.
#
#   scripts/chart-png.sh REPORT.html CHART OUT.png      e.g. CHART = cost-per-hit
set -euo pipefail
report=$1 chart=$2 png=$3
browser=$(command -v chromium || command -v chromium-browser) || {
  echo "no chromium (apt-get install chromium)"
  exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The page's style, then the one <svg ...data-chart="CHART"...>...</svg>.
python3 - "$report" "$chart" "$tmp/chart.html" <<'EOF'
import re, sys
page = open(sys.argv[1], encoding="utf-8").read()
style = re.search(r"<style>.*?</style>", page, re.S).group(0)
svg = re.search(r'<svg class="chart" data-chart="%s".*?</svg>' % re.escape(sys.argv[2]), page, re.S)
if not svg:
    sys.exit("no chart '%s' in %s" % (sys.argv[2], sys.argv[1]))
open(sys.argv[3], "w", encoding="utf-8").write(
    '<!DOCTYPE html><html><head><meta charset="utf-8">%s<style>body{margin:0;padding:0;'
    'background:#fff}svg.chart{margin:0}</style></head><body>%s</body></html>'
    % (style, svg.group(0)))
EOF
size=$(python3 -c 'import re,sys; s=open(sys.argv[1]).read(); m=re.search(r"width=\"([\d.]+)\" height=\"([\d.]+)\"", s); print("%d,%d" % (float(m.group(1)), float(m.group(2))))' "$tmp/chart.html")
timeout 60 "$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --user-data-dir="$tmp/profile" \
  --hide-scrollbars --window-size="$size" --screenshot="$png" "file://$tmp/chart.html" 2>/dev/null
echo "$png: $size"
