/* twoload_c - format 5's read and its overwrite in place, written in C as tightly as the
 * layout allows, run by the peers' harness (../shared/peers/common.h) beside limit_c: how
 * fast can a get be that reads a bucket, then the record that bucket names, against
 * limit_c's one slot? And a set that finds its record the same way, then rewrites it?
 *
 * A measuring tool, not a cache: gets, and sets of keys it holds (each an overwrite of
 * the same length, as every set of the peers' workload is), one process.
 * What it keeps of format 5 (DESIGN.md, sections 2 and 3):
 *   - buckets of 64 bytes: a 32-bit sequence word, ten 16-bit tags, ten 32-bit entry
 *     words (a record's offset in the low 29 bits, here in 8-byte units, so that one
 *     log holds 10 M keys: format 5 spreads them over partitions); four buckets and a
 *     ghost line to a group of 320 bytes; the index at 81 % of its slots, as format 5
 *     holds it (fewer keys in their second place: 5 % against format 5's 21 %);
 *   - two places a key (the second from a second mix of the hash), the second bucket
 *     prefetched before the first is read;
 *   - records at 8-byte offsets in a log, in insertion order: a 9-byte header (flags,
 *     key length - 1, value length, version, checksum), the key, the value;
 *   - the read: R1 the geometry word (acquire), R3 the bucket's seqlock read (sequence
 *     acquire, odd: wait; the tags compared as vectors; for each equal tag, the record's
 *     offset bounds-checked, its second and third lines prefetched, its header checked,
 *     the key compared, the value copied; acquire fence; sequence again), R4 the second
 *     bucket, R5 the geometry word again, then the handle's hit counter.
 *   - the set (`Writer.overwriteHinted`, format 5's common set): W0 the key's hash and
 *     the value's checksum (`KeyHash.checksum`'s shape: one multiply per 16 bytes), the
 *     first bucket and the header's write line prefetched for writing; the lock word
 *     taken with a compare-and-swap; W1 the intent word and the geometry checked; W2 the
 *     tags compared as vectors, the record's offset bounds-checked, its header checked
 *     and its key compared; W3 intent = 1, a version from the header's counter, the
 *     bucket's sequence made odd (release fence), the header's version and checksum and
 *     the value written, the sequence made even (release store), the set counted,
 *     intent = 0; the lock released with an exchange (its waiters bit read).
 * What it leaves out: partitions (one), linear hashing (a multiply-shift range), expiry,
 * hit bits, the busy wait's bound, growth's second look, the set's hint and the handle's
 * table of recent slots (W2 here scans both buckets under the lock). Each costs our Swift
 * read or set a few instructions; none adds a cache miss.
 *
 *   gcc -O2 -I ../shared/peers -o /tmp/twoload_c scripts/ceiling/twoload_c.c -lm
 *   KEYS=100000 READ_PCT=100 DURATION=3 /tmp/twoload_c   # prints the harness's line
 * scripts/ceiling/run.sh runs it beside limit_c and cache-stress, interleaved.
 */
#include "common.h"

#include <emmintrin.h>
#include <fcntl.h>

#define PART_HDR 4096
#define BUCKET 64
#define GROUP 320
#define SLOTS 10
#define OFFSET_MASK ((1u << 29) - 1)
#define REC_HDR 9
#define KIND_ENTRY 0x00

static char PATH[512];
static int FD = -1;
static char *BASE;
static uint64_t NBUCKETS, INDEX_BYTES, LOG_BASE, LOG_BYTES, MAPLEN;
static _Atomic uint64_t *GEOMETRY;
static uint64_t HITS;
/* The partition header's write line (format 5's line 1): the lock word, the intent word,
 * the version counter and the set counter. */
#define LOCK_OFF 64
#define INTENT_OFF 72
#define VERSION_OFF 80
#define SETS_OFF 88
#define MY_TOKEN 0x401u /* process-table slot 0, generation 1: any non-zero word */

