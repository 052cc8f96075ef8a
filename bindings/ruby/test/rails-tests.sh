#!/usr/bin/env bash
# Extracts Rails' cache behaviour tests (activesupport/test/cache/behaviors and the helpers
# they load) from Debian's rails source package into DIR (default: the checkout's
# .build/rails-tests), for rails_store_test.rb. Rails' code is never committed here.
# Needs network access to deb.debian.org (or RAILS_SOURCE_DIR, a directory already holding
# the source package's files).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-$repo/.build/rails-tests}
if [[ -f $out/activesupport/test/cache/behaviors.rb ]]; then exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=${RAILS_SOURCE_DIR:-}
if [[ -z $src ]]; then
  mkdir -p "$work/lists/partial" "$work/src"
  cat >"$work/sources.sources" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt_opts=(-o "Dir::Etc::SourceList=$work/sources.sources" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$work/lists")
  apt-get "${apt_opts[@]}" update >/dev/null
  (cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only rails >/dev/null)
  src=$work/src
fi
orig=$(ls "$src"/rails_*.orig.tar.* | head -1)
mkdir -p "$work/x" "$out"
tar -xf "$orig" -C "$work/x" --wildcards '*/activesupport/test/cache/*' '*/activesupport/test/dependencies_test_helpers.rb' \
  '*/activesupport/test/autoloading_fixtures/*'
cp -r "$work"/x/*/activesupport "$out/"
echo "rails-tests: $(basename "$orig") -> $out"
