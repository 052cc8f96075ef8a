/*
 * mappedcache_ext: MappedCache::Cache's native half, over libmappedcache's C ABI
 * (mappedcache.h). lib/mappedcache.rb adds the Ruby half (keyword options, Marshal,
 * fetch, get_multi as a Hash, Enumerable).
 *
 * Every call holds the GVL: the library's calls do not wait (mc_get_or_claim is called
 * with no wait; Ruby waits in sleep), so no thread of the process is inside the library
 * when another forks, and the child inherits no lock held by it.
 *
 * Keys are Strings (or Symbols) whose bytes go to the library unchanged, whatever their
 * encoding; the library requires them to be UTF-8 (Swift's String keys), so other bytes
 * raise InvalidKeyError. Values, by the file's value type:
 *   bytes   String in, binary (ASCII-8BIT) String out   (Swift [UInt8], Data)
 *   string  UTF-8 String in, UTF-8 String out           (Swift String)
 *   int64   Integer in, Integer out (8 bytes, LE)        (Swift Int)
 */
#include <math.h>
#include <ruby.h>
#include <ruby/encoding.h>
#include <string.h>

#include "mappedcache.h"

enum value_type { VT_BYTES, VT_STRING, VT_INT64 };
static const char *const value_type_names[] = {"bytes", "string", "int64"};

static VALUE mMappedCache, cCache, cClaim;
static VALUE eError, eClosedError, eInvalidKeyError, eInvalidValueError, eTypeMismatchError, eNotACacheError,
    eCorruptedError, eReadOnlyError, eUnsafeFileError, eNotAnIntegerError, eComputeFailedError, eForkedClaimError,
    eTimeoutError, eDecodingError, eSystemError;

/* ---------------------------------------------------------------------------------- */
/* Errors                                                                              */

/* Raises the exception for a status of the C ABI, with the library's message. */
static void raise_status(int status) {
  VALUE type = eError;
  switch (status) {
  case MC_E_CLOSED: type = eClosedError; break;
  case MC_E_INVALID_ARGUMENT: type = rb_eArgError; break;
  case MC_E_EMPTY_KEY:
  case MC_E_KEY_TOO_LARGE:
  case MC_E_INVALID_KEY: type = eInvalidKeyError; break;
  case MC_E_VALUE_TOO_LARGE:
  case MC_E_INVALID_VALUE: type = eInvalidValueError; break;
  case MC_E_TYPE_MISMATCH: type = eTypeMismatchError; break;
  case MC_E_NOT_A_CACHE_FILE:
  case MC_E_INCOMPATIBLE_FORMAT: type = eNotACacheError; break;
  case MC_E_CORRUPTED: type = eCorruptedError; break;
  case MC_E_READ_ONLY: type = eReadOnlyError; break;
  case MC_E_UNSAFE_FILE: type = eUnsafeFileError; break;
  case MC_E_NOT_AN_INTEGER: type = eNotAnIntegerError; break;
  case MC_E_COMPUTE_FAILED: type = eComputeFailedError; break;
  case MC_E_FORKED: type = eForkedClaimError; break;
  case MC_E_TIMED_OUT: type = eTimeoutError; break;
  case MC_E_DECODING_FAILED: type = eDecodingError; break;
  case MC_E_NO_MEMORY: rb_memerror(); break;
  case MC_E_SYSTEM: {
    const char *message = mc_last_error();
    VALUE e = rb_exc_new_cstr(eSystemError, message);
    rb_iv_set(e, "@errno", INT2NUM(mc_last_errno()));
    rb_exc_raise(e);
  }
  default: break;
  }
  const char *message = mc_last_error();
  rb_raise(type, "%s (%s)", message[0] ? message : "MappedCache error", mc_status_name(status));
}

/* A call's answer: true for MC_OK, false for another status that is not an error
 * (MC_NOT_FOUND, MC_NOT_STORED); raises for an error. */
static VALUE status_boolean(int s) {
  if (s < 0) raise_status(s);
  return s == MC_OK ? Qtrue : Qfalse;
}

/* ---------------------------------------------------------------------------------- */
/* The Cache object                                                                    */

typedef struct {
  mc_cache *cache;
  enum value_type value_type;
} cache_t;

static void cache_free(void *p) {
  cache_t *c = p;
  if (c->cache != NULL) mc_close(c->cache);
  xfree(c);
}

