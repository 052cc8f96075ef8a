// The C ABI's read cost against Swift's own copyBytes(forKey:into:) (scripts/python-bench.sh
// runs both, interleaved): mc_get of 64-byte values over KEYS keys ("key-%08d") in a
// random order fixed by the seed, in one process; prints "c-get NS ns/get" (the best of 3
// passes of N gets). With "fill", first stores the keys (a cache of bytes, created).
//
//   bench_get PATH KEYS N [fill]
#define _GNU_SOURCE
#include "mappedcache.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 4) return 64;
  size_t keys = strtoul(argv[2], NULL, 10), n = strtoul(argv[3], NULL, 10);
  mc_options o;
  mc_options_init(&o);
  o.capacity = 64u << 20;
  o.average_entry_size = 80;
  o.value_type = "bytes";
  mc_cache *c;
  if (mc_open(argv[1], &o, &c) != MC_OK) {
    fprintf(stderr, "open: %s\n", mc_last_error());
    return 2;
  }
  // Each key in 16 bytes, its length in the last one: one cache line holds the key and its
  // length, as a Swift String holds a small string and its count in its 16 bytes.
  char *names = malloc(keys * 16);
  for (size_t i = 0; i < keys; i++) names[i * 16 + 15] = (char)snprintf(names + i * 16, 15, "key-%08zu", i);
  if (argc > 4 && strcmp(argv[4], "fill") == 0) {
    char value[64];
    memset(value, 'v', sizeof value);
    for (size_t i = 0; i < keys; i++) mc_set(c, names + i * 16, (size_t)names[i * 16 + 15], value, sizeof value, 0);
  }
  // The order every reader uses: xorshift64 from a fixed seed (mc-test-helper bench-copybytes too).
  uint32_t *order = malloc(n * sizeof(uint32_t));
  uint64_t x = 0x9E3779B97F4A7C15u;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    order[i] = (uint32_t)(x % keys);
  }
  char buf[256];
  size_t len, hits = 0;
  double best = 1e30;
  for (int pass = 0; pass < 3; pass++) {
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
      const char *key = names + (size_t)order[i] * 16;
      if (mc_get(c, key, (size_t)key[15], buf, sizeof buf, &len) == MC_OK) hits += len;
    }
    double ns = (double)(now_ns() - t0) / (double)n;
    if (ns < best) best = ns;
  }
  printf("c-get %.1f ns/get (%zu bytes read)\n", best, hits);
  mc_close(c);
  return 0;
}
