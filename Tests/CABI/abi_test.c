// The C ABI's own test program: every function of mappedcache.h, called as a C program
// calls it, including with bad arguments (NULL pointers, wrong lengths, closed and
// forged handles), which must give an error code and never crash. CABITests builds it
// with cc against libmappedcache.so and runs it: abi_test PATH_PREFIX. Each check that
// fails prints its line; the last line is "abi_test: N checks, F failed".
#define _GNU_SOURCE
#include "mappedcache.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int checks, failures;

#define CHECK(cond)                                                                                  \
  do {                                                                                               \
    checks++;                                                                                        \
    if (!(cond)) {                                                                                   \
      failures++;                                                                                    \
      fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond, mc_last_error()); \
    }                                                                                                \
  } while (0)

#define CHECK_STATUS(call, want)                                                                     \
  do {                                                                                               \
    int got_ = (call);                                                                               \
    checks++;                                                                                        \
    if (got_ != (want)) {                                                                            \
      failures++;                                                                                    \
      fprintf(stderr, "FAIL %s:%d: %s returned %s, not %s (last error: %s)\n", __FILE__, __LINE__, #call, \
              mc_status_name(got_), mc_status_name(want), mc_last_error());                          \
    }                                                                                                \
  } while (0)

static char prefix[512];

static const char *path_for(const char *tag) {
  static char paths[16][600];
  static int next;
  char *p = paths[next++ % 16];
  snprintf(p, 600, "%s-%s.mcache", prefix, tag);
  unlink(p);
  return p;
}

static mc_cache *open_typed(const char *path, const char *type) {
  mc_options o;
  mc_options_init(&o);
  o.capacity = 4u << 20;
  o.value_type = type;
  mc_cache *c = NULL;
  int s = mc_open(path, &o, &c);
  if (s != MC_OK) {
    fprintf(stderr, "open %s as %s: %s: %s\n", path, type ? type : "(file's type)", mc_status_name(s), mc_last_error());
    exit(2);
  }
  return c;
}

static int set_str(mc_cache *c, const char *k, const char *v, double ttl) {
  return mc_set(c, k, strlen(k), v, strlen(v), ttl);
}

static int value_is(mc_cache *c, const char *k, const char *want) {
  char buf[256];
  size_t n = 0;
  if (mc_get(c, k, strlen(k), buf, sizeof buf, &n) != MC_OK) return 0;
  return n == strlen(want) && memcmp(buf, want, n) == 0;
}

static void test_versions_and_names(void) {
  CHECK(mc_abi_version() == MC_ABI_VERSION);
  CHECK(strlen(mc_version()) > 0);
  CHECK(mc_file_format_version() > 0);
  CHECK(strcmp(mc_status_name(MC_E_KEY_TOO_LARGE), "MC_E_KEY_TOO_LARGE") == 0);
  CHECK(strcmp(mc_status_name(MC_OK), "MC_OK") == 0);
  CHECK(strcmp(mc_status_name(12345), "MC_UNKNOWN") == 0);
  for (int s = MC_E_OTHER; s <= MC_STALE; s++) CHECK(strcmp(mc_status_name(s), "MC_UNKNOWN") != 0);
}

static void test_open_arguments(void) {
  mc_cache *c = (mc_cache *)1;
  mc_options o;
  CHECK_STATUS(mc_open(NULL, NULL, &c), MC_E_INVALID_ARGUMENT);
  CHECK(c == NULL);
  CHECK(strstr(mc_last_error(), "path") != NULL);
  CHECK_STATUS(mc_open(path_for("x"), NULL, NULL), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_open("", NULL, &c), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_open("\xff\xfe", NULL, &c), MC_E_INVALID_ARGUMENT);
  mc_options_init(&o);
  o.struct_size = 0;
  CHECK_STATUS(mc_open(path_for("x"), &o, &c), MC_E_INVALID_ARGUMENT);
  CHECK(strstr(mc_last_error(), "struct_size") != NULL);
  mc_options_init(&o);
  o.flags = 0x8000;
  CHECK_STATUS(mc_open(path_for("x"), &o, &c), MC_E_INVALID_ARGUMENT);
  mc_options_init(&o);
  o.value_type = "codable:Foo";
  CHECK_STATUS(mc_open(path_for("x"), &o, &c), MC_E_INVALID_ARGUMENT);
  mc_options_init(&o);
  o.capacity = 1000;  // below the 1 MiB minimum
  CHECK_STATUS(mc_open(path_for("x"), &o, &c), MC_E_INVALID_ARGUMENT);
  mc_options_init(&o);
  o.flags = MC_OPEN_NO_CREATE;
  CHECK_STATUS(mc_open("/nonexistent-dir-mc/x.mcache", &o, &c), MC_E_SYSTEM);
  CHECK(mc_last_errno() == ENOENT);
  mc_options_init(NULL);  // must not crash

  // A file that is not a cache is left as it was.
  const char *junk = path_for("junk");
  FILE *f = fopen(junk, "w");
  for (int i = 0; i < 5000; i++) fputs("not a cache ", f);
  fclose(f);
  CHECK_STATUS(mc_open(junk, NULL, &c), MC_E_NOT_A_CACHE_FILE);
  f = fopen(junk, "r");
  char head[12];
  CHECK(fread(head, 1, 12, f) == 12 && memcmp(head, "not a cache ", 12) == 0);
  fclose(f);
  unlink(junk);
}