/* limit_c's hash, so that both sides hash alike. */
static inline uint64_t mix(uint64_t x) {
  __uint128_t m = (__uint128_t)x * 0x9E3779B97F4A7C15ull;
  return (uint64_t)m ^ (uint64_t)(m >> 64);
}
static inline uint64_t hash_key(const char *k, size_t n) {
  uint64_t h = 0x243F6A8885A308D3ull ^ n;
  while (n >= 8) {
    uint64_t x;
    memcpy(&x, k, 8);
    h = mix(h ^ x);
    k += 8;
    n -= 8;
  }
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) x |= (uint64_t)(unsigned char)k[i] << (8 * i);
  return mix(h ^ x ^ 0x5851F42D4C957F2Dull) | 1;
}
static inline uint64_t mix2(uint64_t x, uint64_t y) {
  __uint128_t m = (__uint128_t)x * y;
  return (uint64_t)m ^ (uint64_t)(m >> 64);
}
static inline uint64_t range(uint64_t h, uint64_t n) { return (uint64_t)(((__uint128_t)h * n) >> 64); }
static inline uint16_t tag_of(uint64_t h) {
  uint16_t t = (uint16_t)(h >> 46);
  return t ? t : 1;
}
/* Bucket b's address: groups of four buckets and a ghost line. */
static inline char *bucket_at(uint64_t b) { return BASE + PART_HDR + (b >> 2) * GROUP + (b & 3) * BUCKET; }
/* The first place from the hash's bits 0..45 (moved to the top, where `range` looks), so
 * that it is independent of the tag (bits 46..61). */
static inline void places(uint64_t h, uint64_t *first, uint64_t *second) {
  *first = range(h << 18 | h >> 46, NBUCKETS);
  *second = range(mix2(h ^ 0x9E3779B97F4A7C15ull, 0xD6E8FEB86659FD93ull), NBUCKETS);
}

static inline unsigned tag_matches(const char *b, uint16_t tag) {
  __m128i t = _mm_set1_epi16((short)tag);
  __m128i a = _mm_loadu_si128((const __m128i *)(b + 4)), c = _mm_loadu_si128((const __m128i *)(b + 20));
  __m128i p = _mm_packs_epi16(_mm_cmpeq_epi16(a, t), _mm_cmpeq_epi16(c, t));
  return (unsigned)_mm_movemask_epi8(p) & 0x3FF;
}

/* The value's copy. gcc turns a `memcpy` of at most 255 bytes into `rep movsq`, whose
 * start-up cost was most of a get; a value of up to 64 bytes is copied as four 16-byte
 * vectors instead (reading past the record stays in the mapping: the offset is at most
 * MAPLEN - 192; the harness's buffer has room for the 64 bytes written). */
static inline void copy_value(char *out, const unsigned char *from, size_t n) {
  if (n > 64) { memcpy(out, from, n); return; }
  for (int i = 0; i < 64; i += 16) _mm_storeu_si128((__m128i *)(out + i), _mm_loadu_si128((const __m128i *)(from + i)));
}

/* The record that slot `slot` of bucket `b` names, when it is an entry of `key`: its
 * offset inside the log, its header checked, its key compared; 0 otherwise. With
 * `prefetch` (a get's), the record's second and third lines are fetched the moment its
 * offset is known. */
static inline unsigned char *record_of(const char *b, unsigned slot, const char *key, int prefetch) {
  uint32_t word = __atomic_load_n((const uint32_t *)(b + 24 + 4 * slot), __ATOMIC_RELAXED);
  uint64_t off = (uint64_t)(word & OFFSET_MASK) << 3;
  if (off < LOG_BASE || off > MAPLEN - 192) return 0;
  unsigned char *r = (unsigned char *)BASE + off;
  if (prefetch) {
    __builtin_prefetch(r + 64, 0, 3);
    __builtin_prefetch(r + 127, 0, 3);
  }
  if (r[0] != KIND_ENTRY) return 0;
  size_t kl = (size_t)r[1] + 1, vl = r[2];
  if (kl != KEYLEN || kl + vl > MAPLEN - off - REC_HDR) return 0;
  return memcmp(r + REC_HDR, key, KEYLEN) == 0 ? r : 0;
}