static size_t cache_memsize(const void *p) {
  (void)p;
  return sizeof(cache_t);
}

static const rb_data_type_t cache_type = {
    "MappedCache::Cache", {NULL, cache_free, cache_memsize}, NULL, NULL, RUBY_TYPED_FREE_IMMEDIATELY};

static VALUE cache_alloc(VALUE klass) {
  cache_t *c;
  VALUE obj = TypedData_Make_Struct(klass, cache_t, &cache_type, c);
  c->cache = NULL;
  return obj;
}

/* The open handle of self (ClosedError when closed). */
static cache_t *open_cache(VALUE self) {
  cache_t *c;
  TypedData_Get_Struct(self, cache_t, &cache_type, c);
  if (c->cache == NULL) rb_raise(eClosedError, "the cache is closed");
  return c;
}

/* A key's bytes, unchanged (a Symbol's name; anything else is a TypeError). */
static VALUE key_string(VALUE key) {
  if (SYMBOL_P(key)) return rb_sym2str(key);
  if (!RB_TYPE_P(key, T_STRING)) rb_raise(rb_eTypeError, "a key is a String or Symbol, not %s", rb_obj_classname(key));
  return key;
}

/* Seconds to live: nil is never (0); a negative or NaN number is an ArgumentError. */
static double ttl_seconds(VALUE ttl) {
  if (NIL_P(ttl)) return 0;
  double t = NUM2DBL(ttl);
  if (!(t >= 0)) rb_raise(rb_eArgError, "ttl must be nil or 0 or more seconds, not %+" PRIsVALUE, ttl);
  return t;
}

/* A value's bytes as stored: a String's own (the caller keeps the String alive), or an
 * Integer's 8 bytes in `word`. */
typedef struct {
  const char *p;
  size_t n;
  char word[8];
} encoded_t;

/* Encodes value for the file's type into *e. */
static void encode_value(const cache_t *c, VALUE value, encoded_t *e) {
  if (c->value_type == VT_INT64) {
    if (!RB_INTEGER_TYPE_P(value))
      rb_raise(rb_eTypeError, "a cache of int64 stores Integer values, not %s", rb_obj_classname(value));
    int64_t x = NUM2LL(value);
    for (int i = 0; i < 8; i++) e->word[i] = (char)((uint64_t)x >> (8 * i));
    e->p = e->word;
    e->n = 8;
    return;
  }
  if (!RB_TYPE_P(value, T_STRING))
    rb_raise(rb_eTypeError, "a cache of %s stores String values, not %s (open it with marshal: true for others)",
             value_type_names[c->value_type], rb_obj_classname(value));
  e->p = RSTRING_PTR(value);
  e->n = (size_t)RSTRING_LEN(value);
}

static VALUE decode_value(const cache_t *c, const char *p, size_t n) {
  switch (c->value_type) {
  case VT_BYTES: return rb_str_new(p, (long)n);
  case VT_STRING: return rb_utf8_str_new(p, (long)n);
  case VT_INT64: {
    if (n != 8) rb_raise(eDecodingError, "a value of %zu bytes in a cache of int64 (8-byte values)", n);
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | (unsigned char)p[i];
    return LL2NUM((int64_t)x);
  }
  }
  return Qnil;
}

/* The value of key, or Qundef for a miss. */
static VALUE read_value(const cache_t *c, VALUE key) {
  char stack[1024];
  size_t n = 0;
  int s = mc_get(c->cache, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), stack, sizeof stack, &n);
  if (s == MC_OK) return decode_value(c, stack, n);
  if (s == MC_NOT_FOUND) return Qundef;
  if (s == MC_E_BUFFER_TOO_SMALL) {
    /* Larger than the stack buffer: the library allocates it at its size. */
    void *heap = NULL;
    s = mc_get_alloc(c->cache, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), &heap, &n);
    if (s == MC_OK) {
      VALUE copy = rb_str_new(heap, (long)n);
      mc_free(heap);
      return c->value_type == VT_BYTES ? copy : decode_value(c, RSTRING_PTR(copy), n);
    }
    if (s == MC_NOT_FOUND) return Qundef;
  }
  raise_status(s);
  return Qundef;
}

/* open_native(path, [capacity, max_key_size, max_value_size, average_entry_size,
 * max_processes, mode, partitions, flags], value_type, create_value_type, shared_group):
 * lib/mappedcache.rb's initialize checks the keywords and calls it once. */
