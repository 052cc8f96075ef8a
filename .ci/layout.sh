#!/usr/bin/env bash
# The layout's gate (docs/layout.md): no product of the package depends on a target
# under Tests/, and the check itself fails on a manifest where one does (a copy of this
# package's manifest with RedisServers, which cache-stress links, put back under Tests/).
set -euo pipefail
cd "$(dirname "$0")/.."
passed=0
failed=0
manifest=$(mktemp)
broken=$(mktemp)
trap 'rm -f "$manifest" "$broken"' EXIT
swift package dump-package >"$manifest"
if python3 scripts/check-layout.py "$manifest"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi
python3 - "$manifest" "$broken" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for t in m["targets"]:
    if t["name"] == "RedisServers":
        t["path"] = "Tests/RedisServers"
json.dump(m, open(sys.argv[2], "w"))
PY
refused=$(python3 scripts/check-layout.py "$broken" 2>&1 || true)
if grep -q "product cache-stress depends on RedisServers" <<<"$refused"; then
  passed=$((passed + 1))
else
  echo "error: check-layout.py let a product depend on a target under Tests/" >&2
  failed=$((failed + 1))
fi
echo "layout: $passed passed, $failed failed"
[ "$failed" = 0 ]
