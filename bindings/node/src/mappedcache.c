/*
 * mappedcache's native part: Node-API functions over libmappedcache's C ABI (mappedcache.h),
 * which lib/cache.js's Cache class calls with its handle.
 *
 * Node-API (not V8's C++ API) so that one build loads in every Node version that has
 * its NAPI_VERSION. Every call is synchronous and short: reads copy a value out of the
 * mapping without a lock or a system call, writes hold the file's lock for one
 * operation. The only wait, get-or-compute's, is left to JavaScript (lib/cache.js polls
 * with timers), so no call here blocks the event loop beyond its copy.
 *
 * Values by the file's value type (the Python package's mapping, so that a value one
 * language stores reads back the same in the other):
 *   bytes   Buffer / TypedArray / ArrayBuffer in, Buffer out   (Swift [UInt8], Data)
 *   string  string in, string out                              (Swift String)
 *   int64   integer number or bigint in, 8 bytes LE            (Swift Int)
 *   python  a tag byte, then the value: B bytes, S string (UTF-8), I integer (ASCII
 *           decimal, the form mc_incr changes), F float (8 bytes LE), and J for what
 *           Node stores as JSON (booleans, null, objects, arrays). P (a Python pickle)
 *           is refused on reading.
 *
 * The module is context-aware: every worker thread loads its own instance, with its own
 * references (napi_set_instance_data), and opens its own handles.
 */
#define NAPI_VERSION 8
#include <node_api.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mappedcache.h"

enum value_type { VT_BYTES, VT_STRING, VT_INT64, VT_PYTHON };
static const char *const value_type_names[] = {"bytes", "string", "int64", "python"};

/* A key copied out of a JS string. A copy that did not fit stops at a character
 * boundary, at most 4 bytes short of the buffer's end (and its NUL), so it still holds
 * more than the longest key limit (4096 bytes): the library refuses it as too large, and
 * a long key is never looked up cut short. */
#define KEY_BUFFER 4104
/* The same margin over the cache's own limit, for the keys of a batch. */
#define KEY_MARGIN 6
/* Values up to this size are read into (and encoded in) the stack. */
#define STACK_VALUE 1024

typedef struct {
  napi_ref cache_error;
  napi_ref json_parse;
  napi_ref json_stringify;
  napi_ref bigint;
} addon_data;

/* Handles reach JavaScript as Externals (cheaper to read back than a wrapped object's
 * pointer, which costs a property lookup a call); lib/cache.js keeps the cache's in a
 * private field. A magic number first tells a cache from a claim. */
enum { CACHE_MAGIC = 0x4d43434e, CLAIM_MAGIC = 0x4d43434c };

typedef struct {
  uint32_t magic;
  enum value_type type;
  uint32_t max_key_size;
  mc_cache *cache;
} cache_object;

typedef struct {
  uint32_t magic;
  mc_claim *claim;
} claim_object;

/* ---------------------------------------------------------------------------------- */
/* Errors                                                                              */

#define CHECK(call)                                                                                          \
  do {                                                                                                       \
    if ((call) != napi_ok) return NULL;                                                                      \
  } while (0)

static addon_data *data_of(napi_env env) {
  addon_data *d = NULL;
  napi_get_instance_data(env, (void **)&d);
  return d;
}

static napi_value ref_value(napi_env env, napi_ref ref) {
  napi_value v = NULL;
  napi_get_reference_value(env, ref, &v);
  return v;
}

/* Throws a CacheError (lib/errors.js) with the status's name as its code. */
static napi_value throw_cache_error(napi_env env, int status, const char *message) {
  bool pending = false;
  napi_is_exception_pending(env, &pending);
  if (pending) return NULL;
  if (message == NULL || message[0] == 0) message = mc_last_error();
  if (message[0] == 0) message = mc_status_name(status);
  napi_value text, error, code, number;
  napi_create_string_utf8(env, message, NAPI_AUTO_LENGTH, &text);
  if (napi_new_instance(env, ref_value(env, data_of(env)->cache_error), 1, &text, &error) != napi_ok) return NULL;
  napi_create_string_utf8(env, mc_status_name(status), NAPI_AUTO_LENGTH, &code);
  napi_create_int32(env, status, &number);
  napi_set_named_property(env, error, "code", code);
  napi_set_named_property(env, error, "status", number);
  if (status == MC_E_SYSTEM) {
    napi_value e;
    napi_create_int32(env, mc_last_errno(), &e);
    napi_set_named_property(env, error, "errno", e);
  }
  napi_throw(env, error);
  return NULL;
}

static napi_value throw_status(napi_env env, int status) { return throw_cache_error(env, status, NULL); }

static napi_value throw_type(napi_env env, const char *message) {
  napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", message);
  return NULL;
}

static napi_value undefined(napi_env env) {
  napi_value u;
  napi_get_undefined(env, &u);
  return u;
}

static napi_value boolean(napi_env env, bool b) {
  napi_value v;
  napi_get_boolean(env, b, &v);
  return v;
}

static napi_value number(napi_env env, double x) {
  napi_value v;
  napi_create_double(env, x, &v);
  return v;
}

/* ---------------------------------------------------------------------------------- */
/* Arguments                                                                           */

/* The cache of a handle (the External `open` made), or NULL with a TypeError thrown. */
static cache_object *handle_of(napi_env env, napi_value v) {
  napi_valuetype t;
  cache_object *c = NULL;
  napi_typeof(env, v, &t);
  if (t != napi_external || napi_get_value_external(env, v, (void **)&c) != napi_ok || c == NULL ||
      c->magic != CACHE_MAGIC) {
    throw_type(env, "not a mappedcache Cache handle");
    return NULL;
  }
  return c;
}

/* The open cache of the handle in the first argument, and up to `max` arguments after it
 * in argv (missing ones undefined). */
static cache_object *open_this(napi_env env, napi_callback_info info, size_t max, napi_value *argv) {
  napi_value all[8];
  size_t argc = max + 1;
  if (napi_get_cb_info(env, info, &argc, all, NULL, NULL) != napi_ok) return NULL;
  for (size_t i = argc; i < max + 1; i++) all[i] = undefined(env);
  cache_object *c = handle_of(env, all[0]);
  if (c == NULL) return NULL;
  if (c->cache == NULL) {
    throw_cache_error(env, MC_E_CLOSED, "the cache is closed");
    return NULL;
  }
  for (size_t i = 0; i < max; i++) argv[i] = all[i + 1];
  return c;
}

typedef struct {
  const char *p;
  size_t n;
  char buffer[KEY_BUFFER];
} key_arg;