static VALUE cache_open_native(VALUE self, VALUE path, VALUE numbers, VALUE value_type, VALUE create_value_type,
                               VALUE shared_group) {
  cache_t *c;
  TypedData_Get_Struct(self, cache_t, &cache_type, c);
  if (c->cache != NULL) rb_raise(rb_eRuntimeError, "the cache is already open");
  FilePathValue(path);
  Check_Type(numbers, T_ARRAY);
  if (RARRAY_LEN(numbers) != 8) rb_raise(rb_eArgError, "open_native takes 8 numbers");
  mc_options o;
  mc_options_init(&o);
  o.capacity = NUM2ULL(RARRAY_AREF(numbers, 0));
  o.max_key_size = NUM2UINT(RARRAY_AREF(numbers, 1));
  o.max_value_size = NUM2UINT(RARRAY_AREF(numbers, 2));
  o.average_entry_size = NUM2UINT(RARRAY_AREF(numbers, 3));
  o.max_processes = NUM2UINT(RARRAY_AREF(numbers, 4));
  o.mode = NUM2UINT(RARRAY_AREF(numbers, 5));
  o.partition_count = NUM2UINT(RARRAY_AREF(numbers, 6));
  o.flags = NUM2UINT(RARRAY_AREF(numbers, 7));
  o.value_type = NIL_P(value_type) ? NULL : StringValueCStr(value_type);
  o.create_value_type = NIL_P(create_value_type) ? NULL : StringValueCStr(create_value_type);
  o.shared_group = NIL_P(shared_group) ? NULL : StringValueCStr(shared_group);
  mc_cache *cache = NULL;
  int s = mc_open(StringValueCStr(path), &o, &cache);
  if (s != MC_OK) raise_status(s);
  mc_info info;
  info.struct_size = sizeof info;
  s = mc_info_get(cache, &info);
  int type = -1;
  for (int i = 0; s == MC_OK && i < 3; i++)
    if (strcmp(info.value_type, value_type_names[i]) == 0) type = i;
  if (s != MC_OK || type < 0) {
    mc_close(cache);
    if (s != MC_OK) raise_status(s);
    rb_raise(eTypeMismatchError, "a cache of %s values: Ruby opens caches of bytes, string and int64",
             info.value_type);
  }
  c->cache = cache;
  c->value_type = (enum value_type)type;
  return self;
}

static VALUE cache_info(VALUE self) {
  cache_t *c = open_cache(self);
  mc_info info;
  info.struct_size = sizeof info;
  int s = mc_info_get(c->cache, &info);
  if (s != MC_OK) raise_status(s);
  VALUE h = rb_hash_new();
  rb_hash_aset(h, ID2SYM(rb_intern("capacity")), ULL2NUM(info.capacity));
  rb_hash_aset(h, ID2SYM(rb_intern("max_key_size")), UINT2NUM(info.max_key_size));
  rb_hash_aset(h, ID2SYM(rb_intern("max_value_size")), UINT2NUM(info.max_value_size));
  rb_hash_aset(h, ID2SYM(rb_intern("writable")), info.writable ? Qtrue : Qfalse);
  rb_hash_aset(h, ID2SYM(rb_intern("value_type")), rb_str_new_cstr(info.value_type));
  rb_hash_aset(h, ID2SYM(rb_intern("partition_count")), UINT2NUM(info.partition_count));
  return h;
}

static VALUE cache_close(VALUE self) {
  cache_t *c;
  TypedData_Get_Struct(self, cache_t, &cache_type, c);
  if (c->cache != NULL) {
    mc_close(c->cache);
    c->cache = NULL;
  }
  return Qnil;
}

static VALUE cache_closed_p(VALUE self) {
  cache_t *c;
  TypedData_Get_Struct(self, cache_t, &cache_type, c);
  return c->cache == NULL ? Qtrue : Qfalse;
}

/* get_raw(key): the stored value, or nil. */
static VALUE cache_get_raw(VALUE self, VALUE key) {
  cache_t *c = open_cache(self);
  key = key_string(key);
  VALUE v = read_value(c, key);
  return v == Qundef ? Qnil : v;
}

typedef int (*key_fn)(mc_cache *, const void *, size_t);

/* exist?, delete and computing?: one call on a key; true when it returned MC_OK. */
static VALUE key_status(VALUE self, VALUE key, key_fn fn) {
  cache_t *c = open_cache(self);
  key = key_string(key);
  int s = fn(c->cache, RSTRING_PTR(key), (size_t)RSTRING_LEN(key));
  return status_boolean(s);
}

