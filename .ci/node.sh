#!/usr/bin/env bash
# CI for the Node addon (bindings/node): installs what is missing, builds the addon
# offline against the debug libmappedcache that `swift test` built, and runs its tests
# (node --test) with every tool they use beside Node: the CLI and mc-test-helper from the
# Swift build, Python's venv (.ci/run's Python section), Debian's Keyv and lru-cache. A
# skipped test fails the run (MAPPEDCACHE_REQUIRE_ALL=1 turns a missing tool into a
# failure, and any skip left is counted here). The last line is "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
apt_install() {
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "$@"
}

# Node with its headers (nodesource's nodejs ships them in /usr/include/node; Debian's
# nodejs in libnode-dev), and a node-gyp (npm's own, else Debian's).
if ! command -v node >/dev/null 2>&1; then apt_install nodejs npm; fi
if [[ ! -f /usr/include/node/node_api.h ]]; then apt_install libnode-dev; fi
node_gyp=/usr/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js
if [[ ! -f $node_gyp ]]; then
  if ! command -v node-gyp >/dev/null 2>&1; then apt_install node-gyp; fi
  node_gyp=$(command -v node-gyp)
fi
# Keyv (inside Debian's node-got) and lru-cache, for the tests that run against them.
if [[ ! -d /usr/share/nodejs/keyv || ! -d /usr/share/nodejs/lru-cache ]]; then apt_install node-got node-lru-cache; fi
if ! command -v make >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1; then apt_install build-essential; fi

# The Python package the interop and chaos tests run beside Node (.ci/run builds it; made
# here when this script runs alone).
venv=.build/ci-python
if ! "$venv/bin/python" -c 'import mappedcache' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  MAPPEDCACHE_LIB_DIR=.build/debug "$venv/bin/pip" install --quiet --disable-pip-version-check ./bindings/python
fi

# Offline: --nodedir names the headers on this machine, so node-gyp downloads nothing.
(cd bindings/node && MAPPEDCACHE_LIB_DIR=.build/debug node "$node_gyp" rebuild --nodedir=/usr --loglevel=warn)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
(cd bindings/node && MAPPEDCACHE_REQUIRE_ALL=1 MAPPEDCACHE_PYTHON="$PWD/../../$venv/bin/python" \
  NODE_PATH=/usr/share/nodejs node --test --test-reporter=tap test/*.test.js) 2>&1 | tee "$log" || status=$?
count() { grep -E "^# $1 [0-9]+" "$log" | tail -1 | grep -oE '[0-9]+' || echo 0; }
passed=$(count pass)
failed=$(count fail)
skipped=$(count skipped)
todo=$(count todo)
if [[ $skipped -ne 0 || $todo -ne 0 ]]; then
  echo "error: $skipped Node tests skipped, $todo todo" >&2
  status=1
fi
echo "node: $passed passed, $failed failed"
exit "$status"