/* A key: a string (its UTF-8) or a Buffer / TypedArray (its bytes). */
static bool get_key(napi_env env, napi_value v, key_arg *k) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t == napi_string) {
    if (napi_get_value_string_utf8(env, v, k->buffer, sizeof k->buffer, &k->n) != napi_ok) return false;
    k->p = k->buffer;
    return true;
  }
  bool is_buffer = false;
  napi_is_buffer(env, v, &is_buffer);
  if (is_buffer) {
    void *p = NULL;
    if (napi_get_buffer_info(env, v, &p, &k->n) != napi_ok) return false;
    k->p = k->n == 0 ? "" : p;
    return true;
  }
  throw_type(env, "a key must be a string or a Buffer");
  return false;
}

/* The handle and the call's first argument as its key (argv[0]); NULL with an
 * exception pending. */
static cache_object *open_this_key(napi_env env, napi_callback_info info, size_t max, napi_value *argv,
                                   key_arg *k) {
  cache_object *c = open_this(env, info, max, argv);
  return c != NULL && get_key(env, argv[0], k) ? c : NULL;
}

/* Whether the call found what it looked for (MC_OK), or the error status thrown. */
static napi_value status_boolean(napi_env env, int s) {
  return s < 0 ? throw_status(env, s) : boolean(env, s == MC_OK);
}

/* has, delete and isComputing: one key, and whether the file had it. */
static napi_value key_status(napi_env env, napi_callback_info info, int (*op)(mc_cache *, const void *, size_t)) {
  napi_value argv[1];
  key_arg k;
  cache_object *c = open_this_key(env, info, 1, argv, &k);
  return c == NULL ? NULL : status_boolean(env, op(c->cache, k.p, k.n));
}

/* ttl in seconds: undefined or null is 0 (never expires); the library refuses negative
 * and NaN. */
static bool get_ttl(napi_env env, napi_value v, double *ttl) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  *ttl = 0;
  if (t == napi_undefined || t == napi_null) return true;
  if (t != napi_number) {
    throw_type(env, "ttl must be a number of seconds");
    return false;
  }
  napi_get_value_double(env, v, ttl);
  return true;
}

static bool get_int64(napi_env env, napi_value v, const char *what, int64_t fallback, int64_t *out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  char message[128];
  if (t == napi_undefined) {
    *out = fallback;
    return true;
  }
  if (t == napi_bigint) {
    bool lossless = false;
    napi_get_value_bigint_int64(env, v, out, &lossless);
    if (lossless) return true;
    snprintf(message, sizeof message, "%s is out of the 64-bit range", what);
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", message);
    return false;
  }
  double d = NAN;
  if (t == napi_number) napi_get_value_double(env, v, &d);
  if (t != napi_number || d != trunc(d)) {
    snprintf(message, sizeof message, "%s must be an integer (a number or a bigint)", what);
    throw_type(env, message);
    return false;
  }
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
    snprintf(message, sizeof message, "%s is out of the 64-bit range", what);
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", message);
    return false;
  }
  *out = (int64_t)d;
  return true;
}

/* ---------------------------------------------------------------------------------- */
/* Values                                                                              */

typedef struct {
  const char *p;
  size_t n;
  char *heap;
  char stack[STACK_VALUE];
} encoded;

static void encoded_free(encoded *e) {
  free(e->heap);
  e->heap = NULL;
}

/* Room for n bytes (the stack when they fit). */
static char *room(encoded *e, size_t n) {
  if (n <= sizeof e->stack) return e->stack;
  e->heap = malloc(n);
  return e->heap;
}

/* `tag` (0: none) then the bytes at p. */
static bool put_bytes(napi_env env, encoded *e, char tag, const void *p, size_t n) {
  if (tag == 0) {
    e->p = n == 0 ? "" : p;
    e->n = n;
    return true;
  }
  char *dst = room(e, n + 1);
  if (dst == NULL) return throw_status(env, MC_E_NO_MEMORY), false;
  dst[0] = tag;
  if (n > 0) memcpy(dst + 1, p, n);
  e->p = dst;
  e->n = n + 1;
  return true;
}

/* `tag` (0: none) then the string's UTF-8: copied into the stack at once, and when it
 * may not have fitted, measured and copied again. A copy that did not fit stops at a
 * character boundary up to 3 bytes short of the room, so "may not have fitted" is "came
 * within 4 bytes of the end". */
static bool put_string(napi_env env, encoded *e, char tag, napi_value s) {
  size_t skip = tag ? 1 : 0, n = 0;
  e->stack[0] = tag;
  if (napi_get_value_string_utf8(env, s, e->stack + skip, sizeof e->stack - skip, &n) != napi_ok) return false;
  char *dst = e->stack;
  if (n + skip + 4 >= sizeof e->stack) {
    napi_get_value_string_utf8(env, s, NULL, 0, &n);
    dst = room(e, n + skip + 1);
    if (dst == NULL) return throw_status(env, MC_E_NO_MEMORY), false;
    dst[0] = tag;
    napi_get_value_string_utf8(env, s, dst + skip, n + 1, &n);
  }
  e->p = dst;
  e->n = n + skip;
  return true;
}

/* Bytes of a Buffer, TypedArray, DataView or ArrayBuffer; false (nothing thrown) when v
 * is none of them. */
static bool binary_of(napi_env env, napi_value v, void **p, size_t *n) {
  bool is = false;
  napi_is_buffer(env, v, &is);
  if (is) return napi_get_buffer_info(env, v, p, n) == napi_ok;
  napi_is_arraybuffer(env, v, &is);
  if (is) return napi_get_arraybuffer_info(env, v, p, n) == napi_ok;
  napi_is_dataview(env, v, &is);
  if (is) return napi_get_dataview_info(env, v, n, p, NULL, NULL) == napi_ok;
  return false;
}

static bool put_int64(encoded *e, int64_t x) {
  for (int i = 0; i < 8; i++) e->stack[i] = (char)((uint64_t)x >> (8 * i));
  e->p = e->stack;
  e->n = 8;
  return true;
}

/* An integer (a number without a fraction, or a bigint) as ASCII decimal after `tag` (0:
 * none), the form mc_incr changes; false with nothing thrown when v is not one. */