static VALUE cache_exist_p(VALUE self, VALUE key) { return key_status(self, key, mc_exists); }

enum write_mode { W_SET, W_ADD, W_REPLACE };

/* write_raw(key, value, ttl, mode): mode 0 set, 1 add, 2 replace; true when stored. */
static VALUE cache_write_raw(VALUE self, VALUE key, VALUE value, VALUE ttl, VALUE mode) {
  cache_t *c = open_cache(self);
  key = key_string(key);
  double t = ttl_seconds(ttl);
  encoded_t e;
  encode_value(c, value, &e);
  const char *k = RSTRING_PTR(key);
  size_t kn = (size_t)RSTRING_LEN(key);
  int s;
  switch (NUM2INT(mode)) {
  case W_ADD: s = mc_add(c->cache, k, kn, e.p, e.n, t); break;
  case W_REPLACE: s = mc_replace(c->cache, k, kn, e.p, e.n, t); break;
  default: s = mc_set(c->cache, k, kn, e.p, e.n, t); break;
  }
  RB_GC_GUARD(value);
  return status_boolean(s);
}

/* gets_raw(key): [value, version], or nil. */
static VALUE cache_gets_raw(VALUE self, VALUE key) {
  cache_t *c = open_cache(self);
  key = key_string(key);
  uint64_t version = 0;
  size_t n = 0;
  int s = mc_gets(c->cache, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), NULL, 0, &n, &version);
  for (int tries = 0; tries < 8 && s == MC_E_BUFFER_TOO_SMALL; tries++) {
    VALUE buffer = rb_str_buf_new((long)n);
    size_t want = n;
    s = mc_gets(c->cache, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), RSTRING_PTR(buffer), want, &n, &version);
    if (s == MC_OK) return rb_ary_new_from_args(2, decode_value(c, RSTRING_PTR(buffer), n), ULL2NUM(version));
  }
  if (s == MC_OK) return rb_ary_new_from_args(2, decode_value(c, "", 0), ULL2NUM(version));
  if (s == MC_NOT_FOUND) return Qnil;
  raise_status(s);
  return Qnil;
}

/* cas_raw(key, value, ttl, version): true when stored. */
static VALUE cache_cas_raw(VALUE self, VALUE key, VALUE value, VALUE ttl, VALUE version) {
  cache_t *c = open_cache(self);
  key = key_string(key);
  double t = ttl_seconds(ttl);
  uint64_t v = NUM2ULL(version);
  encoded_t e;
  encode_value(c, value, &e);
  int s = mc_cas(c->cache, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), e.p, e.n, t, v);
  RB_GC_GUARD(value);
  return status_boolean(s);
}

static VALUE cache_delete(VALUE self, VALUE key) { return key_status(self, key, mc_delete); }

static VALUE cache_touch(VALUE self, VALUE key, VALUE ttl) {
  cache_t *c = open_cache(self);
  key = key_string(key);
  double t = ttl_seconds(ttl);
  int s = mc_touch(c->cache, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), t);
  return status_boolean(s);
}

/* ttl(key): seconds left (Float::INFINITY: never expires), or nil when missing. */
static VALUE cache_ttl(VALUE self, VALUE key) {
  cache_t *c = open_cache(self);
  key = key_string(key);
  double seconds = 0;
  int s = mc_ttl(c->cache, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), &seconds);
  if (s < 0) raise_status(s);
  return s == MC_OK ? DBL2NUM(seconds) : Qnil;
}

/* incr_raw(key, delta, initial, ttl): the new value. */
static VALUE cache_incr_raw(VALUE self, VALUE key, VALUE delta, VALUE initial, VALUE ttl) {
  cache_t *c = open_cache(self);
  key = key_string(key);
  double t = ttl_seconds(ttl);
  int64_t result = 0;
  int s = mc_incr(c->cache, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), NUM2LL(delta), NUM2LL(initial), t, &result);
  if (s != MC_OK) raise_status(s);
  return LL2NUM(result);
}

/* GC-managed scratch memory of n bytes (kept alive by the returned String). */
static void *scratch(long n, VALUE *holder) {
  *holder = rb_str_buf_new(n > 0 ? n : 1);
  return RSTRING_PTR(*holder);
}