/* R3 for one bucket: 1 found (value copied), 0 not there, -1 changed meanwhile. */
static inline int read_bucket(const char *b, uint16_t tag, const char *key, char *out, size_t *olen) {
  _Atomic uint32_t *seq = (_Atomic uint32_t *)b;
  uint32_t s1 = atomic_load_explicit(seq, memory_order_acquire);
  if (s1 & 1) return -1;
  int found = 0;
  for (unsigned m = tag_matches(b, tag); m; m &= m - 1) {
    const unsigned char *r = record_of(b, (unsigned)__builtin_ctz(m), key, 1);
    if (!r) continue;
    copy_value(out, r + REC_HDR + KEYLEN, r[2]);
    *olen = r[2];
    found = 1;
    break;
  }
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(seq, memory_order_relaxed) != s1) return -1;
  return found;
}

static int tl_get(const char *key, char *out, size_t *olen) {
  uint64_t h = hash_key(key, KEYLEN), first, second;
  for (;;) {
    uint64_t g = atomic_load_explicit(GEOMETRY, memory_order_acquire); /* R1 */
    places(h, &first, &second);
    if (second != first) __builtin_prefetch(bucket_at(second), 0, 3);
    uint16_t tag = tag_of(h);
    int f = read_bucket(bucket_at(first), tag, key, out, olen); /* R3 */
    if (f == 0 && second != first) f = read_bucket(bucket_at(second), tag, key, out, olen); /* R4 */
    if (f < 0) { __builtin_ia32_pause(); continue; }
    if (atomic_load_explicit(GEOMETRY, memory_order_relaxed) != g) continue; /* R5 */
    if (f) HITS++;
    return f;
  }
}

/* The value's checksum, bound to the key's hash and length (`KeyHash.checksum`: wyhash's
 * shape, one multiply per 16 bytes, folded to 16 bits). */
static inline uint16_t checksum(const char *v, size_t n, uint64_t h) {
  const uint64_t p1 = 0xA0761D6478BD642Full, p2 = 0xE7037ED1A0B428DBull;
  uint64_t s = h ^ ((uint64_t)n * 0x9E3779B97F4A7C15ull), x = s ^ ((uint64_t)n * p1), a, b;
  size_t i = 0;
  for (; i + 16 < n; i += 16) {
    memcpy(&a, v + i, 8);
    memcpy(&b, v + i + 8, 8);
    x = mix2(a ^ p1, b ^ x);
  }
  memcpy(&a, v + n - 16, 8);
  memcpy(&b, v + n - 8, 8);
  uint64_t w = mix2(p1 ^ n, mix2(a ^ p1, b ^ x ^ p2));
  uint32_t w32 = (uint32_t)(w ^ (w >> 32));
  return (uint16_t)(w32 ^ (w32 >> 16));
}

/* W2 for one bucket: the record of `key` it names, 0 when none. Under the lock: no
 * sequence read. */
static inline unsigned char *find_record(char *b, uint16_t tag, const char *key) {
  for (unsigned m = tag_matches(b, tag); m; m &= m - 1) {
    unsigned char *r = record_of(b, (unsigned)__builtin_ctz(m), key, 0);
    if (r) return r;
  }
  return 0;
}

/* Format 5's common set, an overwrite of the same length (see the top); 0 when the key is
 * not held or its value has another length (the workload never asks for that). */
static int tl_set(const char *key, const char *val, size_t vlen) {
  uint64_t h = hash_key(key, KEYLEN), first, second; /* W0 */
  places(h, &first, &second);
  char *b = bucket_at(first);
  __builtin_prefetch(b, 1, 3);
  __builtin_prefetch(BASE + LOCK_OFF, 1, 3);
  uint16_t sum = checksum(val, vlen, h), tag = tag_of(h);
  _Atomic uint32_t *lock = (_Atomic uint32_t *)(BASE + LOCK_OFF);
  uint32_t free_word = 0;
  while (!atomic_compare_exchange_weak_explicit(lock, &free_word, MY_TOKEN, memory_order_acquire,
                                                memory_order_relaxed)) {
    free_word = 0;
    __builtin_ia32_pause();
  }
  uint64_t *intent = (uint64_t *)(BASE + INTENT_OFF);
  int stored = 0;
  if (*intent == 0 && atomic_load_explicit(GEOMETRY, memory_order_relaxed) == NBUCKETS) { /* W1 */
    unsigned char *r = find_record(b, tag, key);                                          /* W2 */
    if (!r && second != first) r = find_record(b = bucket_at(second), tag, key);
    if (r && r[2] == vlen) { /* W3 */
      *intent = 1;
      uint64_t *counter = (uint64_t *)(BASE + VERSION_OFF);
      uint32_t version = (uint32_t)++*counter;
      _Atomic uint32_t *seq = (_Atomic uint32_t *)b;
      uint32_t s0 = atomic_load_explicit(seq, memory_order_relaxed);
      atomic_store_explicit(seq, s0 + 1, memory_order_relaxed);
      atomic_thread_fence(memory_order_release);
      memcpy(r + 3, &version, 4);
      memcpy(r + 7, &sum, 2);
      memcpy(r + REC_HDR + KEYLEN, val, vlen);
      atomic_store_explicit(seq, s0 + 2, memory_order_release);
      ++*(uint64_t *)(BASE + SETS_OFF);
      *intent = 0;
      stored = 1;
    }
  }
  if (atomic_exchange_explicit(lock, 0, memory_order_release) & 0x80000000u) _exit(3); /* no waiters here */
  return stored;
}

