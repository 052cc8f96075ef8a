#!/usr/bin/env bash
# docs.sh OUTDIR - builds the MappedCache module's documentation as a static web site in
# OUTDIR (open OUTDIR/documentation/mappedcache/index.html through any static web server,
# e.g. `python3 -m http.server --directory OUTDIR`, or host OUTDIR as it is), with the
# toolchain's own tools only: `swift build --target MappedCache` (the library alone, in
# the debug build `swift test` reuses), `swift-symbolgraph-extract` for its public
# symbols, then `docc convert` over the catalog Sources/MappedCache/MappedCache.docc.
# It needs nothing built before it: it is the first command a fresh clone may run (CI
# runs it before the tests to keep it so). (Not `swift package dump-symbol-graph`: that
# extracts every module of the package, the tests' too, which exist only once `swift
# test` has built them.)
#
# Exits non-zero when docc reports any warning (a missing or broken symbol link, an
# unknown doc: article, a malformed directive, ...), so CI (.ci/run) keeps the links
# sound. It also lists public symbols that have no doc comment (informational; with
# DOCS_REQUIRE_COMMENTS=1 they fail the build too).
#
# env: DOCC, SYMBOLGRAPH_EXTRACT (default: the docc and swift-symbolgraph-extract beside
# `swift`, e.g. /opt/swift/usr/bin/docc).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/docs.sh OUTDIR}

toolchain=$(dirname "$(readlink -f "$(command -v swift)")")
docc=${DOCC:-$toolchain/docc}
extract=${SYMBOLGRAPH_EXTRACT:-$toolchain/swift-symbolgraph-extract}
[ -x "$docc" ] || { echo "docs.sh: no docc at $docc (set DOCC)" >&2; exit 2; }
[ -x "$extract" ] || { echo "docs.sh: no swift-symbolgraph-extract at $extract (set SYMBOLGRAPH_EXTRACT)" >&2; exit 2; }

# 1. Symbol graphs: public API only, no members synthesised from the standard library.
# SystemCalls is imported, not re-exported: SystemError and Errno appear as MappedCache's
# aliases of them.
log=$(mktemp)
graphs=$(mktemp -d)
trap 'rm -rf "$graphs" "$log"' EXIT
swift build --target MappedCache >"$log" 2>&1 || {
  cat "$log" >&2; echo "docs.sh: swift build --target MappedCache failed" >&2; exit 1; }
bin=$(swift build --show-bin-path)
triple=$(swift -print-target-info | python3 -c 'import json, sys; print(json.load(sys.stdin)["target"]["triple"])')
"$extract" -module-name MappedCache -target "$triple" -I "$bin/Modules" \
  -Xcc -fmodule-map-file="$bin/CMappedCacheShim.build/module.modulemap" -Xcc -I -Xcc Sources/CMappedCacheShim/include \
  -minimum-access-level public -skip-synthesized-members -output-dir "$graphs" >"$log" 2>&1 || {
  cat "$log" >&2; echo "docs.sh: swift-symbolgraph-extract failed" >&2; exit 1; }
[ -f "$graphs/MappedCache.symbols.json" ] || { cat "$log" >&2; echo "docs.sh: no symbol graph" >&2; exit 1; }

# 2. Public symbols without a doc comment (declared in Sources/MappedCache).
python3 - "$graphs" <<'PY' || [ "${DOCS_REQUIRE_COMMENTS:-0}" != 1 ] || exit 1
import glob, json, sys
missing = []
for f in glob.glob(sys.argv[1] + "/*.json"):
    for s in json.load(open(f))["symbols"]:
        uri = s.get("location", {}).get("uri", "")
        if "/Sources/MappedCache/" not in uri or s.get("docComment"):
            continue
        missing.append("%s: %s" % (uri.split("/Sources/")[-1], ".".join(s["pathComponents"])))
for m in sorted(set(missing)):
    print("docs.sh: no doc comment: " + m)
sys.exit(1 if missing else 0)
PY

# 3. The site. docc prints diagnostics on stderr as "file:line:col: warning: ...".
rm -rf "$out"
"$docc" convert Sources/MappedCache/MappedCache.docc \
  --additional-symbol-graph-dir "$graphs" \
  --output-path "$out" \
  --transform-for-static-hosting \
  --fallback-display-name MappedCache \
  --fallback-bundle-identifier mappedcache.MappedCache \
  --fallback-default-module-kind "Framework" >"$log" 2>&1 || { cat "$log" >&2; echo "docs.sh: docc failed" >&2; exit 1; }
if grep -Eq "warning:|error:" "$log"; then
  cat "$log" >&2
  echo "docs.sh: docc reported $(grep -Ec 'warning:|error:' "$log") problem(s) (missing or broken links among them)" >&2
  exit 1
fi
[ -f "$out/index.html" ] && [ -f "$out/documentation/mappedcache/index.html" ] || {
  echo "docs.sh: the site has no index.html" >&2; exit 1; }
echo "docs.sh: built $out (open documentation/mappedcache/index.html through a web server)"