static bool put_decimal(napi_env env, encoded *e, char tag, napi_valuetype t, napi_value v) {
  char text[32];
  if (t == napi_bigint) {
    int64_t x;
    bool lossless = false;
    napi_get_value_bigint_int64(env, v, &x, &lossless);
    if (lossless) return put_bytes(env, e, tag, text, (size_t)snprintf(text, sizeof text, "%lld", (long long)x));
    napi_value s;
    return napi_coerce_to_string(env, v, &s) == napi_ok && put_string(env, e, tag, s);
  }
  double d = NAN;
  if (t == napi_number) napi_get_value_double(env, v, &d);
  if (!(d == trunc(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return false;
  /* Copied through the stack: put_bytes with no tag keeps a pointer to what it is given. */
  int n = snprintf(e->stack + 1, sizeof e->stack - 1, "%lld", (long long)d);
  if (tag == 0) {
    e->p = e->stack + 1;
    e->n = (size_t)n;
    return true;
  }
  e->stack[0] = tag;
  e->p = e->stack;
  e->n = (size_t)n + 1;
  return true;
}

/* A number or bigint as the python type's integer ('I', decimal) or float ('F'). */
static bool put_python_number(napi_env env, encoded *e, napi_valuetype t, napi_value v) {
  bool pending = false;
  if (put_decimal(env, e, 'I', t, v)) return true;
  napi_is_exception_pending(env, &pending);
  if (pending) return false;
  double d;
  char le[8];
  napi_get_value_double(env, v, &d);
  uint64_t bits;
  memcpy(&bits, &d, 8);
  for (int i = 0; i < 8; i++) le[i] = (char)(bits >> (8 * i));
  return put_bytes(env, e, 'F', le, 8);
}

static bool put_json(napi_env env, encoded *e, napi_value v) {
  napi_value json, global;
  napi_get_global(env, &global);
  if (napi_call_function(env, global, ref_value(env, data_of(env)->json_stringify), 1, &v, &json) != napi_ok) {
    return false;
  }
  napi_valuetype t;
  napi_typeof(env, json, &t);
  if (t != napi_string) return throw_type(env, "the value has no JSON form (a function or a symbol)"), false;
  return put_string(env, e, 'J', json);
}

/* bytes and string files also take integers, as their decimal text (the form mc_incr
 * counts in), and bytes files strings, as their UTF-8: a file made by `mapped-cache
 * create` (untyped, opened as bytes) takes what the CLI would store. */
static bool encode_typed(napi_env env, cache_object *c, napi_value v, napi_valuetype t, encoded *e) {
  void *p = NULL;
  size_t n = 0;
  bool integer = (t == napi_number || t == napi_bigint) && put_decimal(env, e, 0, t, v);
  switch (c->type) {
  case VT_BYTES:
    if (integer) return true;
    if (t == napi_string) return put_string(env, e, 0, v);
    if (binary_of(env, v, &p, &n)) return put_bytes(env, e, 0, p, n);
    return throw_type(env, "a cache of bytes stores Buffers (TypedArrays, ArrayBuffers), strings and integers"),
           false;
  case VT_STRING:
    if (integer) return true;
    if (t == napi_string) return put_string(env, e, 0, v);
    return throw_type(env, "a cache of strings stores strings (and integers, as their decimal text)"), false;
  default: {
    int64_t x;
    if (t != napi_number && t != napi_bigint) return throw_type(env, "a cache of int64 stores integers"), false;
    return get_int64(env, v, "the value", 0, &x) && put_int64(e, x);
  }
  }
}

/* The bytes to store for v: on false an exception is pending. */
static bool encode_value(napi_env env, cache_object *c, napi_value v, encoded *e) {
  e->heap = NULL;
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (c->type != VT_PYTHON) return encode_typed(env, c, v, t, e);
  void *p = NULL;
  size_t n = 0;
  switch (t) {
  case napi_string: return put_string(env, e, 'S', v);
  case napi_number:
  case napi_bigint: return put_python_number(env, e, t, v);
  case napi_undefined: return throw_type(env, "undefined cannot be stored (delete the key instead)"), false;
  case napi_function:
  case napi_symbol: return throw_type(env, "functions and symbols cannot be stored"), false;
  case napi_object:
    if (binary_of(env, v, &p, &n)) return put_bytes(env, e, 'B', p, n);
    return put_json(env, e, v);
  default: return put_json(env, e, v);
  }
}

/* A JS string of UTF-8 bytes: made as Latin-1 when they are ASCII, which V8 copies
 * without decoding. */
static napi_value make_string(napi_env env, const char *p, size_t n) {
  napi_value r = NULL;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ull) break;
  }
  while (i < n && ((unsigned char)p[i] & 0x80) == 0) i++;
  if (i == n) napi_create_string_latin1(env, p, n, &r);
  else napi_create_string_utf8(env, p, n, &r);
  return r;
}

static napi_value decoding_error(napi_env env, const char *message) {
  return throw_cache_error(env, MC_E_DECODING_FAILED, message);
}

/* A decimal integer: a number when it is safe, else a bigint. */
static napi_value decode_integer(napi_env env, const char *p, size_t n) {
  char small[32];
  char *text = n < sizeof small ? small : malloc(n + 1);
  if (text == NULL) return throw_status(env, MC_E_NO_MEMORY);
  memcpy(text, p, n);
  text[n] = 0;
  size_t digits = n > 0 && (text[0] == '-' || text[0] == '+') ? 1 : 0;
  bool ok = n > digits;
  for (size_t i = digits; i < n; i++) ok = ok && text[i] >= '0' && text[i] <= '9';
  napi_value r = NULL;
  if (!ok) {
    decoding_error(env, "a malformed integer in a cache of python values");
  } else {
    errno = 0;
    long long x = strtoll(text, NULL, 10);
    if (errno == 0 && x >= -9007199254740991LL && x <= 9007199254740991LL) {
      napi_create_int64(env, x, &r);
    } else if (errno == 0) {
      napi_create_bigint_int64(env, x, &r);
    } else {
      napi_value s, global;
      napi_get_global(env, &global);
      napi_create_string_utf8(env, text, n, &s);
      napi_call_function(env, global, ref_value(env, data_of(env)->bigint), 1, &s, &r);
    }
  }
  if (text != small) free(text);
  return r;
}

static napi_value decode_python(napi_env env, const char *p, size_t n) {
  napi_value r = NULL, s, global;
  if (n == 0) return decoding_error(env, "an empty value in a cache of python values (it needs a tag byte)");
  const char *d = p + 1;
  size_t m = n - 1;
  switch (p[0]) {
  case 'B': napi_create_buffer_copy(env, m, d, NULL, &r); return r;
  case 'S': return make_string(env, d, m);
  case 'I': return decode_integer(env, d, m);
  case 'F': {
    if (m != 8) return decoding_error(env, "a malformed float in a cache of python values");
    uint64_t bits = 0;
    for (int i = 7; i >= 0; i--) bits = bits << 8 | (unsigned char)d[i];
    double x;
    memcpy(&x, &bits, 8);
    return number(env, x);
  }
  case 'J':
    s = make_string(env, d, m);
    napi_get_global(env, &global);
    napi_call_function(env, global, ref_value(env, data_of(env)->json_parse), 1, &s, &r);
    return r;
  case 'P': return decoding_error(env, "the stored value is a Python pickle, which Node cannot read");
  default: {
    char message[96];
    snprintf(message, sizeof message, "an unknown value tag 0x%02x in a cache of python values", (unsigned char)p[0]);
    return decoding_error(env, message);
  }
  }
}

static napi_value decode_value(napi_env env, cache_object *c, const char *p, size_t n) {
  napi_value r = NULL;
  switch (c->type) {
  case VT_BYTES: napi_create_buffer_copy(env, n, n ? p : "", NULL, &r); return r;
  case VT_STRING: return make_string(env, p, n);
  case VT_INT64: {
    if (n != 8) return decoding_error(env, "a value that is not 8 bytes in a cache of int64");
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | (unsigned char)p[i];
    int64_t v = (int64_t)x;
    if (v >= -9007199254740991LL && v <= 9007199254740991LL) napi_create_int64(env, v, &r);
    else napi_create_bigint_int64(env, v, &r);
    return r;
  }
  default: return decode_python(env, p, n);
  }
}

/* The value of a key, decoded; *found false (and undefined) for a miss. NULL with an
 * exception pending on error. */
static napi_value read_value(napi_env env, cache_object *c, const key_arg *k, bool *found) {
  char stack[STACK_VALUE];
  size_t n = 0;
  *found = false;
  int s = mc_get(c->cache, k->p, k->n, stack, sizeof stack, &n);
  if (s == MC_OK) {
    *found = true;
    return decode_value(env, c, stack, n);
  }
  /* Larger than the stack: read again at its size (a few times, should it grow). */
  for (int tries = 0; s == MC_E_BUFFER_TOO_SMALL && tries < 8; tries++) {
    size_t want = n;
    char *heap = malloc(want == 0 ? 1 : want);
    if (heap == NULL) return throw_status(env, MC_E_NO_MEMORY);
    s = mc_get(c->cache, k->p, k->n, heap, want, &n);
    napi_value r = NULL;
    if (s == MC_OK) {
      *found = true;
      r = decode_value(env, c, heap, n);
    }
    free(heap);
    if (s == MC_OK) return r;
  }
  if (s == MC_NOT_FOUND) return undefined(env);
  return throw_status(env, s);
}

/* ---------------------------------------------------------------------------------- */
/* Reading                                                                             */

static napi_value Cache_get(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  key_arg k;
  cache_object *c = open_this_key(env, info, 1, argv, &k);
  if (c == NULL) return NULL;
  bool found;
  return read_value(env, c, &k, &found);
}

static napi_value Cache_has(napi_env env, napi_callback_info info) { return key_status(env, info, mc_exists); }

static napi_value Cache_ttl(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  key_arg k;
  cache_object *c = open_this_key(env, info, 1, argv, &k);
  if (c == NULL) return NULL;
  double seconds = 0;
  int s = mc_ttl(c->cache, k.p, k.n, &seconds);
  if (s == MC_NOT_FOUND) return undefined(env);
  return s < 0 ? throw_status(env, s) : number(env, seconds);
}

/* gets(key): { value, version } (version a bigint, for cas), or undefined. */
static napi_value Cache_gets(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  key_arg k;
  cache_object *c = open_this_key(env, info, 1, argv, &k);
  if (c == NULL) return NULL;
  char stack[STACK_VALUE];
  char *buf = stack;
  size_t cap = sizeof stack, n = 0;
  uint64_t version = 0;
  int s;
  for (int tries = 0;; tries++) {
    s = mc_gets(c->cache, k.p, k.n, buf, cap, &n, &version);
    if (s != MC_E_BUFFER_TOO_SMALL || tries == 8) break;
    if (buf != stack) free(buf);
    buf = malloc(n ? n : 1);
    cap = n;
    if (buf == NULL) return throw_status(env, MC_E_NO_MEMORY);
  }
  napi_value r = NULL, value, v;
  if (s == MC_OK && (value = decode_value(env, c, buf, n)) != NULL) {
    napi_create_object(env, &r);
    napi_set_named_property(env, r, "value", value);
    napi_create_bigint_uint64(env, version, &v);
    napi_set_named_property(env, r, "version", v);
  } else if (s == MC_NOT_FOUND) {
    r = undefined(env);
  } else if (s != MC_OK) {
    throw_status(env, s);
  }
  if (buf != stack) free(buf);
  return r;
}

typedef struct {
  const void **keys;
  size_t *key_lengths;
  char *arena;
  void **buffers;
  size_t *capacities;
  int64_t *lengths;
} many;

static void many_free(many *m) {
  free(m->keys);
  free(m->key_lengths);
  free(m->arena);
  free(m->buffers);
  free(m->capacities);
  free(m->lengths);
}

/* The keys of a JS array, as pointers into an arena (strings) or into their Buffers. */
static bool many_keys(napi_env env, cache_object *c, napi_value array, uint32_t count, many *m) {
  size_t slot = (size_t)c->max_key_size + KEY_MARGIN;
  m->keys = calloc(count ? count : 1, sizeof *m->keys);
  m->key_lengths = calloc(count ? count : 1, sizeof *m->key_lengths);
  m->arena = malloc(count ? count * slot : 1);
  if (m->keys == NULL || m->key_lengths == NULL || m->arena == NULL) return throw_status(env, MC_E_NO_MEMORY), false;
  for (uint32_t j = 0; j < count; j++) {
    napi_value v;
    napi_valuetype t;
    if (napi_get_element(env, array, j, &v) != napi_ok) return false;
    napi_typeof(env, v, &t);
    if (t == napi_string) {
      char *dst = m->arena + j * slot;
      if (napi_get_value_string_utf8(env, v, dst, slot, &m->key_lengths[j]) != napi_ok) return false;
      m->keys[j] = dst;
      continue;
    }
    key_arg k;
    if (!get_key(env, v, &k)) return false;
    m->keys[j] = k.p;
    m->key_lengths[j] = k.n;
  }
  return true;
}

static bool array_length(napi_env env, napi_value v, const char *what, uint32_t *count) {
  bool is = false;
  napi_is_array(env, v, &is);
  if (!is) {
    char message[96];
    snprintf(message, sizeof message, "%s must be an array", what);
    return throw_type(env, message), false;
  }
  return napi_get_array_length(env, v, count) == napi_ok;
}

/* The handle and the call's first argument as an array of keys (argv[0]) and its length;
 * NULL with an exception pending. */
static cache_object *open_this_keys(napi_env env, napi_callback_info info, size_t max, napi_value *argv,
                                    uint32_t *count) {
  cache_object *c = open_this(env, info, max, argv);
  return c != NULL && array_length(env, argv[0], "keys", count) ? c : NULL;
}

/* open_this_keys, and the keys read into m; NULL with an exception pending (m freed). */
static cache_object *open_this_many(napi_env env, napi_callback_info info, size_t max, napi_value *argv,
                                    uint32_t *count, many *m) {
  cache_object *c = open_this_keys(env, info, max, argv, count);
  if (c != NULL && many_keys(env, c, argv[0], *count, m)) return c;
  many_free(m);
  return NULL;
}

/* Values of the keys (undefined where missing), read at once by mc_get_many into slots
 * of 256 bytes; a longer value is read again alone. */
static napi_value Cache_getMany(napi_env env, napi_callback_info info) {
  napi_value argv[1], result = NULL;
  uint32_t count = 0;
  many m = {0};
  cache_object *c = open_this_many(env, info, 1, argv, &count, &m);
  if (c == NULL) return NULL;
  enum { SLOT = 256 };
  char *slab = malloc(count ? (size_t)count * SLOT : 1);
  m.buffers = calloc(count ? count : 1, sizeof *m.buffers);
  m.capacities = calloc(count ? count : 1, sizeof *m.capacities);
  m.lengths = calloc(count ? count : 1, sizeof *m.lengths);
  if (slab == NULL || m.buffers == NULL || m.capacities == NULL || m.lengths == NULL) {
    throw_status(env, MC_E_NO_MEMORY);
    goto done;
  }
  for (uint32_t j = 0; j < count; j++) {
    m.buffers[j] = slab + (size_t)j * SLOT;
    m.capacities[j] = SLOT;
  }
  int s = mc_get_many(c->cache, count, m.keys, m.key_lengths, (void *const *)m.buffers, m.capacities, m.lengths,
                      NULL);
  if (s < 0) {
    throw_status(env, s);
    goto done;
  }
  napi_create_array_with_length(env, count, &result);
  for (uint32_t j = 0; j < count && result != NULL; j++) {
    napi_value v;
    bool found;
    if (m.lengths[j] == MC_MISSING) {
      v = undefined(env);
    } else if (m.lengths[j] <= SLOT) {
      v = decode_value(env, c, m.buffers[j], (size_t)m.lengths[j]);
    } else {
      key_arg k = {.p = m.keys[j], .n = m.key_lengths[j]};
      v = read_value(env, c, &k, &found);
    }
    if (v == NULL) result = NULL;
    else napi_set_element(env, result, j, v);
  }
done:
  free(slab);
  many_free(&m);
  return result;
}

/* ---------------------------------------------------------------------------------- */
/* Writing                                                                             */

typedef int (*store_fn)(mc_cache *, const void *, size_t, const void *, size_t, double);

/* set, add, replace: (key, value, ttl); true when stored. */
static napi_value store(napi_env env, napi_callback_info info, store_fn fn) {
  napi_value argv[3];
  key_arg k;
  encoded e;
  double ttl;
  cache_object *c = open_this_key(env, info, 3, argv, &k);
  if (c == NULL || !get_ttl(env, argv[2], &ttl)) return NULL;
  if (!encode_value(env, c, argv[1], &e)) return NULL;
  int s = fn(c->cache, k.p, k.n, e.p, e.n, ttl);
  encoded_free(&e);
  return status_boolean(env, s);
}

static napi_value Cache_set(napi_env env, napi_callback_info info) { return store(env, info, mc_set); }
static napi_value Cache_add(napi_env env, napi_callback_info info) { return store(env, info, mc_add); }
static napi_value Cache_replace(napi_env env, napi_callback_info info) { return store(env, info, mc_replace); }

/* cas(key, value, version, ttl): true when the entry still had `version`. */
static napi_value Cache_cas(napi_env env, napi_callback_info info) {
  napi_value argv[4];
  key_arg k;
  encoded e;
  double ttl;
  uint64_t version = 0;
  bool lossless = false;
  cache_object *c = open_this_key(env, info, 4, argv, &k);
  if (c == NULL || !get_ttl(env, argv[3], &ttl)) return NULL;
  napi_valuetype t;
  napi_typeof(env, argv[2], &t);
  if (t != napi_bigint) return throw_type(env, "version must be the bigint that gets() gave");
  napi_get_value_bigint_uint64(env, argv[2], &version, &lossless);
  if (!lossless) return throw_type(env, "version must be the bigint that gets() gave");
  if (!encode_value(env, c, argv[1], &e)) return NULL;
  int s = mc_cas(c->cache, k.p, k.n, e.p, e.n, ttl, version);
  encoded_free(&e);
  return status_boolean(env, s);
}

static napi_value Cache_delete(napi_env env, napi_callback_info info) { return key_status(env, info, mc_delete); }

static napi_value Cache_touch(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  key_arg k;
  double ttl;
  cache_object *c = open_this_key(env, info, 2, argv, &k);
  if (c == NULL || !get_ttl(env, argv[1], &ttl)) return NULL;
  int s = mc_touch(c->cache, k.p, k.n, ttl);
  return status_boolean(env, s);
}

/* incr(key, delta = 1, ttl = 0, initial = 0): the new value, a number (a bigint past
 * 2^53). */
static napi_value Cache_incr(napi_env env, napi_callback_info info) {
  napi_value argv[4], r;
  key_arg k;
  double ttl;
  int64_t delta, initial, result = 0;
  cache_object *c = open_this_key(env, info, 4, argv, &k);
  if (c == NULL || !get_int64(env, argv[1], "delta", 1, &delta) ||
      !get_ttl(env, argv[2], &ttl) || !get_int64(env, argv[3], "initial", 0, &initial)) {
    return NULL;
  }
  int s = mc_incr(c->cache, k.p, k.n, delta, initial, ttl, &result);
  if (s == MC_E_INVALID_ARGUMENT && strstr(mc_last_error(), "overflow") != NULL) {
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", mc_last_error());
    return NULL;
  }
  if (s < 0) return throw_status(env, s);
  if (result >= -9007199254740991LL && result <= 9007199254740991LL) napi_create_int64(env, result, &r);
  else napi_create_bigint_int64(env, result, &r);
  return r;
}

/* A copy of the encoded value that outlives `e` (its own stack). */
static const void *keep_encoded(encoded *e) {
  if (e->heap != NULL) {
    e->heap = NULL;
    return e->p;
  }
  char *copy = malloc(e->n ? e->n : 1);
  if (copy != NULL && e->n > 0) memcpy(copy, e->p, e->n);
  return copy;
}

/* setMany(keys, values, ttl): every entry under one hold of the write lock. */
static napi_value Cache_setMany(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  uint32_t count = 0, values_count = 0;
  double ttl;
  cache_object *c = open_this_keys(env, info, 3, argv, &count);
  if (c == NULL || !array_length(env, argv[1], "values", &values_count) || !get_ttl(env, argv[2], &ttl)) {
    return NULL;
  }
  if (count != values_count) return throw_type(env, "keys and values must have the same length");
  many m = {0};
  const void **values = calloc(count ? count : 1, sizeof *values);
  size_t *lengths = calloc(count ? count : 1, sizeof *lengths);
  uint32_t done = 0;
  napi_value r = NULL;
  if (values == NULL || lengths == NULL) {
    throw_status(env, MC_E_NO_MEMORY);
  } else if (many_keys(env, c, argv[0], count, &m)) {
    for (; done < count; done++) {
      napi_value v;
      encoded e;
      if (napi_get_element(env, argv[1], done, &v) != napi_ok || !encode_value(env, c, v, &e)) break;
      lengths[done] = e.n;
      values[done] = keep_encoded(&e);
      if (values[done] == NULL) {
        throw_status(env, MC_E_NO_MEMORY);
        break;
      }
    }
    if (done == count) {
      int s = mc_set_many(c->cache, count, m.keys, m.key_lengths, values, lengths, ttl);
      r = s < 0 ? throw_status(env, s) : undefined(env);
    }
  }
  for (uint32_t j = 0; j < done && values != NULL; j++) free((void *)values[j]);
  free(values);
  free(lengths);
  many_free(&m);
  return r;
}

static napi_value Cache_deleteMany(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  uint32_t count = 0;
  many m = {0};
  cache_object *c = open_this_many(env, info, 1, argv, &count, &m);
  if (c == NULL) return NULL;
  size_t removed = 0;
  int s = mc_delete_many(c->cache, count, m.keys, m.key_lengths, &removed);
  napi_value r = s < 0 ? throw_status(env, s) : number(env, (double)removed);
  many_free(&m);
  return r;
}

static napi_value Cache_clear(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  cache_object *c = open_this(env, info, 0, argv);
  if (c == NULL) return NULL;
  int s = mc_clear(c->cache);
  return s < 0 ? throw_status(env, s) : undefined(env);
}

static napi_value Cache_sweep(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  cache_object *c = open_this(env, info, 0, argv);
  if (c == NULL) return NULL;
  size_t removed = 0;
  int s = mc_sweep(c->cache, &removed);
  return s < 0 ? throw_status(env, s) : number(env, (double)removed);
}

/* ---------------------------------------------------------------------------------- */
/* Iteration, statistics, maintenance                                                  */

typedef struct {
  napi_env env;
  napi_value array;
  uint32_t count;
  bool failed;
} key_collector;

static int collect_key(void *context, const void *key, size_t key_length, const void *value, size_t value_length,
                       double ttl) {
  (void)value, (void)value_length, (void)ttl;
  key_collector *k = context;
  /* Keys starting with 0xFF (never UTF-8) are Swift's cached compute failures. */
  if (key_length > 0 && ((const unsigned char *)key)[0] == 0xFF) return 0;
  napi_value s = make_string(k->env, key, key_length);
  if (s == NULL ||
      napi_set_element(k->env, k->array, k->count++, s) != napi_ok) {
    k->failed = true;
    return 1;
  }
  return 0;
}

/* The keys present now (a snapshot: lib/cache.js reads their values as it iterates). */
static napi_value Cache_keys(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  cache_object *c = open_this(env, info, 0, argv);
  if (c == NULL) return NULL;
  key_collector k = {.env = env};
  CHECK(napi_create_array(env, &k.array));
  int s = mc_foreach(c->cache, MC_FOREACH_KEYS_ONLY, collect_key, &k);
  if (k.failed) return NULL;
  return s < 0 ? throw_status(env, s) : k.array;
}

static void set_number(napi_env env, napi_value object, const char *name, double x) {
  napi_set_named_property(env, object, name, number(env, x));
}

static napi_value Cache_stats(napi_env env, napi_callback_info info) {
  napi_value argv[1], r;
  cache_object *c = open_this(env, info, 0, argv);
  if (c == NULL) return NULL;
  mc_stats st = {.struct_size = sizeof st};
  int s = mc_stats_get(c->cache, &st);
  if (s < 0) return throw_status(env, s);
  CHECK(napi_create_object(env, &r));
  const struct {
    const char *name;
    int64_t value;
  } fields[] = {
      {"entries", st.entries},       {"liveBytes", st.live_bytes},       {"capacity", st.capacity},
      {"hits", st.hits},             {"misses", st.misses},              {"busyMisses", st.busy_misses},
      {"sets", st.sets},             {"evictions", st.evictions},        {"expirations", st.expirations},
      {"recoveries", st.recoveries}, {"removals", st.removals},          {"lockTakeovers", st.lock_takeovers},
      {"slotCount", st.slot_count},  {"maxEntries", st.max_entries},     {"countLimit", st.count_limit},
      {"costLimit", st.cost_limit},  {"partitionCount", st.partition_count}, {"indexSplits", st.index_splits},
      {"indexMerges", st.index_merges},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) set_number(env, r, fields[i].name, (double)fields[i].value);
  return r;
}

static napi_value Cache_info(napi_env env, napi_callback_info info) {
  napi_value argv[1], r, type;
  cache_object *c = open_this(env, info, 0, argv);
  if (c == NULL) return NULL;
  mc_info i = {.struct_size = sizeof i};
  int s = mc_info_get(c->cache, &i);
  if (s < 0) return throw_status(env, s);
  CHECK(napi_create_object(env, &r));
  set_number(env, r, "capacity", (double)i.capacity);
  set_number(env, r, "maxKeySize", i.max_key_size);
  set_number(env, r, "maxValueSize", i.max_value_size);
  set_number(env, r, "partitionCount", i.partition_count);
  napi_set_named_property(env, r, "writable", boolean(env, i.writable != 0));
  napi_create_string_utf8(env, value_type_names[c->type], NAPI_AUTO_LENGTH, &type);
  napi_set_named_property(env, r, "valueType", type);
  return r;
}

static napi_value Cache_grow(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  int64_t capacity, grown = 0;
  cache_object *c = open_this(env, info, 1, argv);
  if (c == NULL || !get_int64(env, argv[0], "capacity", -1, &capacity)) return NULL;
  int s = mc_grow(c->cache, capacity, &grown);
  return s < 0 ? throw_status(env, s) : number(env, (double)grown);
}

/* setLimits(count, bytes): -1 (or undefined) leaves a limit as it is, 0 removes it. */
static napi_value Cache_setLimits(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  int64_t count, bytes;
  cache_object *c = open_this(env, info, 2, argv);
  if (c == NULL || !get_int64(env, argv[0], "count", -1, &count) || !get_int64(env, argv[1], "bytes", -1, &bytes)) {
    return NULL;
  }
  int s = mc_set_limits(c->cache, count, bytes);
  return s < 0 ? throw_status(env, s) : undefined(env);
}

/* verify(repair): the number of problems found (0: sound); throws MC_E_CORRUPTED when
 * problems remain. */
static napi_value Cache_verify(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  cache_object *c = open_this(env, info, 1, argv);
  if (c == NULL) return NULL;
  bool repair = false;
  napi_valuetype t;
  napi_typeof(env, argv[0], &t);
  if (t == napi_boolean) napi_get_value_bool(env, argv[0], &repair);
  size_t problems = 0;
  int s = mc_verify(c->cache, repair, &problems);
  return s < 0 ? throw_status(env, s) : number(env, (double)problems);
}

static napi_value Cache_isComputing(napi_env env, napi_callback_info info) {
  return key_status(env, info, mc_is_computing);
}

static napi_value Cache_close(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = 1;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  cache_object *c = argc < 1 ? (throw_type(env, "not a mappedcache Cache handle"), NULL) : handle_of(env, argv[0]);
  if (c == NULL) return NULL;
  if (c->cache != NULL) {
    int s = mc_close(c->cache);
    c->cache = NULL;
    if (s < 0) return throw_status(env, s);
  }
  return undefined(env);
}

static napi_value Cache_closed(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = 1;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  cache_object *c = argc < 1 ? (throw_type(env, "not a mappedcache Cache handle"), NULL) : handle_of(env, argv[0]);
  return c == NULL ? NULL : boolean(env, c->cache == NULL);
}

/* ---------------------------------------------------------------------------------- */
/* Get-or-compute claims (lib/cache.js runs the compute and the waiting)                */

static void claim_finalize(napi_env env, void *data, void *hint) {
  (void)env, (void)hint;
  claim_object *claim = data;
  /* A claim dropped unpublished (its compute never settled) lets a waiter compute. */
  if (claim->claim != NULL) mc_abandon(claim->claim);
  free(claim);
}

static napi_value pair(napi_env env, int status, napi_value second) {
  napi_value r, s;
  napi_create_array_with_length(env, 2, &r);
  napi_create_int32(env, status, &s);
  napi_set_element(env, r, 0, s);
  napi_set_element(env, r, 1, second == NULL ? undefined(env) : second);
  return r;
}

/* claim(handle, key, serveStale): [MC_OK or MC_STALE, value], [MC_CLAIMED, claim] or
 * [MC_BUSY]. Never waits. */
static napi_value Cache_claim(napi_env env, napi_callback_info info) {
  napi_value argv[2];
  key_arg k;
  cache_object *c = open_this_key(env, info, 2, argv, &k);
  if (c == NULL) return NULL;
  bool stale = false;
  napi_get_value_bool(env, argv[1], &stale);
  for (int tries = 0; tries < 8; tries++) {
    char stack[STACK_VALUE];
    size_t n = 0;
    mc_claim *claim = NULL;
    int s = mc_get_or_claim(c->cache, k.p, k.n, 0, stale ? MC_CLAIM_SERVE_STALE : 0, stack, sizeof stack, &n, &claim);
    if (s == MC_OK || s == MC_STALE) {
      napi_value v = decode_value(env, c, stack, n);
      return v == NULL ? NULL : pair(env, s, v);
    }
    if (s == MC_BUSY) return pair(env, s, NULL);
    if (s == MC_CLAIMED) {
      claim_object *object = malloc(sizeof *object);
      napi_value external;
      if (object == NULL) {
        mc_abandon(claim);
        return throw_status(env, MC_E_NO_MEMORY);
      }
      object->magic = CLAIM_MAGIC;
      object->claim = claim;
      if (napi_create_external(env, object, claim_finalize, NULL, &external) != napi_ok) {
        claim_finalize(env, object, NULL);
        return NULL;
      }
      return pair(env, s, external);
    }
    if (s != MC_E_BUFFER_TOO_SMALL) return throw_status(env, s);
    /* A live value larger than the stack: read it as get does. */
    bool found;
    napi_value v = read_value(env, c, &k, &found);
    if (v == NULL || found) return v == NULL ? NULL : pair(env, MC_OK, v);
  }
  return throw_cache_error(env, MC_E_OTHER, "the value kept changing size while it was read");
}

static claim_object *claim_arg(napi_env env, napi_value v) {
  claim_object *claim = NULL;
  napi_valuetype t;
  napi_typeof(env, v, &t);
  if (t != napi_external || napi_get_value_external(env, v, (void **)&claim) != napi_ok || claim == NULL ||
      claim->magic != CLAIM_MAGIC) {
    throw_type(env, "not a claim");
    return NULL;
  }
  if (claim->claim == NULL) {
    throw_cache_error(env, MC_E_INVALID_ARGUMENT, "the claim was already published or abandoned");
    return NULL;
  }
  return claim;
}

/* publish(handle, claim, value, ttl) */
static napi_value Cache_publish(napi_env env, napi_callback_info info) {
  napi_value argv[3];
  encoded e;
  double ttl;
  cache_object *c = open_this(env, info, 3, argv);
  claim_object *claim = c == NULL ? NULL : claim_arg(env, argv[0]);
  if (claim == NULL || !get_ttl(env, argv[2], &ttl)) return NULL;
  if (!encode_value(env, c, argv[1], &e)) return NULL;
  int s = mc_publish(claim->claim, e.p, e.n, ttl);
  claim->claim = NULL;
  encoded_free(&e);
  return s < 0 ? throw_status(env, s) : undefined(env);
}

static napi_value Cache_abandon(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = 1;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 1) return throw_type(env, "not a claim");
  claim_object *claim = claim_arg(env, argv[0]);
  if (claim == NULL) return NULL;
  int s = mc_abandon(claim->claim);
  claim->claim = NULL;
  return s < 0 ? throw_status(env, s) : undefined(env);
}

