#!/usr/bin/env bash
# CI for the Ruby gem (bindings/ruby): installs Debian's Ruby, activesupport, puma and unicorn, builds the
# gem and installs it (offline, --local) against the debug libmappedcache that swift test
# built, extracts Rails' cache behaviour tests from Debian's rails source package into
# .build/rails-tests, and runs every test of the gem with MAPPEDCACHE_REQUIRE_ALL=1 (a test
# that would skip fails instead). Fails on any failure or skip; ends with "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi

packages=(ruby-dev ruby-activesupport ruby-minitest puma unicorn make gcc xz-utils dpkg-dev)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${missing[@]}"
fi

# The library and the Swift binaries the interop and chaos tests run (built by swift test
# in .ci/run; built here when this script runs alone).
for product in mappedcache mc-test-helper mapped-cache; do
  case $product in
    mappedcache) built=.build/debug/libmappedcache.so ;;
    *) built=.build/debug/$product ;;
  esac
  [[ -e $built ]] || swift build --product "$product"
done
# Python with the mappedcache package, for the interop tests (.ci/run's venv).
venv=.build/ci-python
if ! "$venv/bin/python" -c 'import mappedcache' >/dev/null 2>&1; then
  python3 -m venv "$venv"
  MAPPEDCACHE_LIB_DIR=.build/debug "$venv/bin/pip" install --quiet --disable-pip-version-check ./bindings/python
fi
# Rails' behaviour tests (never committed here).
bindings/ruby/test/rails-tests.sh .build/rails-tests

# The gem, built and installed as a user would (gem build, gem install --local).
gems=$PWD/.build/ruby-gems
rm -rf "$gems" && mkdir -p "$gems"
(cd bindings/ruby && gem build mappedcache.gemspec --output "$gems/mappedcache.gem")
MAPPEDCACHE_LIB_DIR="$PWD/.build/debug" gem install --local --no-document --install-dir "$gems" "$gems/mappedcache.gem"
# Without a library to find, the install fails and says what to do.
if MAPPEDCACHE_LIB_DIR=/nonexistent gem install --local --no-document --install-dir "$gems/none" "$gems/mappedcache.gem" \
  >"$gems/none.log" 2>&1 || ! grep -q 'MAPPEDCACHE_LIB_DIR=/nonexistent holds no libmappedcache.so' -r "$gems/none.log" "$gems/none"; then
  echo "error: a gem install with no library did not fail with its message" >&2
  exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
GEM_PATH="$gems:$(gem env gempath)" MAPPEDCACHE_REQUIRE_ALL=1 MAPPEDCACHE_PYTHON="$venv/bin/python" \
  MAPPEDCACHE_RAILS_TESTS=.build/rails-tests/activesupport/test \
  ruby bindings/ruby/test/all.rb 2>&1 | tee "$log" || true
summary=$(grep -E '^[0-9]+ runs, ' "$log" | tail -1)
if [[ -z $summary ]]; then
  echo "error: the Ruby tests did not finish" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
read -r runs failures errors skips < <(echo "$summary" | sed -E 's/([0-9]+) runs, [0-9]+ assertions, ([0-9]+) failures, ([0-9]+) errors, ([0-9]+) skips/\1 \2 \3 \4/')
failed=$((failures + errors + skips))
if ((skips > 0)); then echo "error: $skips Ruby tests were skipped" >&2; fi
echo "$((runs - failed)) passed, $failed failed"
((failed == 0))