/* get_many_raw(keys): an Array of values (nil for a miss), in the keys' order. */
static VALUE cache_get_many_raw(VALUE self, VALUE keys) {
  cache_t *c = open_cache(self);
  Check_Type(keys, T_ARRAY);
  long count = RARRAY_LEN(keys);
  const long slot = 256;
  VALUE strings = rb_ary_new_capa(count), h1, h2;
  for (long j = 0; j < count; j++) rb_ary_push(strings, key_string(RARRAY_AREF(keys, j)));
  const void **kp = scratch(count * (long)(2 * sizeof(void *) + 2 * sizeof(size_t) + sizeof(int64_t)), &h1);
  void **bp = (void **)(kp + count);
  size_t *kn = (size_t *)(bp + count);
  size_t *cap = kn + count;
  int64_t *lengths = (int64_t *)(cap + count);
  char *slab = scratch(count * slot, &h2);
  for (long j = 0; j < count; j++) {
    VALUE k = RARRAY_AREF(strings, j);
    kp[j] = RSTRING_PTR(k);
    kn[j] = (size_t)RSTRING_LEN(k);
    bp[j] = slab + j * slot;
    cap[j] = (size_t)slot;
  }
  int s = mc_get_many(c->cache, (size_t)count, kp, kn, (void *const *)bp, cap, lengths, NULL);
  if (s != MC_OK) raise_status(s);
  VALUE out = rb_ary_new_capa(count);
  for (long j = 0; j < count; j++) {
    if (lengths[j] == MC_MISSING) {
      rb_ary_push(out, Qnil);
    } else if (lengths[j] <= slot) {
      rb_ary_push(out, decode_value(c, bp[j], (size_t)lengths[j]));
    } else {
      VALUE v = read_value(c, RARRAY_AREF(strings, j));
      rb_ary_push(out, v == Qundef ? Qnil : v);
    }
  }
  RB_GC_GUARD(h1);
  RB_GC_GUARD(h2);
  RB_GC_GUARD(strings);
  return out;
}

/* set_many_raw(keys, values, ttl): stores every pair under one hold of the write lock. */
static VALUE cache_set_many_raw(VALUE self, VALUE keys, VALUE values, VALUE ttl) {
  cache_t *c = open_cache(self);
  Check_Type(keys, T_ARRAY);
  Check_Type(values, T_ARRAY);
  long count = RARRAY_LEN(keys);
  if (RARRAY_LEN(values) != count) rb_raise(rb_eArgError, "set_many_raw: as many values as keys");
  double t = ttl_seconds(ttl);
  VALUE strings = rb_ary_new_capa(count), h1, h2;
  for (long j = 0; j < count; j++) rb_ary_push(strings, key_string(RARRAY_AREF(keys, j)));
  const void **kp = scratch(count * (long)(2 * sizeof(void *) + 2 * sizeof(size_t)), &h1);
  const void **vp = kp + count;
  size_t *kn = (size_t *)(vp + count);
  size_t *vn = kn + count;
  encoded_t *e = scratch(count * (long)sizeof *e, &h2);
  for (long j = 0; j < count; j++) {
    VALUE k = RARRAY_AREF(strings, j);
    kp[j] = RSTRING_PTR(k);
    kn[j] = (size_t)RSTRING_LEN(k);
    encode_value(c, RARRAY_AREF(values, j), &e[j]);
    vp[j] = e[j].p;
    vn[j] = e[j].n;
  }
  int s = mc_set_many(c->cache, (size_t)count, kp, kn, vp, vn, t);
  RB_GC_GUARD(h1);
  RB_GC_GUARD(h2);
  RB_GC_GUARD(strings);
  RB_GC_GUARD(values);
  if (s != MC_OK) raise_status(s);
  return Qtrue;
}

/* delete_many(keys): how many were present. */
static VALUE cache_delete_many(VALUE self, VALUE keys) {
  cache_t *c = open_cache(self);
  Check_Type(keys, T_ARRAY);
  long count = RARRAY_LEN(keys);
  VALUE strings = rb_ary_new_capa(count), h1;
  for (long j = 0; j < count; j++) rb_ary_push(strings, key_string(RARRAY_AREF(keys, j)));
  const void **kp = scratch(count * (long)(sizeof(void *) + sizeof(size_t)), &h1);
  size_t *kn = (size_t *)(kp + count);
  for (long j = 0; j < count; j++) {
    VALUE k = RARRAY_AREF(strings, j);
    kp[j] = RSTRING_PTR(k);
    kn[j] = (size_t)RSTRING_LEN(k);
  }
  size_t removed = 0;
  int s = mc_delete_many(c->cache, (size_t)count, kp, kn, &removed);
  RB_GC_GUARD(h1);
  RB_GC_GUARD(strings);
  if (s != MC_OK) raise_status(s);
  return SIZET2NUM(removed);
}

