/* callgrind_cget.c - `scripts/callgrind.sh`'s loop of C ABI gets: N gets (mc_get) over
 * 1,000 keys of 12 bytes with 48-byte values, as `mc-test-helper insn-loop readb` makes
 * them through Swift (`copyBytes(forKey:into:)` by byte key), so that the two counts
 * compare the C ABI's layer with the Swift call's.
 *
 *   cc -O2 -I Sources/CMappedCacheABI/include scripts/callgrind_cget.c \
 *      -L .build/release -lmappedcache -o cget && ./cget N PATH
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mappedcache.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: cget N PATH\n");
    return 64;
  }
  long n = atol(argv[1]);
  mc_options o;
  mc_options_init(&o);
  o.capacity = 16u << 20;
  o.average_entry_size = 80;
  mc_cache *cache;
  if (mc_open(argv[2], &o, &cache) != MC_OK) {
    fprintf(stderr, "error: cannot open %s\n", argv[2]);
    return 1;
  }
  static char keys[1000][12];
  char value[48];
  memset(value, 7, sizeof value);
  for (int i = 0; i < 1000; i++) {
    char k[13];
    snprintf(k, sizeof k, "key:%08d", i);
    memcpy(keys[i], k, 12);
    if (mc_set(cache, keys[i], 12, value, sizeof value, 0) != MC_OK) return 1;
  }
  char out[256];
  size_t length = 0, sink = 0;
  for (long i = 0; i < n; i++) {
    if (mc_get(cache, keys[i % 1000], 12, out, sizeof out, &length) == MC_OK) sink += length;
  }
  printf("sink %zu\n", sink);
  return mc_close(cache) == MC_OK ? 0 : 1;
}