static void test_entries(void) {
  mc_cache *c = open_typed(path_for("entries"), NULL);
  char buf[256];
  size_t n = 0;
  uint64_t version = 0, version2 = 0;
  double ttl = 0;

  mc_info info;
  info.struct_size = sizeof info;
  CHECK_STATUS(mc_info_get(c, &info), MC_OK);
  CHECK(strcmp(info.value_type, "bytes") == 0);
  CHECK(info.max_key_size == 250 && info.writable == 1 && info.capacity == 4u << 20);

  CHECK_STATUS(set_str(c, "greeting", "hello", 0), MC_OK);
  CHECK(value_is(c, "greeting", "hello"));
  CHECK_STATUS(mc_get(c, "missing", 7, buf, sizeof buf, &n), MC_NOT_FOUND);
  // Too small a buffer: the length, nothing copied; a capacity of 0 asks for the length.
  memset(buf, 'z', sizeof buf);
  CHECK_STATUS(mc_get(c, "greeting", 8, buf, 3, &n), MC_E_BUFFER_TOO_SMALL);
  CHECK(n == 5 && buf[0] == 'z');
  CHECK_STATUS(mc_get(c, "greeting", 8, NULL, 0, &n), MC_E_BUFFER_TOO_SMALL);
  CHECK(n == 5);
  // Empty values are values.
  CHECK_STATUS(mc_set(c, "empty", 5, NULL, 0, 0), MC_OK);
  CHECK_STATUS(mc_get(c, "empty", 5, NULL, 0, &n), MC_OK);
  CHECK(n == 0);

  void *p = NULL;
  CHECK_STATUS(mc_get_alloc(c, "greeting", 8, &p, &n), MC_OK);
  CHECK(p != NULL && n == 5 && memcmp(p, "hello", 5) == 0);
  mc_free(p);
  mc_free(NULL);
  char big[5000];
  memset(big, 'b', sizeof big);
  CHECK_STATUS(mc_set(c, "big", 3, big, sizeof big, 0), MC_OK);
  CHECK_STATUS(mc_get_alloc(c, "big", 3, &p, &n), MC_OK);
  CHECK(n == sizeof big && memcmp(p, big, n) == 0);
  mc_free(p);
  CHECK_STATUS(mc_get_alloc(c, "missing", 7, &p, &n), MC_NOT_FOUND);
  CHECK(p == NULL);

  // add, replace, compare-and-swap.
  CHECK_STATUS(mc_add(c, "greeting", 8, "x", 1, 0), MC_NOT_STORED);
  CHECK_STATUS(mc_add(c, "new", 3, "n1", 2, 0), MC_OK);
  CHECK_STATUS(mc_replace(c, "absent", 6, "x", 1, 0), MC_NOT_STORED);
  CHECK_STATUS(mc_replace(c, "new", 3, "n2", 2, 0), MC_OK);
  CHECK(value_is(c, "new", "n2"));
  CHECK_STATUS(mc_gets(c, "new", 3, buf, sizeof buf, &n, &version), MC_OK);
  CHECK(n == 2 && memcmp(buf, "n2", 2) == 0);
  CHECK_STATUS(mc_cas(c, "new", 3, "n3", 2, 0, version), MC_OK);
  CHECK_STATUS(mc_cas(c, "new", 3, "n4", 2, 0, version), MC_NOT_STORED);  // the version moved on
  CHECK(value_is(c, "new", "n3"));
  CHECK_STATUS(mc_gets(c, "new", 3, buf, sizeof buf, &n, &version2), MC_OK);
  CHECK(version2 != version);
  CHECK_STATUS(mc_gets(c, "missing", 7, buf, sizeof buf, &n, &version), MC_NOT_FOUND);
  CHECK_STATUS(mc_cas(c, "missing", 7, "x", 1, 0, version2), MC_NOT_STORED);

  // Expiry, ttl, touch, exists, delete.
  CHECK_STATUS(mc_ttl(c, "greeting", 8, &ttl), MC_OK);
  CHECK(isinf(ttl));
  CHECK_STATUS(set_str(c, "brief", "v", 60), MC_OK);
  CHECK_STATUS(mc_ttl(c, "brief", 5, &ttl), MC_OK);
  CHECK(ttl > 59 && ttl <= 60);
  CHECK_STATUS(mc_touch(c, "brief", 5, 0.15), MC_OK);
  CHECK_STATUS(mc_ttl(c, "brief", 5, &ttl), MC_OK);
  CHECK(ttl > 0 && ttl <= 0.15);
  CHECK_STATUS(mc_exists(c, "brief", 5), MC_OK);
  usleep(250 * 1000);
  CHECK_STATUS(mc_exists(c, "brief", 5), MC_NOT_FOUND);
  CHECK_STATUS(mc_get(c, "brief", 5, buf, sizeof buf, &n), MC_NOT_FOUND);
  CHECK_STATUS(mc_ttl(c, "brief", 5, &ttl), MC_NOT_FOUND);
  CHECK_STATUS(mc_touch(c, "brief", 5, 10), MC_NOT_FOUND);
  CHECK_STATUS(mc_delete(c, "greeting", 8), MC_OK);
  CHECK_STATUS(mc_delete(c, "greeting", 8), MC_NOT_FOUND);

  // Counters in a cache of bytes: ASCII decimal.
  int64_t r = 0;
  CHECK_STATUS(mc_incr(c, "hits", 4, 1, 0, 0, &r), MC_OK);
  CHECK(r == 1);
  CHECK_STATUS(mc_incr(c, "hits", 4, 41, 0, 0, &r), MC_OK);
  CHECK(r == 42 && value_is(c, "hits", "42"));
  CHECK_STATUS(mc_incr(c, "hits", 4, -50, 0, 0, &r), MC_OK);
  CHECK(r == -8 && value_is(c, "hits", "-8"));
  CHECK_STATUS(mc_incr(c, "fresh", 5, 5, 100, 0, NULL), MC_OK);
  CHECK(value_is(c, "fresh", "105"));
  CHECK_STATUS(set_str(c, "word", "abc", 0), MC_OK);
  CHECK_STATUS(mc_incr(c, "word", 4, 1, 0, 0, &r), MC_E_NOT_AN_INTEGER);
  CHECK(value_is(c, "word", "abc"));
  CHECK_STATUS(set_str(c, "top", "9223372036854775807", 0), MC_OK);
  CHECK_STATUS(mc_incr(c, "top", 3, 1, 0, 0, &r), MC_E_INVALID_ARGUMENT);
  CHECK(strstr(mc_last_error(), "overflow") != NULL);
  CHECK(value_is(c, "top", "9223372036854775807"));
  // A counter keeps its expiry unless given one.
  CHECK_STATUS(set_str(c, "ttlcount", "1", 30), MC_OK);
  CHECK_STATUS(mc_incr(c, "ttlcount", 8, 1, 0, 0, &r), MC_OK);
  CHECK_STATUS(mc_ttl(c, "ttlcount", 8, &ttl), MC_OK);
  CHECK(ttl > 29 && ttl <= 30);
  CHECK_STATUS(mc_close(c), MC_OK);
}

