# Sourced by the checks' own tests (scripts/test-check-*.sh): counts the cases (`ok`,
# `bad`), gives each run a scratch folder removed on exit, and ends with `finish`, which
# prints the `N passed, N failed` line .ci/run totals and fails on any failure.
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $1"; }
bad() { failed=$((failed + 1)); echo "FAIL: $1"; }
finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
