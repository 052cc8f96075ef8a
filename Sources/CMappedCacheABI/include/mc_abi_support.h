// What the C ABI's Swift side (MappedCacheCExports) needs from C, not part of the public
// header: the fork generation, a lock the fork handlers hold across fork(), and the
// per-thread last error. Each needs C: a pthread_atfork handler must be async-signal-safe
// (so it runs no Swift), and Swift has no thread-local storage.
#ifndef MC_ABI_SUPPORT_H
#define MC_ABI_SUPPORT_H
#include <stddef.h>
#include <stdint.h>

// Internal to libmappedcache.so: not exported.
#define MC_ABI_INTERNAL __attribute__((visibility("hidden")))

/// Bumped in the child by the library's pthread_atfork handler: a handle opened at
/// another generation was inherited across fork(). Written only there, where the child
/// has a single thread; read by every call.
MC_ABI_INTERNAL extern uint64_t mc_abi_fork_generation_word;

/// The fork generation of this process (see `mc_abi_fork_generation_word`).
static inline uint64_t mc_abi_fork_generation(void) {
  return __atomic_load_n(&mc_abi_fork_generation_word, __ATOMIC_RELAXED);
}

/// The table of open caches (a `HandleTable`), published once it exists so that a call
/// finds it with one load (a Swift global would cost each call its lazy-initialization
/// check). NULL until the first open.
MC_ABI_INTERNAL extern void *mc_abi_cache_table_word;

static inline void *mc_abi_cache_table(void) { return __atomic_load_n(&mc_abi_cache_table_word, __ATOMIC_ACQUIRE); }

static inline void mc_abi_publish_cache_table(void *table) {
  __atomic_store_n(&mc_abi_cache_table_word, table, __ATOMIC_RELEASE);
}

/// The lock that guards the handle tables: held across fork() by the atfork handlers, so
/// that a child never inherits it locked by a thread that does not exist there.
MC_ABI_INTERNAL void mc_abi_tables_lock(void);
MC_ABI_INTERNAL void mc_abi_tables_unlock(void);

/// Records the last error of this thread (the message is copied, truncated to fit at a
/// UTF-8 boundary) and its errno (0 unless a system call failed).
MC_ABI_INTERNAL void mc_abi_set_error(const char *message, size_t length, int errnum);
#endif