static void test_bad_arguments(void) {
  const char *path = path_for("bad");
  mc_cache *c = open_typed(path, NULL);
  char buf[64];
  size_t n;
  char long_key[300];
  memset(long_key, 'k', sizeof long_key);

  CHECK_STATUS(mc_set(c, NULL, 3, "v", 1, 0), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_set(c, "", 0, "v", 1, 0), MC_E_EMPTY_KEY);
  CHECK_STATUS(mc_set(c, long_key, 251, "v", 1, 0), MC_E_KEY_TOO_LARGE);
  CHECK(strstr(mc_last_error(), "251") != NULL);
  CHECK_STATUS(mc_set(c, long_key, 250, "v", 1, 0), MC_OK);
  // A length that cannot be true is refused before the key is read.
  CHECK_STATUS(mc_get(c, "k", SIZE_MAX, buf, sizeof buf, &n), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_get(c, "k", (size_t)1 << 40, buf, sizeof buf, &n), MC_E_KEY_TOO_LARGE);
  CHECK_STATUS(mc_set(c, "\xc3\x28", 2, "v", 1, 0), MC_E_INVALID_KEY);
  CHECK_STATUS(mc_get(c, "\xff\x01k", 3, buf, sizeof buf, &n), MC_E_INVALID_KEY);
  CHECK_STATUS(mc_set(c, "k", 1, NULL, 5, 0), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_set(c, "k", 1, "v", (size_t)1 << 40, 0), MC_E_VALUE_TOO_LARGE);
  CHECK_STATUS(mc_set(c, "k", 1, "v", SIZE_MAX, 0), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_set(c, "k", 1, "v", 1, -1), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_set(c, "k", 1, "v", 1, NAN), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_get(c, "k", 1, NULL, 10, &n), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_get(c, "k", 1, buf, sizeof buf, NULL), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_gets(c, "k", 1, buf, sizeof buf, &n, NULL), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_ttl(c, "k", 1, NULL), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_get_alloc(c, "k", 1, NULL, &n), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_touch(c, "k", 1, -5), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_info_get(c, NULL), MC_E_INVALID_ARGUMENT);
  mc_info info = {0};
  CHECK_STATUS(mc_info_get(c, &info), MC_E_INVALID_ARGUMENT);  // struct_size not set
  CHECK_STATUS(mc_stats_get(c, NULL), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_foreach(c, 0, NULL, NULL), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_get_many(c, 2, NULL, NULL, NULL, NULL, NULL, NULL), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_set_many(c, 1, NULL, NULL, NULL, NULL, 0), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_delete_many(c, 3, NULL, NULL, NULL), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_get_many(c, 0, NULL, NULL, NULL, NULL, NULL, NULL), MC_OK);
  mc_claim *claim = (mc_claim *)1;
  CHECK_STATUS(mc_get_or_claim(c, "k", 1, -1, 0, buf, sizeof buf, &n, &claim), MC_E_INVALID_ARGUMENT);
  CHECK(claim == NULL);
  CHECK_STATUS(mc_get_or_claim(c, "k", 1, 0, 0x80, buf, sizeof buf, &n, &claim), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_publish(NULL, "v", 1, 0), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_abandon((mc_claim *)0x2000000100000007), MC_E_CLOSED);

  // Closed, forged and mixed-up handles.
  CHECK_STATUS(mc_close(c), MC_OK);
  CHECK_STATUS(mc_get(c, "k", 1, buf, sizeof buf, &n), MC_E_CLOSED);
  CHECK(strstr(mc_last_error(), "closed") != NULL);
  CHECK_STATUS(mc_set(c, "k", 1, "v", 1, 0), MC_E_CLOSED);
  CHECK_STATUS(mc_close(c), MC_E_CLOSED);
  CHECK_STATUS(mc_close(NULL), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_get(NULL, "k", 1, buf, sizeof buf, &n), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_get((mc_cache *)0x1234, "k", 1, buf, sizeof buf, &n), MC_E_CLOSED);
  CHECK_STATUS(mc_get((mc_cache *)buf, "k", 1, buf, sizeof buf, &n), MC_E_CLOSED);
  CHECK_STATUS(mc_stats_get((mc_cache *)UINTPTR_MAX, NULL), MC_E_CLOSED);
  // A reopened cache gets another handle: the old one stays closed.
  mc_cache *again = open_typed(path, NULL);
  CHECK(again != c);
  CHECK_STATUS(mc_get(c, "k", 1, buf, sizeof buf, &n), MC_E_CLOSED);
  CHECK_STATUS(mc_get(again, long_key, 250, buf, sizeof buf, &n), MC_OK);
  CHECK_STATUS(mc_close(again), MC_OK);
}

