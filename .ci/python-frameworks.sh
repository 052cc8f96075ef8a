#!/usr/bin/env bash
# The Python package's framework backends (bindings/python/frameworks), after .ci/run's
# Python section, against the debug libmappedcache that swift test built:
#  1. the aiocache backend's and the Flask app's tests (unittest);
#  2. cachelib's own backend tests (tests/common.py and its mixins, from cachelib's sdist)
#     against mappedcache.cachelib.MappedCache and mappedcache.flask.MappedCache, with
#     pytest as cachelib runs them;
#  3. Django's own BaseCacheTests (tests/cache/tests.py, from Django's sdist) against
#     mappedcache.django.MappedCache, with Django's runtests.py.
# The sdists' test code is fetched into .build, never committed. Fails if any test fails
# or is skipped; the last line is "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
venv=.build/ci-frameworks
sdists="$venv/sdists"
log="$venv/log"
# The versions the backends were tested with; cachelib's and Django's tests come from
# the same versions' sdists.
CACHELIB=0.17.0
DJANGO=5.2.20
pip_quiet=(--quiet --disable-pip-version-check)

set -e
python3 -m venv "$venv"
"$venv/bin/pip" install "${pip_quiet[@]}" "cachelib==$CACHELIB" "Django==$DJANGO" Flask==3.1.3 Flask-Caching==2.5.1 \
  aiocache==0.12.3 redis==8.2.0 pytest pytest-xprocess
MAPPEDCACHE_LIB_DIR=.build/debug "$venv/bin/pip" install "${pip_quiet[@]}" --force-reinstall --no-deps ./bindings/python
rm -rf "$sdists" && mkdir -p "$sdists" "$log"
"$venv/bin/pip" download "${pip_quiet[@]}" --no-binary :all: --no-deps -d "$sdists" "cachelib==$CACHELIB" \
  "Django==$DJANGO"
for f in "$sdists"/*.tar.gz; do tar xzf "$f" -C "$sdists"; done
cachelib_tests="$sdists/cachelib-$CACHELIB/tests"
django_tests="$sdists/django-$DJANGO/tests"
[[ -f "$cachelib_tests/common.py" ]] || { echo "error: cachelib's sdist holds no tests/common.py" >&2; exit 1; }
[[ -f "$django_tests/cache/tests.py" ]] || { echo "error: Django's sdist holds no tests/cache/tests.py" >&2; exit 1; }
cp bindings/python/frameworks/test_cachelib_mappedcache.py "$cachelib_tests/"
cp bindings/python/frameworks/django_basecache.py "$django_tests/cache/tests_mappedcache.py"
set +e

python="$PWD/$venv/bin/python"
status=0
(cd bindings/python/frameworks && "$python" -m unittest -v test_aiocache_backend test_flask_backend) 2>&1 |
  tee "$log/unittest.txt" || status=1
(cd "$sdists/cachelib-$CACHELIB" && "$python" -m pytest -v -rs tests/test_cachelib_mappedcache.py) 2>&1 |
  tee "$log/cachelib.txt" || status=1
(cd "$django_tests" && "$python" runtests.py cache.tests_mappedcache --parallel 1 -v 2) 2>&1 |
  tee "$log/django.txt" || status=1

# Counts from each runner's summary: unittest's (and Django's) "Ran N tests" and
# "failures=F, errors=E", pytest's "N passed, F failed".
ran() { local n; n=$(grep -oE '^Ran [0-9]+ tests' "$1" | grep -oE '[0-9]+' | tail -1); echo "${n:-0}"; }
field() { local n; n=$(grep -oE "$2=[0-9]+" "$1" | grep -oE '[0-9]+' | tail -1); echo "${n:-0}"; }
pytest_count() { local n; n=$(grep -oE "[0-9]+ $2" "$1" | tail -1 | grep -oE '[0-9]+'); echo "${n:-0}"; }
failed=0
passed=0
for f in "$log/unittest.txt" "$log/django.txt"; do
  n=$(ran "$f")
  bad=$(($(field "$f" failures) + $(field "$f" errors)))
  [[ $n -gt 0 ]] || bad=$((bad + 1)) # no summary: the runner itself failed
  failed=$((failed + bad))
  passed=$((passed + n - $(field "$f" failures) - $(field "$f" errors)))
done
passed=$((passed + $(pytest_count "$log/cachelib.txt" passed)))
failed=$((failed + $(pytest_count "$log/cachelib.txt" failed) + $(pytest_count "$log/cachelib.txt" error)))
[[ $(pytest_count "$log/cachelib.txt" passed) -gt 0 ]] || failed=$((failed + 1))
if grep -qiE 'skipped' "$log/unittest.txt" "$log/django.txt" "$log/cachelib.txt"; then
  echo "error: framework tests were skipped" >&2
  status=1
fi
[[ $failed -eq 0 ]] || status=1
echo "$passed passed, $failed failed"
exit $status
