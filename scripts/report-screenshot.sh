#!/usr/bin/env bash
# Renders a cache-stress --report page to a PNG with headless Chromium, to look at it as
# a browser shows it (Debian: apt-get install -y chromium).
#   scripts/report-screenshot.sh REPORT.html OUT.png [WIDTH [HEIGHT]]
# WIDTH defaults to 1000 pixels and HEIGHT to 2700 (the whole page of a default run).
set -euo pipefail
if [[ $# -lt 2 || $# -gt 4 ]]; then
  echo "usage: $0 REPORT.html OUT.png [WIDTH [HEIGHT]]" >&2
  exit 64
fi
report=$1 out=$2 width=${3:-1000} height=${4:-2700}
[[ -f $report ]] || { echo "error: no such file: $report" >&2; exit 66; }
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[[ -n $browser ]] || { echo "error: no chromium found (apt-get install -y chromium)" >&2; exit 69; }
abs=$(cd "$(dirname "$report")" && pwd)/$(basename "$report")
outabs=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# --no-sandbox: CI containers run as root, where Chromium's sandbox refuses to start.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --window-size="$width,$height" --screenshot="$outabs" "file://$abs" >/dev/null 2>&1
[[ -s $outabs ]] || { echo "error: chromium wrote no screenshot" >&2; exit 1; }
echo "$outabs"