// mc_get's hot path accepts a live handle of this process, an ASCII key and a buffer at
// once, and sends everything else to the checked path: keys of every length up to past
// two words, with a non-ASCII byte (valid or not) in each place, and handles that differ
// from a live one in one field only.
static void test_hot_read_checks(void) {
  mc_cache *c = open_typed(path_for("hot"), NULL);
  char key[24], buf[64];
  size_t n = 0;
  for (size_t len = 1; len <= sizeof key; len++) {
    memset(key, 'a', len);
    key[0] = (char)('a' + len);  // a key of each length of its own
    CHECK_STATUS(mc_set(c, key, len, key, len, 0), MC_OK);
    n = 0;
    CHECK_STATUS(mc_get(c, key, len, buf, sizeof buf, &n), MC_OK);
    CHECK(n == len && memcmp(buf, key, len) == 0);
    for (size_t at = 0; at < len; at++) {
      char bad[sizeof key];
      memcpy(bad, key, len);
      bad[at] = (char)0xff;  // never UTF-8
      CHECK_STATUS(mc_get(c, bad, len, buf, sizeof buf, &n), MC_E_INVALID_KEY);
      bad[at] = 'A';
      CHECK_STATUS(mc_get(c, bad, len, buf, sizeof buf, &n), MC_NOT_FOUND);
      if (at + 1 < len) {
        bad[at] = (char)0xc3;  // é: valid UTF-8, read by the checked path
        bad[at + 1] = (char)0xa9;
        CHECK_STATUS(mc_set(c, bad, len, "utf8", 4, 0), MC_OK);
        n = 0;
        CHECK_STATUS(mc_get(c, bad, len, buf, sizeof buf, &n), MC_OK);
        CHECK(n == 4 && memcmp(buf, "utf8", 4) == 0);
      }
    }
  }
  CHECK_STATUS(mc_get(c, "", 0, buf, sizeof buf, &n), MC_E_EMPTY_KEY);
  CHECK_STATUS(mc_get(c, NULL, 1, buf, sizeof buf, &n), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_get(c, "k", 1, buf, (size_t)-1, &n), MC_E_INVALID_ARGUMENT);

  // The handle's fields: slot (its own plus the table's size, and the slot field's top
  // bit), generation, kind; and what a free slot keeps.
  uintptr_t h = (uintptr_t)c;
  const uintptr_t forged[] = {h + 4096, h ^ ((uintptr_t)1 << 31), h + ((uintptr_t)1 << 32),
                              h ^ ((uintptr_t)3 << 60), ~(uintptr_t)0, ~(h & 0xFFFFFFFFu), ~(uintptr_t)1};
  memcpy(key, "ba", 2);
  for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
    CHECK_STATUS(mc_get((mc_cache *)forged[i], key, 1, buf, sizeof buf, &n), MC_E_CLOSED);
  }
  CHECK_STATUS(mc_get(c, "b", 1, buf, sizeof buf, &n), MC_OK);
  CHECK(n == 1 && buf[0] == 'b');
  CHECK_STATUS(mc_close(c), MC_OK);
  CHECK_STATUS(mc_get(c, "b", 1, buf, sizeof buf, &n), MC_E_CLOSED);
}

