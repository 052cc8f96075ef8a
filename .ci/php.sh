#!/usr/bin/env bash
# CI for the PHP extension (bindings/php): installs Debian's PHP toolchain and the PSR-16
# packages, builds the extension with phpize against the libmappedcache.so that swift test
# built (.build/debug), and runs its PHPUnit suite with every test required (a test that
# would skip fails instead). Ends with "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi

packages=(php-cli php-dev php-fpm php-igbinary libfcgi-bin phpunit php-psr-simple-cache php-cache-integration-tests)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi

# The library, the CLI and the test helper from the debug build (swift test built them
# earlier in .ci/run; built here when missing, e.g. when this script runs alone).
lib_dir=${MAPPEDCACHE_LIB_DIR:-$repo/.build/debug}
for product in mappedcache mapped-cache mc-test-helper; do
  file=$product
  [[ $product == mappedcache ]] && file=libmappedcache.so
  [[ -e .build/debug/$file ]] || swift build --product "$product"
done

# The interop tests run Python with bindings/python: the venv .ci/run made, else one here.
python=$repo/.build/ci-python/bin/python
if ! "$python" -c 'import mappedcache' >/dev/null 2>&1; then
  python3 -m venv .build/ci-php-python
  MAPPEDCACHE_LIB_DIR=.build/debug .build/ci-php-python/bin/pip install --quiet --disable-pip-version-check ./bindings/python
  python=$repo/.build/ci-php-python/bin/python
fi

cd bindings/php
phpize --clean >/dev/null
phpize >/dev/null
./configure --quiet --with-mappedcache="$lib_dir"
make -s -j2 >/dev/null
junit=$(mktemp)
trap 'rm -f "$junit"' EXIT
status=0
MAPPEDCACHE_REQUIRE_ALL=1 MAPPEDCACHE_PYTHON="$python" \
  php -d extension="$PWD/modules/mappedcache.so" /usr/bin/phpunit --log-junit "$junit" || status=$?
# The suite's totals from its JUnit report: a skipped or incomplete test fails the run.
# (A suite that did not run counts as one failure.)
read -r tests failed skipped < <(php -r '$x = @simplexml_load_file($argv[1]); $s = $x ? $x->testsuite : null;
  echo $s ? "{$s["tests"]} " . ($s["failures"] + $s["errors"]) . " {$s["skipped"]}\n" : "1 1 0\n";' "$junit")
if ((skipped > 0)); then
  echo "error: $skipped PHP tests were skipped" >&2
  status=1
fi
echo "$((tests - failed - skipped)) passed, $failed failed"
exit "$status"
