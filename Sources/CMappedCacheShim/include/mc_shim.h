// The few things Swift cannot call directly: variadic `syscall(SYS_futex)`, the
// `_GNU_SOURCE`-only `fallocate` and open-file-description lock commands of `fcntl`, CPU
// hints (pause, prefetch), a vector compare whose lane mask Swift's SIMD types cannot
// extract in one instruction (`mc_tag_matches`), and the seqlock read's copy of a value
// (`mc_copy_record_bytes`): racy by design, which Swift's own loads would have
// ThreadSanitizer report.
#ifndef MC_SHIM_H
#define MC_SHIM_H
#include <stddef.h>
#include <stdint.h>

/// Waits while `*word == expected`, for at most `timeout_ns` (0 = no limit).
/// Shared futex: works across processes on a MAP_SHARED mapping.
/// Returns 0 when woken, or -errno (EAGAIN: value differed, ETIMEDOUT, EINTR).
int mc_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns);

/// Wakes at most `count` waiters on `word`. Returns the number woken or -errno.
int mc_futex_wake(uint32_t *word, int count);

/// Takes a shared (read) OFD lock on one byte at `offset`, without waiting.
/// Returns 0, or -errno (EAGAIN/EACCES when someone holds a conflicting lock).
int mc_ofd_lock_byte(int fd, int64_t offset);

/// Takes an exclusive (write) OFD lock on one byte at `offset`, without waiting.
/// Returns 0, or -errno (EAGAIN/EACCES when someone holds a conflicting lock).
/// `fd` must be open for writing.
int mc_ofd_lock_byte_exclusive(int fd, int64_t offset);

/// Releases this open file description's OFD lock on one byte.
int mc_ofd_unlock_byte(int fd, int64_t offset);

/// Asks whether any other open file description holds a lock on the byte.
/// Returns 1 (held), 0 (free), or -errno.
int mc_ofd_byte_is_locked(int fd, int64_t offset);

/// `fallocate(fd, 0, 0, length)` (a `_GNU_SOURCE` call): allocates the holes of the
/// first `length` bytes, never writing data. Returns 0 or -errno (EINTR retried).
int mc_fallocate(int fd, int64_t length);

/// A CPU hint for spin-wait loops.
static inline void mc_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/// A hint that `address` will be written soon: the CPU starts fetching its cache line
/// (for writing) and goes on. Never faults, whatever the address.
/// On x86-64 this is PREFETCHW (the line arrives owned, ready for the store; CPUs
/// without it run the encoding as a NOP); `__builtin_prefetch(a, 1, 3)` emits a plain
/// read prefetch without `-mprfchw`.
static inline void mc_prefetch_for_write(const void *address) {
#if defined(__x86_64__)
  __asm__ volatile("prefetchw %0" :: "m"(*(const char *)address));
#else
  __builtin_prefetch(address, 1, 3);
#endif
}

/// A hint that `address` will be read soon: the CPU starts fetching its cache line into
/// every level and goes on. Never faults, whatever the address (a batch read issues one
/// per key before it waits on any of them, so the keys' memory misses overlap).
static inline void mc_prefetch_for_read(const void *address) {
  __builtin_prefetch(address, 0, 3);
}

/// A hint that `address` will be read, less soon: the line is fetched into the
/// second-level cache (not the first), which takes no first-level fill buffer, of which a
/// core has few (16 on recent Intel cores), while the miss is in flight.
static inline void mc_prefetch_to_l2(const void *address) {
  __builtin_prefetch(address, 0, 1);
}

#if defined(__x86_64__)
/// The slots of a bucket whose 16-bit tag equals `tag`, as a mask of bits 0-9. `tags`
/// points at the bucket's ten tags; the 32 bytes from there (ten tags, then the first
/// three entry words) lie inside the bucket. Two 16-byte loads, two lane compares, one
/// pack and one byte mask (SSE2, which every x86-64 CPU has): all ten lanes at once,
/// where the portable form (`BucketIndex.matching`, used on other CPUs) takes some forty
/// instructions. Racy under readers, like every load inside a bucket's seqlock read: the
/// bucket's `seq` judges the result.
static inline uint32_t mc_tag_matches(const void *tags, uint16_t tag) {
  typedef short mc_lanes16 __attribute__((vector_size(16), aligned(1)));
  typedef char mc_lanes8 __attribute__((vector_size(16)));
  const mc_lanes16 *p = (const mc_lanes16 *)tags;
  mc_lanes16 a = p[0], b = p[1];
  short t = (short)tag;
  mc_lanes16 pattern = {t, t, t, t, t, t, t, t};
  mc_lanes8 packed = __builtin_ia32_packsswb128((mc_lanes16)(a == pattern), (mc_lanes16)(b == pattern));
  return (uint32_t)__builtin_ia32_pmovmskb128(packed) & 0x3FF;
}
#endif

/// Copies the first `w` and the last `w` of the `n` bytes at `source` to `destination`:
/// for `w <= n <= 2 * w`, the whole run, in two moves of a constant size (`w` is one
/// after inlining) that the compiler makes plain loads and stores, whatever `n`.
static inline __attribute__((always_inline)) void mc_copy_from_both_ends(char *destination, const char *source,
                                                                         size_t n, size_t w) {
  __builtin_memcpy(destination, source, w);
  __builtin_memcpy(destination + n - w, source + n - w, w);
}

/// Copies `n` bytes from `source` to `destination`, which has room for exactly `n`: a
/// read's copy out of a record in the mapping (read racily inside a bucket's seqlock
/// read, whose `seq` judges the copy), or a writer's rewrite of a value in place (the
/// caller's bytes never overlap the record's in part: at most, they are its own value).
/// Up to 64 bytes (a small entry's value) inline, from both ends of the run; more
/// through `memcpy`. Inline because the libc call was the one call on the read's, and
/// on the common set's, straight path.
/// Like `mc_tag_matches`, these racy loads are not reported by ThreadSanitizer: Swift
/// compiles this header's inline functions without its instrumentation (so a TSan
/// build checks the read's protocol, not this copy).
static inline __attribute__((always_inline)) void mc_copy_record_bytes(void *destination, const void *source,
                                                                       size_t n) {
  char *d = (char *)destination;
  const char *s = (const char *)source;
  if (n > 64) {
    __builtin_memcpy(d, s, n);
  } else if (n >= 32) {
    mc_copy_from_both_ends(d, s, n, 32);
  } else if (n >= 16) {
    mc_copy_from_both_ends(d, s, n, 16);
  } else if (n >= 8) {
    mc_copy_from_both_ends(d, s, n, 8);
  } else if (n >= 4) {
    mc_copy_from_both_ends(d, s, n, 4);
  } else if (n > 0) {
    d[0] = s[0];
    d[n / 2] = s[n / 2];
    d[n - 1] = s[n - 1];
  }
}

#endif