static VALUE cache_clear(VALUE self) {
  int s = mc_clear(open_cache(self)->cache);
  if (s != MC_OK) raise_status(s);
  return Qnil;
}

/* sweep: removes every expired entry now; how many. */
static VALUE cache_sweep(VALUE self) {
  size_t removed = 0;
  int s = mc_sweep(open_cache(self)->cache, &removed);
  if (s != MC_OK) raise_status(s);
  return SIZET2NUM(removed);
}

/* set_limits(count_limit, cost_limit): nil leaves a limit as it is, 0 removes it. */
static VALUE cache_set_limits(VALUE self, VALUE count, VALUE cost) {
  int s = mc_set_limits(open_cache(self)->cache, NIL_P(count) ? -1 : NUM2LL(count), NIL_P(cost) ? -1 : NUM2LL(cost));
  if (s != MC_OK) raise_status(s);
  return Qnil;
}

/* grow(capacity): the capacity after. */
static VALUE cache_grow(VALUE self, VALUE capacity) {
  int64_t grown = 0;
  int s = mc_grow(open_cache(self)->cache, NUM2LL(capacity), &grown);
  if (s != MC_OK) raise_status(s);
  return LL2NUM(grown);
}

/* verify(repair): the number of problems (0: sound). */
static VALUE cache_verify(VALUE self, VALUE repair) {
  size_t problems = 0;
  int s = mc_verify(open_cache(self)->cache, RTEST(repair), &problems);
  if (s != MC_OK && s != MC_E_CORRUPTED) raise_status(s);
  return SIZET2NUM(problems);
}

static VALUE cache_stats(VALUE self) {
  mc_stats st;
  st.struct_size = sizeof st;
  int s = mc_stats_get(open_cache(self)->cache, &st);
  if (s != MC_OK) raise_status(s);
  VALUE h = rb_hash_new();
#define STAT(name) rb_hash_aset(h, ID2SYM(rb_intern(#name)), LL2NUM(st.name))
  STAT(entries);
  STAT(live_bytes);
  STAT(capacity);
  STAT(hits);
  STAT(misses);
  STAT(busy_misses);
  STAT(sets);
  STAT(evictions);
  STAT(expirations);
  STAT(recoveries);
  STAT(removals);
  STAT(lock_takeovers);
  STAT(slot_count);
  STAT(max_entries);
  STAT(count_limit);
  STAT(cost_limit);
  STAT(partition_count);
  STAT(index_splits);
  STAT(index_merges);
#undef STAT
  return h;
}

/* Iteration: mc_foreach copies each entry into Ruby objects, and lib/mappedcache.rb's
 * each yields them after the walk, so that a block's exception or break never unwinds
 * through the library. */
typedef struct {
  const cache_t *cache;
  VALUE entries;
  int keys_only;
  int failed;
} walk_t;

static int walk_visit(void *context, const void *key, size_t key_length, const void *value, size_t value_length,
                      double ttl) {
  walk_t *w = context;
  VALUE k = rb_str_new(key, (long)key_length);
  rb_enc_associate(k, rb_utf8_encoding());
  if (w->keys_only) {
    rb_ary_push(w->entries, k);
    return 0;
  }
  if (w->cache->value_type == VT_INT64 && value_length != 8) {
    w->failed = 1;
    return 1;
  }
  VALUE v = decode_value(w->cache, value, value_length);
  rb_ary_push(w->entries, rb_ary_new_from_args(3, k, v, isinf(ttl) ? Qnil : DBL2NUM(ttl)));
  return 0;
}

/* entries_raw(keys_only): [[key, value, ttl], ...] (ttl nil: never expires), or keys. */
static VALUE cache_entries_raw(VALUE self, VALUE keys_only) {
  cache_t *c = open_cache(self);
  walk_t w = {c, rb_ary_new(), RTEST(keys_only), 0};
  int s = mc_foreach(c->cache, w.keys_only ? MC_FOREACH_KEYS_ONLY : 0, walk_visit, &w);
  if (w.failed) rb_raise(eDecodingError, "a value that is not 8 bytes in a cache of int64");
  if (s != MC_OK) raise_status(s);
  return w.entries;
}