static void test_typed_caches(void) {
  const char *ints = path_for("int64");
  mc_cache *c = open_typed(ints, "int64");
  int64_t r = 0, v = 7, back = 0;
  size_t n = 0;
  CHECK_STATUS(mc_set(c, "n", 1, "abc", 3, 0), MC_E_INVALID_VALUE);
  CHECK_STATUS(mc_set(c, "n", 1, &v, 8, 0), MC_OK);
  CHECK_STATUS(mc_incr(c, "n", 1, 5, 0, 0, &r), MC_OK);
  CHECK(r == 12);
  CHECK_STATUS(mc_get(c, "n", 1, &back, 8, &n), MC_OK);
  CHECK(n == 8 && back == 12);
  CHECK_STATUS(mc_incr(c, "m", 1, -3, 10, 0, &r), MC_OK);
  CHECK(r == 7);
  v = INT64_MAX;
  CHECK_STATUS(mc_set(c, "max", 3, &v, 8, 0), MC_OK);
  CHECK_STATUS(mc_incr(c, "max", 3, 1, 0, 0, &r), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_close(c), MC_OK);

  const char *strings = path_for("string");
  c = open_typed(strings, "string");
  CHECK_STATUS(set_str(c, "s", "h\xc3\xa9llo", 0), MC_OK);
  CHECK_STATUS(mc_set(c, "s", 1, "\xc3\x28", 2, 0), MC_E_INVALID_VALUE);
  CHECK(value_is(c, "s", "h\xc3\xa9llo"));
  CHECK_STATUS(mc_close(c), MC_OK);
  // Opened for another type: refused; opened as "the file's type": a cache of strings.
  mc_options o;
  mc_options_init(&o);
  o.value_type = "bytes";
  CHECK_STATUS(mc_open(strings, &o, &c), MC_E_TYPE_MISMATCH);
  CHECK(strstr(mc_last_error(), "string") != NULL);
  c = open_typed(strings, NULL);
  mc_info info;
  info.struct_size = sizeof info;
  CHECK_STATUS(mc_info_get(c, &info), MC_OK);
  CHECK(strcmp(info.value_type, "string") == 0);
  CHECK(value_is(c, "s", "h\xc3\xa9llo"));
  CHECK_STATUS(mc_close(c), MC_OK);
  // A new file takes create_value_type.
  const char *py = path_for("python");
  mc_options_init(&o);
  o.create_value_type = "python";
  CHECK_STATUS(mc_open(py, &o, &c), MC_OK);
  CHECK_STATUS(mc_info_get(c, &info), MC_OK);
  CHECK(strcmp(info.value_type, "python") == 0);
  CHECK_STATUS(mc_set(c, "k", 1, "Xbad tag", 8, 0), MC_E_INVALID_VALUE);
  CHECK_STATUS(mc_set(c, "k", 1, "", 0, 0), MC_E_INVALID_VALUE);
  CHECK_STATUS(mc_set(c, "k", 1, "Bbytes", 6, 0), MC_OK);
  CHECK_STATUS(mc_set(c, "json", 4, "J{\"a\":[1,null]}", 15, 0), MC_OK);  // the Node addon's JSON
  CHECK(value_is(c, "json", "J{\"a\":[1,null]}"));
  CHECK_STATUS(mc_incr(c, "count", 5, 3, 0, 0, NULL), MC_OK);
  CHECK(value_is(c, "count", "I3"));
  CHECK_STATUS(mc_incr(c, "k", 1, 1, 0, 0, NULL), MC_E_NOT_AN_INTEGER);
  CHECK_STATUS(mc_close(c), MC_OK);
  // A read-only handle reads and refuses writes.
  mc_options_init(&o);
  o.flags = MC_OPEN_READ_ONLY;
  CHECK_STATUS(mc_open(py, &o, &c), MC_OK);
  CHECK(value_is(c, "k", "Bbytes"));
  CHECK_STATUS(mc_set(c, "k", 1, "Bx", 2, 0), MC_E_READ_ONLY);
  CHECK_STATUS(mc_close(c), MC_OK);
}

static int visit_count(void *ctx, const void *key, size_t klen, const void *value, size_t vlen, double ttl) {
  (void)key;
  (void)klen;
  int *counts = ctx;
  counts[0]++;
  if (value != NULL && vlen > 0) counts[1]++;
  if (isinf(ttl)) counts[2]++;
  return counts[0] >= counts[3];
}