/* ---------------------------------------------------------------------------------- */
/* Opening                                                                             */

static void cache_finalize(napi_env env, void *data, void *hint) {
  (void)env, (void)hint;
  cache_object *c = data;
  if (c->cache != NULL) mc_close(c->cache);
  free(c);
}

/* A string argument (NULL for undefined or null) into buffer; false with an exception
 * pending when it is neither. */
static bool optional_string(napi_env env, napi_value v, const char *what, char *buffer, size_t size,
                            const char **out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  *out = NULL;
  if (t == napi_undefined || t == napi_null) return true;
  size_t n = 0;
  /* Within 4 bytes of the end, the copy may have stopped short of a character. */
  if (t != napi_string || napi_get_value_string_utf8(env, v, buffer, size, &n) != napi_ok || n + 4 >= size) {
    char message[96];
    snprintf(message, sizeof message, "%s must be a string (of fewer than %zu bytes)", what, size - 4);
    return throw_type(env, message), false;
  }
  *out = buffer;
  return true;
}

static bool option_number(napi_env env, napi_value v, double *out) {
  napi_valuetype t;
  napi_typeof(env, v, &t);
  *out = 0;
  if (t == napi_undefined) return true;
  if (t != napi_number) return throw_type(env, "an option must be a number"), false;
  napi_get_value_double(env, v, out);
  if (!(*out >= 0 && *out <= 9007199254740991.0)) {
    napi_throw_range_error(env, "ERR_OUT_OF_RANGE", "an option must be 0 or a positive integer");
    return false;
  }
  return true;
}