static void tl_map(int create) {
  FD = open(PATH, O_RDWR | (create ? O_CREAT | O_TRUNC : 0), 0600);
  if (FD < 0) { perror(PATH); exit(1); }
  if (create && ftruncate(FD, (off_t)MAPLEN) != 0) { perror("ftruncate"); exit(1); }
  BASE = mmap(NULL, MAPLEN, PROT_READ | PROT_WRITE, MAP_SHARED, FD, 0);
  if (BASE == MAP_FAILED) { perror("mmap"); exit(1); }
  GEOMETRY = (_Atomic uint64_t *)BASE;
}

static inline int free_slot(const char *b) {
  for (int s = 0; s < SLOTS; s++)
    if (*(const uint16_t *)(b + 4 + 2 * s) == 0) return s;
  return -1;
}

/* Makes room in full bucket `from` (of index `at`) by moving one of its entries to that
 * entry's other place, as format 5's displacement does; the slot freed, or -1. */
static int displace(char *from, uint64_t at) {
  for (int s = 0; s < SLOTS; s++) {
    uint64_t off = (uint64_t)(*(uint32_t *)(from + 24 + 4 * s) & OFFSET_MASK) << 3;
    uint64_t h = hash_key(BASE + off + REC_HDR, KEYLEN), first, second;
    places(h, &first, &second);
    uint64_t other = first == at ? second : first;
    if (other == at) continue;
    char *to = bucket_at(other);
    int t = free_slot(to);
    if (t < 0) continue;
    *(uint16_t *)(to + 4 + 2 * t) = *(uint16_t *)(from + 4 + 2 * s);
    *(uint32_t *)(to + 24 + 4 * t) = *(uint32_t *)(from + 24 + 4 * s);
    *(uint16_t *)(from + 4 + 2 * s) = 0;
    return s;
  }
  return -1;
}

/* Stores a record at the log's head and names it in a free slot of the key's first
 * bucket, else of its second, else of either after a displacement; 0 when none. */
static int tl_insert(const char *key, const char *val, uint64_t *head) {
  uint64_t h = hash_key(key, KEYLEN), first, second;
  places(h, &first, &second);
  char *b = bucket_at(first);
  int slot = free_slot(b);
  if (slot < 0) slot = free_slot(b = bucket_at(second));
  if (slot < 0) slot = displace(b = bucket_at(first), first);
  if (slot < 0) slot = displace(b = bucket_at(second), second);
  if (slot < 0) return 0;
  uint64_t off = *head;
  unsigned char *r = (unsigned char *)BASE + off;
  r[0] = KIND_ENTRY;
  r[1] = KEYLEN - 1;
  r[2] = (unsigned char)P.value;
  memset(r + 3, 0, 6);
  memcpy(r + REC_HDR, key, KEYLEN);
  memcpy(r + REC_HDR + KEYLEN, val, (size_t)P.value);
  *head = (off + REC_HDR + KEYLEN + (uint64_t)P.value + 7) & ~7ull;
  *(uint16_t *)(b + 4 + 2 * slot) = tag_of(h);
  *(uint32_t *)(b + 24 + 4 * slot) = (uint32_t)(off >> 3);
  return 1;
}