static void test_batches_and_iteration(void) {
  mc_cache *c = open_typed(path_for("batch"), NULL);
  enum { count = 100 };
  char keys[count][16], values[count][32];
  const void *kp[count], *vp[count];
  size_t kl[count], vl[count];
  for (int i = 0; i < count; i++) {
    kl[i] = (size_t)snprintf(keys[i], sizeof keys[i], "key-%d", i);
    vl[i] = (size_t)snprintf(values[i], sizeof values[i], "value-%d-%d", i, i * 7);
    kp[i] = keys[i];
    vp[i] = values[i];
  }
  CHECK_STATUS(mc_set_many(c, count, kp, kl, vp, vl, 0), MC_OK);
  CHECK_STATUS(mc_delete(c, "key-5", 5), MC_OK);

  char bufs[count][32];
  void *bp[count];
  size_t caps[count];
  int64_t lens[count];
  size_t found = 0;
  for (int i = 0; i < count; i++) {
    bp[i] = bufs[i];
    caps[i] = sizeof bufs[i];
  }
  caps[9] = 2;  // too small for its value
  CHECK_STATUS(mc_get_many(c, count, kp, kl, bp, caps, lens, &found), MC_OK);
  CHECK(found == count - 1);
  CHECK(lens[5] == MC_MISSING);
  CHECK(lens[9] == (int64_t)vl[9]);
  int same = 1;
  for (int i = 0; i < count; i++) {
    if (i == 5 || i == 9) continue;
    if (lens[i] != (int64_t)vl[i] || memcmp(bufs[i], values[i], vl[i]) != 0) same = 0;
  }
  CHECK(same);
  // A bad key fails the whole batch before anything is read.
  for (int i = 0; i < count; i++) lens[i] = 777;
  kl[50] = 0;
  CHECK_STATUS(mc_get_many(c, count, kp, kl, bp, caps, lens, &found), MC_E_EMPTY_KEY);
  CHECK(lens[0] == 777);
  // And a bad entry fails a batch write before anything is stored.
  kl[50] = 300;
  strcpy(values[0], "changed");
  vl[0] = 7;
  CHECK_STATUS(mc_set_many(c, count, kp, kl, vp, vl, 0), MC_E_KEY_TOO_LARGE);
  CHECK(!value_is(c, "key-0", "changed"));
  kl[50] = (size_t)strlen(keys[50]);

  int counts[4] = {0, 0, 0, 1000};
  CHECK_STATUS(mc_foreach(c, 0, visit_count, counts), MC_OK);
  CHECK(counts[0] == count - 1 && counts[1] == count - 1 && counts[2] == count - 1);
  int keys_only[4] = {0, 0, 0, 1000};
  CHECK_STATUS(mc_foreach(c, MC_FOREACH_KEYS_ONLY, visit_count, keys_only), MC_OK);
  CHECK(keys_only[0] == count - 1 && keys_only[1] == 0);
  int stop[4] = {0, 0, 0, 10};
  CHECK_STATUS(mc_foreach(c, 0, visit_count, stop), MC_OK);
  CHECK(stop[0] == 10);
  CHECK_STATUS(mc_foreach(c, 0x40, visit_count, stop), MC_E_INVALID_ARGUMENT);

  size_t removed = 0;
  CHECK_STATUS(mc_delete_many(c, 10, kp, kl, &removed), MC_OK);
  CHECK(removed == 9);  // key-5 was already gone

  mc_stats st;
  st.struct_size = sizeof st;
  CHECK_STATUS(mc_stats_get(c, &st), MC_OK);
  CHECK(st.entries == count - 10);
  CHECK(st.hits >= count - 1 && st.misses >= 1 && st.capacity == 4 << 20 && st.slot_count > 0);
  // A caller built against a shorter mc_stats gets only what its structure holds.
  struct {
    size_t struct_size;
    int64_t entries;
    int64_t guard;
  } short_stats = {sizeof(size_t) + sizeof(int64_t), 0, 99};
  CHECK_STATUS(mc_stats_get(c, (mc_stats *)&short_stats), MC_OK);
  CHECK(short_stats.entries == count - 10 && short_stats.guard == 99);

  size_t problems = 99;
  CHECK_STATUS(mc_verify(c, 0, &problems), MC_OK);
  CHECK(problems == 0);
  // Growth: whole partitions, nothing lost; bad capacities are errors.
  int64_t grown = 0;
  CHECK_STATUS(mc_grow(NULL, 8 << 20, &grown), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_grow(c, -1, &grown), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_grow(c, 1 << 20, &grown), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_grow(c, 8 << 20, &grown), MC_OK);
  CHECK(grown > 4 << 20 && grown <= 8 << 20);
  CHECK_STATUS(mc_stats_get(c, &st), MC_OK);
  CHECK(st.capacity == grown && st.entries == count - 10);
  CHECK_STATUS(mc_verify(c, 0, &problems), MC_OK);
  CHECK_STATUS(mc_set_growth_policy(c, 0.05, 2, 60, 1000), MC_OK);
  CHECK_STATUS(mc_set_growth_policy(c, 2, 2, 60, 1000), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_set_growth_policy(c, 0.05, 0.5, 60, 1000), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_set_growth_policy(NULL, 0.05, 2, 60, 1000), MC_E_INVALID_ARGUMENT);
  CHECK_STATUS(mc_set_growth_policy(c, 0, 0, 0, 0), MC_OK);
  CHECK_STATUS(set_str(c, "soon", "x", 0.05), MC_OK);
  usleep(100 * 1000);
  CHECK_STATUS(mc_sweep(c, &removed), MC_OK);
  CHECK(removed == 1);
  CHECK_STATUS(mc_set_limits(c, 20, -1), MC_OK);
  CHECK_STATUS(mc_stats_get(c, &st), MC_OK);
  CHECK(st.count_limit == 20 && st.entries <= 20);
  CHECK_STATUS(mc_set_limits(c, 0, -1), MC_OK);
  CHECK_STATUS(mc_clear(c), MC_OK);
  CHECK_STATUS(mc_stats_get(c, &st), MC_OK);
  CHECK(st.entries == 0);
  CHECK_STATUS(mc_close(c), MC_OK);
}

// Partitions: chosen when the file is made, reported by info and stats; a later
// open keeps the file's count whatever it asks for.
static void test_partitions(void) {
  const char *p = path_for("partitions");
  mc_options o;
  mc_options_init(&o);
  o.capacity = 8 << 20;
  o.partition_count = 4;
  mc_cache *c = NULL;
  CHECK_STATUS(mc_open(p, &o, &c), MC_OK);
  char key[32];
  for (int i = 0; i < 300; i++) {
    snprintf(key, sizeof key, "p-%d", i);
    CHECK_STATUS(set_str(c, key, key, 0), MC_OK);
  }
  mc_info info;
  info.struct_size = sizeof info;
  CHECK_STATUS(mc_info_get(c, &info), MC_OK);
  CHECK(info.partition_count == 4);
  mc_stats st;
  st.struct_size = sizeof st;
  CHECK_STATUS(mc_stats_get(c, &st), MC_OK);
  CHECK(st.partition_count == 4 && st.entries == 300);
  mc_options_init(&o);
  o.partition_count = 2;
  mc_cache *c2 = NULL;
  CHECK_STATUS(mc_open(p, &o, &c2), MC_OK);
  CHECK_STATUS(mc_info_get(c2, &info), MC_OK);
  CHECK(info.partition_count == 4);
  CHECK(value_is(c2, "p-299", "p-299"));
  CHECK_STATUS(mc_close(c2), MC_OK);
  CHECK_STATUS(mc_close(c), MC_OK);
  unlink(p);
}

// Get-or-compute: one claimer at a time, across threads here (across processes in
// test_fork and in the Python and Swift interop tests).
static mc_cache *race_cache;
static int computes;
static pthread_mutex_t computes_lock = PTHREAD_MUTEX_INITIALIZER;

static void *race_thread(void *arg) {
  (void)arg;
  char buf[64];
  size_t n = 0;
  mc_claim *claim = NULL;
  int s = mc_get_or_claim(race_cache, "report", 6, 10, 0, buf, sizeof buf, &n, &claim);
  if (s == MC_CLAIMED) {
    pthread_mutex_lock(&computes_lock);
    computes++;
    pthread_mutex_unlock(&computes_lock);
    usleep(100 * 1000);
    s = mc_publish(claim, "computed", 8, 0);
  } else if (s == MC_OK) {
    s = (n == 8 && memcmp(buf, "computed", 8) == 0) ? MC_OK : -100;
  }
  return (void *)(intptr_t)s;
}