/* Opens path as mc_open does, except that with no value type asked for, an existing
 * untyped file (`mapped-cache create`'s default) opens as bytes, not as the type a new
 * file is created with: what the CLI stored there has no type tag. */
static int open_file(const char *path, const mc_options *options, mc_cache **cache) {
  if (options->value_type != NULL || (options->flags & MC_OPEN_NO_CREATE) != 0) return mc_open(path, options, cache);
  mc_options existing = *options;
  existing.flags |= MC_OPEN_NO_CREATE;
  existing.create_value_type = "bytes";
  int s = mc_open(path, &existing, cache);
  if (s == MC_E_SYSTEM && mc_last_errno() == ENOENT) s = mc_open(path, options, cache);
  return s;
}

/* open(path, capacity, maxKeySize, maxValueSize, averageEntrySize, maxProcesses, mode,
 * flags, valueType, createValueType, sharedGroup, partitions): the handle of the opened
 * cache. lib/cache.js checks the options and passes them in this order (0: the
 * default). */
static napi_value Cache_open(napi_env env, napi_callback_info info) {
  enum { ARGS = 12 };
  napi_value argv[ARGS], handle;
  size_t argc = ARGS;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  for (size_t i = argc; i < ARGS; i++) argv[i] = undefined(env);
  char path[4096], type[32], create_type[32], group[256];
  mc_options o;
  mc_options_init(&o);
  double x[7];
  const char *p;
  if (!optional_string(env, argv[0], "path", path, sizeof path, &p)) return NULL;
  if (p == NULL) return throw_type(env, "path must be a string");
  for (int i = 0; i < 7; i++) {
    if (!option_number(env, argv[1 + i], &x[i])) return NULL;
  }
  o.capacity = (uint64_t)x[0];
  o.max_key_size = (uint32_t)x[1];
  o.max_value_size = (uint32_t)x[2];
  o.average_entry_size = (uint32_t)x[3];
  o.max_processes = (uint32_t)x[4];
  o.mode = (uint32_t)x[5];
  o.flags = (uint32_t)x[6];
  double partitions = 0;
  if (!optional_string(env, argv[8], "valueType", type, sizeof type, &o.value_type) ||
      !optional_string(env, argv[9], "createValueType", create_type, sizeof create_type, &o.create_value_type) ||
      !optional_string(env, argv[10], "sharedGroup", group, sizeof group, &o.shared_group) ||
      !option_number(env, argv[11], &partitions)) {
    return NULL;
  }
  o.partition_count = (uint32_t)partitions;
  mc_cache *cache = NULL;
  int s = open_file(p, &o, &cache);
  if (s != MC_OK) return throw_status(env, s);
  mc_info i = {.struct_size = sizeof i};
  s = mc_info_get(cache, &i);
  cache_object *c = malloc(sizeof *c);
  if (s != MC_OK || c == NULL) {
    mc_close(cache);
    free(c);
    return throw_status(env, s != MC_OK ? s : MC_E_NO_MEMORY);
  }
  c->magic = CACHE_MAGIC;
  c->cache = cache;
  c->max_key_size = i.max_key_size;
  c->type = VT_BYTES;
  for (int t = 0; t < 4; t++) {
    if (strcmp(i.value_type, value_type_names[t]) == 0) c->type = (enum value_type)t;
  }
  if (napi_create_external(env, c, cache_finalize, NULL, &handle) != napi_ok) {
    cache_finalize(env, c, NULL);
    return NULL;
  }
  return handle;
}

