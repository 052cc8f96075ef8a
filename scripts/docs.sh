#!/usr/bin/env bash
# docs.sh OUTDIR - builds the MappedCache module's documentation as a static web site in
# OUTDIR (open OUTDIR/documentation/mappedcache/index.html through any static web server,
# or host OUTDIR as it is), with the toolchain's own tools only: `swift package
# dump-symbol-graph` for the public symbols, then `docc convert` over the catalog
# Sources/MappedCache/MappedCache.docc.
#
# Exits non-zero when docc reports any warning (a missing or broken symbol link, an
# unknown doc: article, a malformed directive, ...), so CI (.ci/run) keeps the links
# sound. It also lists public symbols that have no doc comment (informational; with
# DOCS_REQUIRE_COMMENTS=1 they fail the build too).
#
# env: DOCC (default: the docc beside `swift`, e.g. /opt/swift/usr/bin/docc).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/docs.sh OUTDIR}

docc=${DOCC:-$(dirname "$(readlink -f "$(command -v swift)")")/docc}
[ -x "$docc" ] || { echo "docs.sh: no docc at $docc (set DOCC)" >&2; exit 2; }

# 1. Symbol graphs: public API only, no members synthesised from the standard library.
log=$(mktemp)
graphs=$(mktemp -d)
trap 'rm -rf "$graphs" "$log"' EXIT
swift package dump-symbol-graph --minimum-access-level public --skip-synthesized-members >"$log" 2>&1 || {
  cat "$log" >&2; echo "docs.sh: swift package dump-symbol-graph failed" >&2; exit 1; }
dir=$(sed -n 's/^Files written to //p' "$log" | tail -1)
[ -d "$dir" ] || { cat "$log" >&2; echo "docs.sh: no symbol graph directory" >&2; exit 1; }
# The MappedCache module and its extensions of other modules (MappedCache@Swift, ...).
cp "$dir"/MappedCache.symbols.json "$graphs"/
cp "$dir"/MappedCache@*.symbols.json "$graphs"/ 2>/dev/null || true

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
