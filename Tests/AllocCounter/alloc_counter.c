#include "alloc_counter.h"
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define MC_NO_INTERPOSE 1
#endif
#endif

#ifdef MC_NO_INTERPOSE
// Sanitizers intercept malloc themselves: replacing it under them would crash every
// process that links this (the test runner too), so counting is off: -1.
long mc_alloc_count(void) { return -1; }
#else
static _Atomic long allocs;

long mc_alloc_count(void) { return atomic_load(&allocs); }

void *malloc(size_t n) { atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed); return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { atomic_fetch_add_explicit(&allocs, 1, memory_order_relaxed); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  void *p = memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void free(void *p) { __libc_free(p); }
#endif