/* ---------------------------------------------------------------------------------- */
/* The module                                                                          */

static void addon_finalize(napi_env env, void *data, void *hint) {
  (void)hint;
  addon_data *d = data;
  napi_ref refs[] = {d->cache_error, d->json_parse, d->json_stringify, d->bigint};
  for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++) {
    if (refs[i] != NULL) napi_delete_reference(env, refs[i]);
  }
  free(d);
}

/* setup(CacheError): the error class the module throws (lib/errors.js). */
static napi_value setup(napi_env env, napi_callback_info info) {
  napi_value argv[1];
  size_t argc = 1;
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  addon_data *d = data_of(env);
  if (d->cache_error != NULL) napi_delete_reference(env, d->cache_error);
  CHECK(napi_create_reference(env, argv[0], 1, &d->cache_error));
  return undefined(env);
}

static napi_value versions(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value r, library;
  CHECK(napi_create_object(env, &r));
  set_number(env, r, "abi", mc_abi_version());
  napi_create_string_utf8(env, mc_version(), NAPI_AUTO_LENGTH, &library);
  napi_set_named_property(env, r, "library", library);
  set_number(env, r, "fileFormat", mc_file_format_version());
  return r;
}

static napi_ref global_ref(napi_env env, const char *object, const char *name) {
  napi_value global, o, v;
  napi_ref ref = NULL;
  napi_get_global(env, &global);
  napi_get_named_property(env, global, object, &o);
  if (name == NULL) v = o;
  else napi_get_named_property(env, o, name, &v);
  napi_create_reference(env, v, 1, &ref);
  return ref;
}