static void test_claims(void) {
  mc_cache *c = open_typed(path_for("claims"), NULL);
  char buf[64];
  size_t n = 0;
  mc_claim *claim = NULL, *other = NULL;

  CHECK_STATUS(mc_get_or_claim(c, "k", 1, 0, 0, buf, sizeof buf, &n, &claim), MC_CLAIMED);
  CHECK(claim != NULL);
  CHECK_STATUS(mc_is_computing(c, "k", 1), MC_OK);
  CHECK_STATUS(mc_is_computing(c, "j", 1), MC_NOT_FOUND);
  CHECK_STATUS(mc_get_or_claim(c, "k", 1, 0, 0, buf, sizeof buf, &n, &other), MC_BUSY);
  CHECK(other == NULL);
  // A wait that runs out: compute here as well.
  CHECK_STATUS(mc_get_or_claim(c, "k", 1, 0.05, 0, buf, sizeof buf, &n, &other), MC_CLAIMED);
  CHECK_STATUS(mc_abandon(other), MC_OK);
  CHECK_STATUS(mc_abandon(other), MC_E_CLOSED);
  CHECK_STATUS(mc_publish(claim, "v1", 2, 0), MC_OK);
  CHECK_STATUS(mc_publish(claim, "v1", 2, 0), MC_E_CLOSED);
  CHECK_STATUS(mc_is_computing(c, "k", 1), MC_NOT_FOUND);
  CHECK_STATUS(mc_get_or_claim(c, "k", 1, 0, 0, buf, sizeof buf, &n, &claim), MC_OK);
  CHECK(claim == NULL && n == 2 && memcmp(buf, "v1", 2) == 0);
  // Abandoned: the next caller claims.
  CHECK_STATUS(mc_get_or_claim(c, "a", 1, 0, 0, buf, sizeof buf, &n, &claim), MC_CLAIMED);
  CHECK_STATUS(mc_abandon(claim), MC_OK);
  CHECK_STATUS(mc_get_or_claim(c, "a", 1, 0, 0, buf, sizeof buf, &n, &claim), MC_CLAIMED);
  // A publish that fails (a value too large) still ends the claim.
  char *huge = calloc(2 << 20, 1);
  CHECK_STATUS(mc_publish(claim, huge, 2 << 20, 0), MC_E_VALUE_TOO_LARGE);
  free(huge);
  CHECK_STATUS(mc_is_computing(c, "a", 1), MC_NOT_FOUND);
  // Serve stale: an expired value while another process recomputes.
  CHECK_STATUS(set_str(c, "s", "old", 0.05), MC_OK);
  usleep(100 * 1000);
  CHECK_STATUS(mc_get_or_claim(c, "s", 1, 0, 0, buf, sizeof buf, &n, &claim), MC_CLAIMED);
  CHECK_STATUS(mc_get_or_claim(c, "s", 1, 1, MC_CLAIM_SERVE_STALE, buf, sizeof buf, &n, &other), MC_STALE);
  CHECK(n == 3 && memcmp(buf, "old", 3) == 0);
  CHECK_STATUS(mc_publish(claim, "new", 3, 0), MC_OK);
  // Closing the cache while a claim is pending: the claim still publishes.
  CHECK_STATUS(mc_get_or_claim(c, "late", 4, 0, 0, buf, sizeof buf, &n, &claim), MC_CLAIMED);
  CHECK_STATUS(mc_close(c), MC_OK);
  CHECK_STATUS(mc_publish(claim, "done", 4, 0), MC_OK);
  c = open_typed(path_for("claims") /* removed: a fresh file */, NULL);
  CHECK_STATUS(mc_close(c), MC_OK);

  // Eight threads race for one key: one computes, the others wait for its value.
  race_cache = open_typed(path_for("race"), NULL);
  pthread_t threads[8];
  for (int i = 0; i < 8; i++) pthread_create(&threads[i], NULL, race_thread, NULL);
  int all_ok = 1;
  for (int i = 0; i < 8; i++) {
    void *r;
    pthread_join(threads[i], &r);
    if ((intptr_t)r != MC_OK) all_ok = 0;
  }
  CHECK(all_ok);
  CHECK(computes == 1);
  CHECK_STATUS(mc_close(race_cache), MC_OK);
}

// Many threads on one handle: every value read is the one written for its key.
static mc_cache *shared;
static void *mixed_thread(void *arg) {
  int id = (int)(intptr_t)arg;
  unsigned seed = (unsigned)id * 7919u + 1;
  char key[32], value[64], buf[64];
  size_t n;
  intptr_t bad = 0;
  for (int i = 0; i < 20000; i++) {
    int k = rand_r(&seed) % 500;
    int kl = snprintf(key, sizeof key, "t-%d", k);
    if (rand_r(&seed) % 4 == 0) {
      int vl = snprintf(value, sizeof value, "value-of-%d-%d", k, id);
      if (mc_set(shared, key, (size_t)kl, value, (size_t)vl, 0) != MC_OK) bad++;
    } else {
      int s = mc_get(shared, key, (size_t)kl, buf, sizeof buf, &n);
      int pl = snprintf(value, sizeof value, "value-of-%d-", k);
      if (s == MC_OK && (n < (size_t)pl || memcmp(buf, value, (size_t)pl) != 0)) bad++;
      if (s != MC_OK && s != MC_NOT_FOUND) bad++;
    }
  }
  return (void *)bad;
}

