// Counts heap allocations in the test helper process: the helper executable defines
// malloc and friends, which take precedence over libc's for the whole process (ELF
// symbol interposition), count, and forward to glibc's implementations.
#ifndef ALLOC_COUNTER_H
#define ALLOC_COUNTER_H
/// Allocations (malloc, calloc, realloc, memalign family) since the process started,
/// or -1 when counting is off (sanitizer builds).
long mc_alloc_count(void);
#endif