#define FUNCTION(name, fn) {name, NULL, fn, NULL, NULL, NULL, napi_default_method, NULL}

NAPI_MODULE_INIT() {
  addon_data *d = calloc(1, sizeof *d);
  if (d == NULL || napi_set_instance_data(env, d, addon_finalize, NULL) != napi_ok) return NULL;
  d->json_parse = global_ref(env, "JSON", "parse");
  d->json_stringify = global_ref(env, "JSON", "stringify");
  d->bigint = global_ref(env, "BigInt", NULL);
  /* Every function but open, abandon, setup and versions takes a cache handle first. */
  napi_property_descriptor functions[] = {
      FUNCTION("open", Cache_open),
      FUNCTION("close", Cache_close),
      FUNCTION("closed", Cache_closed),
      FUNCTION("get", Cache_get),
      FUNCTION("has", Cache_has),
      FUNCTION("ttl", Cache_ttl),
      FUNCTION("gets", Cache_gets),
      FUNCTION("getMany", Cache_getMany),
      FUNCTION("set", Cache_set),
      FUNCTION("add", Cache_add),
      FUNCTION("replace", Cache_replace),
      FUNCTION("cas", Cache_cas),
      FUNCTION("delete", Cache_delete),
      FUNCTION("touch", Cache_touch),
      FUNCTION("incr", Cache_incr),
      FUNCTION("setMany", Cache_setMany),
      FUNCTION("deleteMany", Cache_deleteMany),
      FUNCTION("clear", Cache_clear),
      FUNCTION("sweep", Cache_sweep),
      FUNCTION("keys", Cache_keys),
      FUNCTION("stats", Cache_stats),
      FUNCTION("info", Cache_info),
      FUNCTION("grow", Cache_grow),
      FUNCTION("setLimits", Cache_setLimits),
      FUNCTION("verify", Cache_verify),
      FUNCTION("isComputing", Cache_isComputing),
      FUNCTION("claim", Cache_claim),
      FUNCTION("publish", Cache_publish),
      FUNCTION("abandon", Cache_abandon),
      FUNCTION("setup", setup),
      FUNCTION("versions", versions),
  };
  CHECK(napi_define_properties(env, exports, sizeof functions / sizeof functions[0], functions));
  napi_value statuses;
  CHECK(napi_create_object(env, &statuses));
  const struct {
    const char *name;
    int value;
  } codes[] = {{"OK", MC_OK}, {"CLAIMED", MC_CLAIMED}, {"BUSY", MC_BUSY}, {"STALE", MC_STALE}};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) set_number(env, statuses, codes[i].name, codes[i].value);
  CHECK(napi_set_named_property(env, exports, "status", statuses));
  return exports;
}
