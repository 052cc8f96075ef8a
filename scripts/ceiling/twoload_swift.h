/* twoload_swift.h - what twoload_swift.swift takes from C: the tag compare as
 * twoload_c.c (and the engine's mc_tag_matches) makes it, the owned prefetch, the pause. */
#include <emmintrin.h>
#include <stdint.h>

static inline unsigned tls_tag_matches(const void *bucket, uint16_t tag) {
  const char *b = (const char *)bucket;
  __m128i t = _mm_set1_epi16((short)tag);
  __m128i a = _mm_loadu_si128((const __m128i *)(b + 4)), c = _mm_loadu_si128((const __m128i *)(b + 20));
  __m128i p = _mm_packs_epi16(_mm_cmpeq_epi16(a, t), _mm_cmpeq_epi16(c, t));
  return (unsigned)_mm_movemask_epi8(p) & 0x3FF;
}
static inline void tls_prefetch_for_write(const void *a) { __asm__ volatile("prefetchw %0" ::"m"(*(const char *)a)); }
static inline void tls_pause(void) { __builtin_ia32_pause(); }
