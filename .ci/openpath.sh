#!/usr/bin/env bash
# Fleets and failed creations (docs/fleets.md), against the debug libmappedcache and
# mapped-cache that `swift test` built earlier in .ci/run (built here when missing):
#   - Tests/CABI/fleet.c: 1,000 processes open one file at once with the default options
#     (spawned, then forked from a parent holding a handle); all must succeed and the
#     file verify clean;
#   - on a 32 MiB tmpfs (mounted here; CI runs as root), creating the default 64 MiB
#     cache fails with a message naming the file system's size and leaves no file, from
#     the CLI and from Python;
#   - bindings/python/tests/test_fleet.py, none skipped.
# Ends with "N passed, N failed"; exits non-zero on any failure or skip.
set -uo pipefail
cd "$(dirname "$0")/.."
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi

passed=0
failed=0
check() { # check NAME COMMAND...: runs the command, counts and reports its outcome
  local name=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
    echo "ok: $name"
  else
    failed=$((failed + 1))
    echo "FAILED: $name"
  fi
}

if [[ ! -f .build/debug/libmappedcache.so || ! -x .build/debug/mapped-cache ]]; then
  swift build --product mappedcache && swift build --product mapped-cache || exit 1
fi
if ! python3 -c 'import ensurepip, os, sysconfig; assert os.path.exists(sysconfig.get_paths()["include"] + "/Python.h")' \
  >/dev/null 2>&1; then
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y python3-dev python3-venv
fi
cc=$(command -v cc || command -v clang || echo /opt/swift/usr/bin/clang)
lib=$PWD/.build/debug
work=$(mktemp -d)
small=$(mktemp -d)
cleanup() {
  mountpoint -q "$small" && $sudo umount "$small"
  rmdir "$small" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The fleet program, both ways, with the defaults (a 64 MiB file, 8,192 entries).
"$cc" -std=c11 -Wall -Wextra -Werror -O1 -I Sources/CMappedCacheABI/include Tests/CABI/fleet.c \
  -L "$lib" -lmappedcache -Wl,-rpath,"$lib" -o "$work/fleet" || exit 1
fleet() { # fleet MODE: 1,000 processes on a fresh file under /dev/shm
  local path=/dev/shm/mc-ci-fleet-$$-$1.mcache out status
  out=$("$work/fleet" "$1" "$path" 1000 2>"$work/fleet-$1.err")
  status=$?
  rm -f "$path"
  echo "$out"
  [[ $status -eq 0 && $out == "fleet: 1000 processes, 0 failed, 0 problems" ]] || {
    head -20 "$work/fleet-$1.err"
    return 1
  }
}
check "1,000 spawned processes with the defaults" fleet spawn
check "1,000 forked children of a parent holding a handle" fleet prefork

# Creation without room: 64 MiB on a 32 MiB tmpfs.
$sudo mount -t tmpfs -o size=32m tmpfs "$small" || {
  echo "error: cannot mount a tmpfs (CI runs as root)" >&2
  exit 1
}
cli_full() {
  local err
  err=$(.build/debug/mapped-cache create "$small/cli" 2>&1)
  [[ $? -eq 3 && $err == *"no space to reserve 67108864 bytes for $small/cli (the file system there holds 32 MiB"* ]] \
    && [[ -z $(ls -A "$small") ]] || {
    echo "$err; left: $(ls -A "$small")"
    return 1
  }
}
check "the CLI's creation on a 32 MiB tmpfs fails cleanly and leaves no file" cli_full

# The Python package in a venv of its own, against the same library.
venv=.build/ci-openpath-python
python3 -m venv "$venv" &&
  MAPPEDCACHE_LIB_DIR=$lib "$venv/bin/pip" install --quiet --disable-pip-version-check ./bindings/python || exit 1
python_full() {
  "$venv/bin/python" - "$small/py" <<'EOF'
import os, sys
import mappedcache
try:
    mappedcache.Cache(sys.argv[1])
    sys.exit("created a 64 MiB cache on a 32 MiB file system")
except mappedcache.CacheError as e:
    assert "no space to reserve 67108864 bytes" in str(e) and "holds 32 MiB" in str(e), str(e)
assert os.listdir(os.path.dirname(sys.argv[1])) == [], os.listdir(os.path.dirname(sys.argv[1]))
EOF
}
check "Python's creation on a 32 MiB tmpfs fails cleanly and leaves no file" python_full
$sudo umount "$small"

python_tests() {
  local log=$work/python.log
  (cd bindings/python/tests && MAPPEDCACHE_REQUIRE_ALL=1 "../../../$venv/bin/python" -m unittest -v test_fleet) >"$log" 2>&1
  local status=$?
  cat "$log"
  [[ $status -eq 0 ]] && ! grep -q skipped "$log"
}
check "bindings/python/tests/test_fleet.py, none skipped" python_tests

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