static void test_threads(void) {
  shared = open_typed(path_for("threads"), NULL);
  pthread_t threads[4];
  for (int i = 0; i < 4; i++) pthread_create(&threads[i], NULL, mixed_thread, (void *)(intptr_t)i);
  intptr_t bad = 0;
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(threads[i], &r);
    bad += (intptr_t)r;
  }
  CHECK(bad == 0);
  size_t problems = 1;
  CHECK_STATUS(mc_verify(shared, 0, &problems), MC_OK);
  CHECK_STATUS(mc_close(shared), MC_OK);
}

// fork(): a handle opened before it works in the child as the child's own (its own
// write-lock token: the parent's and the child's increments exclude each other), and a
// claim taken before it stays the parent's.
static void test_fork(int drop_at_once) {
  mc_cache *c = open_typed(path_for(drop_at_once ? "fork-drop" : "fork-lazy"), NULL);
  char buf[64];
  size_t n;
  mc_claim *claim = NULL;
  CHECK_STATUS(set_str(c, "before", "parent", 0), MC_OK);
  CHECK_STATUS(mc_get_or_claim(c, "held", 4, 0, 0, buf, sizeof buf, &n, &claim), MC_CLAIMED);
  enum { children = 2, rounds = 3000 };
  pid_t pids[children];
  for (int i = 0; i < children; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      if (drop_at_once) mc_after_fork_child();
      int bad = 0;
      if (!value_is(c, "before", "parent")) bad |= 1;
      for (int r = 0; r < rounds; r++)
        if (mc_incr(c, "counter", 7, 1, 0, 0, NULL) != MC_OK) bad |= 2;
      if (mc_publish(claim, "child", 5, 0) != MC_E_FORKED) bad |= 4;
      if (mc_is_computing(c, "held", 4) != MC_OK) bad |= 8;  // still the parent's
      if (set_str(c, "child", "wrote", 0) != MC_OK) bad |= 16;
      _exit(bad);
    }
  }
  for (int r = 0; r < rounds; r++) mc_incr(c, "counter", 7, 1, 0, 0, NULL);
  int statuses_ok = 1;
  for (int i = 0; i < children; i++) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "fork child %d: status 0x%x\n", i, status);
      statuses_ok = 0;
    }
  }
  CHECK(statuses_ok);
  char want[32];
  snprintf(want, sizeof want, "%d", (children + 1) * rounds);
  CHECK(value_is(c, "counter", want));
  CHECK(value_is(c, "child", "wrote"));
  CHECK_STATUS(mc_is_computing(c, "held", 4), MC_OK);
  CHECK_STATUS(mc_publish(claim, "parent", 6, 0), MC_OK);
  CHECK(value_is(c, "held", "parent"));
  size_t problems = 1;
  CHECK_STATUS(mc_verify(c, 0, &problems), MC_OK);
  CHECK_STATUS(mc_close(c), MC_OK);
}

// A child killed while it holds the write lock: with the child's own token, the next
// writer takes the lock over within milliseconds. Were the child writing with the
// parent's token (the inherited registration), its death would leave the parent's token
// in the lock word, which the parent reads as one of its own threads holding it, and
// every writer would wait forever: the alarm turns that into a failure.
static void on_alarm(int sig) {
  (void)sig;
  static const char message[] = "FAIL: a write hung after a forked child was killed holding the write lock\n";
  if (write(2, message, sizeof message - 1) < 0) _exit(3);
  _exit(3);
}

static void test_fork_kill(void) {
  mc_cache *c = open_typed(path_for("fork-kill"), NULL);
  mc_info info;
  info.struct_size = sizeof info;
  CHECK_STATUS(mc_info_get(c, &info), MC_OK);
  size_t size = info.max_value_size;  // the longest hold of the lock a set makes
  char *big = malloc(size);
  memset(big, 'v', size);
  CHECK_STATUS(mc_set(c, "big", 3, big, size, 0), MC_OK);
  signal(SIGALRM, on_alarm);
  int stored = 1;
  for (int round = 0; round < 8; round++) {
    pid_t pid = fork();
    if (pid == 0) {
      for (;;) mc_set(c, "big", 3, big, size, 0);
    }
    usleep(20 * 1000 + (useconds_t)(round * 3000));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    alarm(20);
    if (mc_set(c, "after", 5, "ok", 2, 0) != MC_OK) stored = 0;
    alarm(0);
  }
  signal(SIGALRM, SIG_DFL);
  CHECK(stored);
  free(big);
  size_t problems = 1;
  CHECK_STATUS(mc_verify(c, 0, &problems), MC_OK);
  CHECK_STATUS(mc_close(c), MC_OK);
}

int main(int argc, char **argv) {
  snprintf(prefix, sizeof prefix, "%s", argc > 1 ? argv[1] : "/tmp/mc-abi-test");
  test_versions_and_names();
  test_open_arguments();
  test_entries();
  test_bad_arguments();
  test_hot_read_checks();
  test_typed_caches();
  test_batches_and_iteration();
  test_partitions();
  test_claims();
  test_threads();
  test_fork(0);
  test_fork(1);
  test_fork_kill();
  const char *tags[] = {"x", "entries", "bad", "int64", "string", "python", "batch", "claims", "race", "threads",
                        "fork-drop", "fork-lazy", "fork-kill", "hot"};
  for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) path_for(tags[i]);
  printf("abi_test: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