/* ---------------------------------------------------------------------------------- */
/* Claims (get-or-compute once across processes)                                       */

typedef struct {
  mc_claim *claim;
  VALUE cache; /* the Cache, for its value type (kept alive while the claim is) */
} claim_t;

static void claim_mark(void *p) { rb_gc_mark(((claim_t *)p)->cache); }

static void claim_free(void *p) {
  claim_t *cl = p;
  if (cl->claim != NULL) mc_abandon(cl->claim);
  xfree(cl);
}

static size_t claim_memsize(const void *p) {
  (void)p;
  return sizeof(claim_t);
}

static const rb_data_type_t claim_type = {
    "MappedCache::Claim", {claim_mark, claim_free, claim_memsize}, NULL, NULL, RUBY_TYPED_FREE_IMMEDIATELY};

static claim_t *live_claim(VALUE self) {
  claim_t *cl;
  TypedData_Get_Struct(self, claim_t, &claim_type, cl);
  if (cl->claim == NULL) rb_raise(eError, "the claim was already published or abandoned");
  return cl;
}

/* claim_raw(key, serve_stale): [:ok | :stale, value, nil], [:claimed, nil, Claim] or
 * [:busy, nil, nil]. Never waits. */
static VALUE cache_claim_raw(VALUE self, VALUE key, VALUE serve_stale) {
  cache_t *c = open_cache(self);
  key = key_string(key);
  char stack[1024];
  size_t n = 0;
  mc_claim *claim = NULL;
  uint32_t flags = RTEST(serve_stale) ? MC_CLAIM_SERVE_STALE : 0;
  int s = mc_get_or_claim(c->cache, RSTRING_PTR(key), (size_t)RSTRING_LEN(key), 0, flags, stack, sizeof stack, &n,
                          &claim);
  if (s == MC_E_BUFFER_TOO_SMALL) {
    VALUE v = read_value(c, key);
    if (v != Qundef) return rb_ary_new_from_args(3, ID2SYM(rb_intern("ok")), v, Qnil);
    return rb_ary_new_from_args(3, ID2SYM(rb_intern("busy")), Qnil, Qnil);
  }
  if (s == MC_OK || s == MC_STALE)
    return rb_ary_new_from_args(3, ID2SYM(rb_intern(s == MC_OK ? "ok" : "stale")), decode_value(c, stack, n), Qnil);
  if (s == MC_BUSY) return rb_ary_new_from_args(3, ID2SYM(rb_intern("busy")), Qnil, Qnil);
  if (s != MC_CLAIMED) raise_status(s);
  claim_t *cl;
  VALUE obj = TypedData_Make_Struct(cClaim, claim_t, &claim_type, cl);
  cl->claim = claim;
  cl->cache = self;
  return rb_ary_new_from_args(3, ID2SYM(rb_intern("claimed")), Qnil, obj);
}

/* publish_raw(value, ttl): stores the computed value and releases the claim. */
static VALUE claim_publish_raw(VALUE self, VALUE value, VALUE ttl) {
  claim_t *cl = live_claim(self);
  double t = ttl_seconds(ttl);
  encoded_t e;
  encode_value(open_cache(cl->cache), value, &e);
  mc_claim *claim = cl->claim;
  cl->claim = NULL;
  int s = mc_publish(claim, e.p, e.n, t);
  RB_GC_GUARD(value);
  if (s != MC_OK) raise_status(s);
  return Qtrue;
}

static VALUE claim_abandon(VALUE self) {
  claim_t *cl;
  TypedData_Get_Struct(self, claim_t, &claim_type, cl);
  if (cl->claim == NULL) return Qnil;
  mc_claim *claim = cl->claim;
  cl->claim = NULL;
  int s = mc_abandon(claim);
  if (s != MC_OK && s != MC_E_FORKED) raise_status(s);
  return Qnil;
}

static VALUE cache_computing_p(VALUE self, VALUE key) { return key_status(self, key, mc_is_computing); }

/* ---------------------------------------------------------------------------------- */
/* The module                                                                          */

static VALUE module_after_fork_child(VALUE self) {
  (void)self;
  mc_after_fork_child();
  return Qnil;
}

