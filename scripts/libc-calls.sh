#!/usr/bin/env bash
# libc-calls.sh [BIN] - checks that no module but SystemCalls calls the C library
# directly: lists the C functions each module's object files (of the build in BIN,
# default `swift build --show-bin-path`) leave undefined, and fails on any but those the
# compiler and the standard library emit themselves (memory copies, the allocator, the
# math functions, the blocks runtime, and `syscall`, the futex of Synchronization's
# Mutex inlined), and the C ABI's own helpers in CMappedCacheABI (`mc_abi_*`,
# `mc_options_init`). Run it after a build (CI: after `swift test`).
#
# The test targets and mc-test-helper are left out: they poke at the system on purpose
# (truncating, signalling, faulting), as the code under test never may.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-$(swift build --show-bin-path)}
modules=(MappedCache MappedCacheCExports CacheTools MappedCacheRedis mapped_cache cache_stress RedisServers RedisFaultProxy TestSupport)
allowed='^(memcpy|memmove|memset|memcmp|malloc|malloc_usable_size|free|ceil|floor|rint|round|trunc|pow|log10|exp|log|sqrt|fmod|_Block_copy|_Block_release|_NSConcreteStackBlock|_NSConcreteGlobalBlock|_swiftEmptyArrayStorage|syscall|mc_abi_[a-z_]+|mc_options_init)$'
status=0
for m in "${modules[@]}"; do
  dir="$bin/$m.build"
  [ -d "$dir" ] || { echo "libc-calls.sh: no $dir (build first)" >&2; status=1; continue; }
  # C symbols only: Swift's are mangled ($s...), the runtime's start with swift_, the
  # compiler's own with __ (but `errno`, read through __errno_location, is SystemCalls' too).
  calls=$(nm -u "$dir"/*.o | awk '{print $2}' | grep -vE '^(\$s|\$e|_\$s|swift_|_swift_)' \
    | awk '!/^__/ || /^__errno_location$/' | grep -vE "$allowed" | sort -u || true)
  if [ -n "$calls" ]; then
    echo "libc-calls.sh: $m calls the C library directly: $(echo $calls)"
    status=1
  fi
done
[ $status = 0 ] && echo "libc-calls.sh: no module but SystemCalls calls the C library directly (${#modules[@]} modules)"
exit $status