static void peer_prefill(void) {
#ifdef SWIFT_SET
  PEER_NAME = "twoload_swift";
#else
  PEER_NAME = "twoload_c";
#endif
  if (P.value > 255) { fprintf(stderr, "twoload_c: VALUE must be at most 255\n"); exit(2); }
  const char *dir = getenv("DIR");
  if (!dir || !*dir) dir = "/dev/shm";
  snprintf(PATH, sizeof PATH, "%s/twoload_c.%d.cache", dir, (int)getpid());
  /* Format 5 holds its index at about 81 % of its slots. */
  uint64_t slots = (uint64_t)((double)P.keys / 0.81) + SLOTS;
  NBUCKETS = (slots + SLOTS - 1) / SLOTS;
  NBUCKETS = (NBUCKETS + 3) & ~3ull;
  INDEX_BYTES = NBUCKETS / 4 * GROUP;
  LOG_BASE = PART_HDR + INDEX_BYTES;
  LOG_BYTES = ((uint64_t)P.keys * (REC_HDR + KEYLEN + (uint64_t)P.value + 8) + 4096);
  MAPLEN = LOG_BASE + LOG_BYTES + 256;
  if (MAPLEN >> 3 > OFFSET_MASK) { fprintf(stderr, "twoload_c: more than 4 GiB; fewer KEYS\n"); exit(2); }
  tl_map(1);
  atomic_store(GEOMETRY, NBUCKETS);
  char *val = malloc((size_t)P.value + 16);
  uint64_t head = LOG_BASE, dropped = 0;
  for (long i = 0; i < P.keys; i++) {
    make_value(val, (uint32_t)i, 0);
    if (!tl_insert(key_of((uint32_t)i), val, &head)) dropped++;
  }
  free(val);
  uint64_t in_second = 0;
  for (long i = 0; i < P.keys; i++) {
    uint64_t h = hash_key(key_of((uint32_t)i), KEYLEN), first, second;
    places(h, &first, &second);
    size_t len;
    char tmp[256];
    if (read_bucket(bucket_at(first), tag_of(h), key_of((uint32_t)i), tmp, &len) != 1) in_second++;
  }
  if (dropped) {
    fprintf(stderr, "twoload_c: %llu keys found both buckets full\n", (unsigned long long)dropped);
    exit(1);
  }
  char *buf = malloc(256);
  size_t len;
  for (long i = 0; i < P.keys; i++)
    if (!tl_get(key_of((uint32_t)i), buf, &len) || !full_ok((uint32_t)i, buf, len)) {
      fprintf(stderr, "twoload_c: prefill verify failed at %ld\n", i);
      exit(1);
    }
  free(buf);
  munmap(BASE, MAPLEN);
  close(FD);
  snprintf(PEER_EXTRA, sizeof PEER_EXTRA, "dir=%s buckets=%llu second_places=%.3f index_mib=%.1f log_mib=%.1f", dir,
           (unsigned long long)NBUCKETS, (double)in_second / (double)P.keys, (double)INDEX_BYTES / 1048576.0,
           (double)(head - LOG_BASE) / 1048576.0);
}
#ifdef SWIFT_SET
/* twoload_swift.swift: the same set in Swift (`run.sh` builds it with -DSWIFT_SET). */
extern void tl_swift_init(void *base, long maplen, uint64_t nbuckets, long logbase);
extern int tl_set_swift(const char *key, const char *val, long vlen);
#endif
static void peer_worker_init(int wid) {
  (void)wid;
  tl_map(0);
#ifdef SWIFT_SET
  tl_swift_init(BASE, (long)MAPLEN, NBUCKETS, (long)LOG_BASE);
#endif
}
static int peer_get(uint32_t kidx, const char *key, char *buf, size_t *len) {
  (void)kidx;
  return tl_get(key, buf, len);
}
static void peer_set(uint32_t kidx, const char *key, const char *val) {
  (void)kidx;
#ifdef SWIFT_SET
  if (!tl_set_swift(key, val, (long)P.value)) {
#else
  if (!tl_set(key, val, (size_t)P.value)) {
#endif
    fprintf(stderr, "twoload_c: a set found no record of its key and length\n");
    _exit(3);
  }
}
static void peer_worker_fini(void) {
  munmap(BASE, MAPLEN);
  close(FD);
}
static void peer_cleanup(void) { unlink(PATH); }

int main(int argc, char **argv) { return harness_main(argc, argv); }