static VALUE module_versions(VALUE self) {
  (void)self;
  VALUE h = rb_hash_new();
  rb_hash_aset(h, ID2SYM(rb_intern("abi")), UINT2NUM(mc_abi_version()));
  rb_hash_aset(h, ID2SYM(rb_intern("library")), rb_str_new_cstr(mc_version()));
  rb_hash_aset(h, ID2SYM(rb_intern("file_format")), INT2NUM(mc_file_format_version()));
  return h;
}

static VALUE error_class(const char *name, VALUE super) { return rb_define_class_under(mMappedCache, name, super); }

void Init_mappedcache_ext(void) {
  if (mc_abi_version() != MC_ABI_VERSION)
    rb_raise(rb_eLoadError, "libmappedcache has ABI %u, this extension was built for %d: reinstall the gem",
             mc_abi_version(), MC_ABI_VERSION);
  mMappedCache = rb_define_module("MappedCache");
  eError = error_class("Error", rb_eStandardError);
  eClosedError = error_class("ClosedError", eError);
  eInvalidKeyError = error_class("InvalidKeyError", eError);
  eInvalidValueError = error_class("InvalidValueError", eError);
  eTypeMismatchError = error_class("TypeMismatchError", eError);
  eNotACacheError = error_class("NotACacheError", eError);
  eCorruptedError = error_class("CorruptedError", eError);
  eReadOnlyError = error_class("ReadOnlyError", eError);
  eUnsafeFileError = error_class("UnsafeFileError", eError);
  eNotAnIntegerError = error_class("NotAnIntegerError", eError);
  eComputeFailedError = error_class("ComputeFailedError", eError);
  eForkedClaimError = error_class("ForkedClaimError", eError);
  eTimeoutError = error_class("TimeoutError", eError);
  eDecodingError = error_class("DecodingError", eError);
  eSystemError = error_class("SystemError", eError);
  rb_define_attr(eSystemError, "errno", 1, 0);

  cCache = rb_define_class_under(mMappedCache, "Cache", rb_cObject);
  rb_define_alloc_func(cCache, cache_alloc);
  rb_define_private_method(cCache, "open_native", cache_open_native, 5);
  rb_define_method(cCache, "info", cache_info, 0);
  rb_define_method(cCache, "close", cache_close, 0);
  rb_define_method(cCache, "closed?", cache_closed_p, 0);
  rb_define_method(cCache, "get_raw", cache_get_raw, 1);
  rb_define_method(cCache, "exist?", cache_exist_p, 1);
  rb_define_private_method(cCache, "write_raw", cache_write_raw, 4);
  rb_define_private_method(cCache, "gets_raw", cache_gets_raw, 1);
  rb_define_private_method(cCache, "cas_raw", cache_cas_raw, 4);
  rb_define_method(cCache, "delete", cache_delete, 1);
  rb_define_private_method(cCache, "touch_native", cache_touch, 2);
  rb_define_method(cCache, "ttl", cache_ttl, 1);
  rb_define_private_method(cCache, "incr_raw", cache_incr_raw, 4);
  rb_define_private_method(cCache, "get_many_raw", cache_get_many_raw, 1);
  rb_define_private_method(cCache, "set_many_raw", cache_set_many_raw, 3);
  rb_define_method(cCache, "delete_multi", cache_delete_many, 1);
  rb_define_method(cCache, "clear", cache_clear, 0);
  rb_define_method(cCache, "sweep", cache_sweep, 0);
  rb_define_private_method(cCache, "set_limits_native", cache_set_limits, 2);
  rb_define_method(cCache, "grow", cache_grow, 1);
  rb_define_private_method(cCache, "verify_native", cache_verify, 1);
  rb_define_method(cCache, "stats", cache_stats, 0);
  rb_define_private_method(cCache, "entries_raw", cache_entries_raw, 1);
  rb_define_private_method(cCache, "claim_raw", cache_claim_raw, 2);
  rb_define_method(cCache, "computing?", cache_computing_p, 1);

  cClaim = rb_define_class_under(mMappedCache, "Claim", rb_cObject);
  rb_undef_alloc_func(cClaim);
  rb_define_private_method(cClaim, "publish_raw", claim_publish_raw, 2);
  rb_define_method(cClaim, "abandon", claim_abandon, 0);

  rb_define_module_function(mMappedCache, "after_fork_child", module_after_fork_child, 0);
  rb_define_module_function(mMappedCache, "versions", module_versions, 0);
}
