/*
 * How PHP values are stored, and the reads, errors and get-or-compute that both the class
 * and the functions share.
 *
 * Values, by the file's value type (mc_info):
 *
 *   bytes, string  A string as it is, an int as ASCII decimal (the form mc_incr changes
 *                  and every other language reads as a counter), and anything else
 *                  tagged: NUL, then 'Z' and PHP's serialize() output, or 'G' and
 *                  igbinary's. Reading inverts it, so a string whose bytes would read as
 *                  something else (an int's decimal form, or a leading NUL) is stored
 *                  tagged too: NUL, 'S', the string. A cache of strings accepts only
 *                  UTF-8 (the library refuses other bytes).
 *   int64          An int: 8 bytes, little-endian (Swift's SharedCache<Int>).
 *   python         bindings/python's tags: 'S' UTF-8 or 'B' other bytes for a string, 'I'
 *                  and ASCII decimal for an int, 'F' and 8 bytes for a float (the library
 *                  accepts no other tag: other values are refused). A pickle ('P') does
 *                  not read in PHP.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <string.h>

#include "php.h"
#include "ext/standard/php_var.h"
#include "zend_exceptions.h"
#include "zend_smart_str.h"

#include "php_mappedcache.h"

#define MC_TAG '\0'

int mc_php_value_type_of(const char *name) {
  if (strcmp(name, "string") == 0) return MC_PHP_STRING;
  if (strcmp(name, "int64") == 0) return MC_PHP_INT64;
  if (strcmp(name, "python") == 0) return MC_PHP_PYTHON;
  return MC_PHP_BYTES;
}

/* ---------------------------------------------------------------------------------- */
/* Errors                                                                              */

void mc_php_throw(int status) {
  const char *message = mc_last_error();
  if (message == NULL || message[0] == '\0') message = mc_status_name(status);
  zend_class_entry *ce = mc_php_ce_exception;
  if (status == MC_E_EMPTY_KEY || status == MC_E_KEY_TOO_LARGE || status == MC_E_INVALID_KEY) {
    ce = mc_php_ce_invalid_key;
  }
  zend_throw_exception(ce, message, status);
}

static void throw_decoding(const char *what) {
  zend_throw_exception_ex(mc_php_ce_exception, MC_E_DECODING_FAILED, "a stored value could not be decoded: %s", what);
}

zend_result mc_php_ttl(zval *ttl, uint32_t arg_num, double *seconds) {
  double d = 0;
  if (ttl == NULL || Z_TYPE_P(ttl) == IS_NULL) {
    *seconds = 0;
    return SUCCESS;
  }
  if (Z_TYPE_P(ttl) == IS_LONG) {
    d = (double)Z_LVAL_P(ttl);
  } else if (Z_TYPE_P(ttl) == IS_DOUBLE) {
    d = Z_DVAL_P(ttl);
  }
  if (isinf(d) && d > 0) d = 0;
  if (!(d >= 0) || isinf(d)) {
    zend_argument_value_error(arg_num, "must be 0 (never expires) or a positive number of seconds");
    return FAILURE;
  }
  *seconds = d;
  return SUCCESS;
}

zend_string *mc_php_key(zval *k) {
  ZVAL_DEREF(k);
  if (Z_TYPE_P(k) == IS_STRING) return zend_string_copy(Z_STR_P(k));
  if (Z_TYPE_P(k) == IS_LONG) return zend_long_to_str(Z_LVAL_P(k));
  zend_type_error("a cache key must be a string, %s given", zend_zval_type_name(k));
  return NULL;
}

zend_result mc_php_delta(zend_long by, bool down, int64_t *delta) {
  if (down && by == ZEND_LONG_MIN) {
    zend_argument_value_error(2, "is out of range");
    return FAILURE;
  }
  *delta = down ? -by : by;
  return SUCCESS;
}

/* ---------------------------------------------------------------------------------- */
/* Integers in ASCII decimal                                                           */

/* Whether p[0..n) is an int64 in mc_incr's form (no sign but '-', no leading zero). */
static bool canonical_long(const char *p, size_t n, zend_long *out) {
  size_t i = 0;
  bool negative = false;
  if (n == 0 || n > 20) return false;
  if (p[0] == '-') {
    if (n == 1) return false;
    negative = true;
    i = 1;
  }
  if (p[i] == '0') {
    if (n == 1) {
      *out = 0;
      return true;
    }
    return false;
  }
  uint64_t v = 0;
  for (; i < n; i++) {
    unsigned digit = (unsigned char)p[i] - (unsigned)'0';
    if (digit > 9) return false;
    if (v > (UINT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  if (negative) {
    if (v > (uint64_t)INT64_MAX + 1) return false;
    *out = (zend_long)(0 - v);
  } else {
    if (v > (uint64_t)INT64_MAX) return false;
    *out = (zend_long)v;
  }
  return true;
}

static bool valid_utf8(const unsigned char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    size_t extra;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i <= extra) return false;
    for (size_t k = 1; k <= extra; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

/* ---------------------------------------------------------------------------------- */
/* Serialization                                                                       */

static zend_function *igbinary_function(const char *name) {
  return zend_hash_str_find_ptr(CG(function_table), name, strlen(name));
}

static bool use_igbinary(void) {
  const char *s = MCG(serializer);
  if (s != NULL && strcmp(s, "php") == 0) return false;
  return igbinary_function("igbinary_serialize") != NULL || (s != NULL && strcmp(s, "igbinary") == 0);
}

/* The value serialized and tagged, as a new string: NUL, then 'G' and igbinary's form, or
 * 'Z' and serialize()'s. */
static zend_string *serialize_value(zval *value) {
  smart_str buf = {0};
  smart_str_appendc(&buf, MC_TAG);
  if (use_igbinary()) {
    zend_function *fn = igbinary_function("igbinary_serialize");
    if (fn == NULL) {
      zend_throw_exception(mc_php_ce_exception, "mappedcache.serializer is igbinary, which is not loaded",
                           MC_E_ENCODING_FAILED);
      smart_str_free(&buf);
      return NULL;
    }
    zval out;
    ZVAL_UNDEF(&out);
    zend_call_known_function(fn, NULL, NULL, &out, 1, value, NULL);
    if (EG(exception) || Z_TYPE(out) != IS_STRING) {
      zval_ptr_dtor(&out);
      smart_str_free(&buf);
      if (!EG(exception)) {
        zend_throw_exception(mc_php_ce_exception, "igbinary could not serialize the value", MC_E_ENCODING_FAILED);
      }
      return NULL;
    }
    smart_str_appendc(&buf, 'G');
    smart_str_appendl(&buf, Z_STRVAL(out), Z_STRLEN(out));
    zval_ptr_dtor(&out);
    return smart_str_extract(&buf);
  }
  smart_str_appendc(&buf, 'Z');
  php_serialize_data_t var_hash;
  PHP_VAR_SERIALIZE_INIT(var_hash);
  php_var_serialize(&buf, value, &var_hash);
  PHP_VAR_SERIALIZE_DESTROY(var_hash);
  if (EG(exception)) {
    smart_str_free(&buf);
    return NULL;
  }
  return smart_str_extract(&buf);
}

static zend_result unserialize_into(const char *p, size_t n, char kind, zval *out) {
  if (kind == 'G') {
    zend_function *fn = igbinary_function("igbinary_unserialize");
    if (fn == NULL) {
      throw_decoding("it was serialized by igbinary, which is not loaded here");
      return FAILURE;
    }
    /* igbinary's header is 4 bytes, 0 0 0 and its version (1 or 2); it reports garbage as
     * null (with a warning), which is stored only as the header and one 0 byte. */
    if (n < 5 || memcmp(p, "\0\0\0", 3) != 0 || (p[3] != 1 && p[3] != 2)) {
      throw_decoding("igbinary's header is missing");
      return FAILURE;
    }
    zval arg;
    ZVAL_STRINGL(&arg, p, n);
    zend_call_known_function(fn, NULL, NULL, out, 1, &arg, NULL);
    zval_ptr_dtor(&arg);
    if (EG(exception)) return FAILURE;
    if (Z_TYPE_P(out) == IS_NULL && !(n == 5 && p[4] == 0)) {
      throw_decoding("igbinary_unserialize() failed on its bytes");
      return FAILURE;
    }
    return SUCCESS;
  }
  php_unserialize_data_t var_hash;
  PHP_VAR_UNSERIALIZE_INIT(var_hash);
  const unsigned char *cursor = (const unsigned char *)p;
  bool ok = php_var_unserialize(out, &cursor, (const unsigned char *)p + n, &var_hash);
  PHP_VAR_UNSERIALIZE_DESTROY(var_hash);
  if (!ok || EG(exception)) {
    zval_ptr_dtor(out);
    ZVAL_UNDEF(out);
    if (!EG(exception)) throw_decoding("unserialize() failed on its bytes");
    return FAILURE;
  }
  return SUCCESS;
}

/* ---------------------------------------------------------------------------------- */
/* Encoding                                                                            */

/* NUL, kind, then p[0..n). */
static zend_string *tagged_copy(char kind, const char *p, size_t n) {
  zend_string *s = zend_string_alloc(n + 2, 0);
  ZSTR_VAL(s)[0] = MC_TAG;
  ZSTR_VAL(s)[1] = kind;
  memcpy(ZSTR_VAL(s) + 2, p, n);
  ZSTR_VAL(s)[n + 2] = '\0';
  return s;
}

static void take(mc_php_encoded *out, zend_string *s) {
  out->owned = s;
  out->data = ZSTR_VAL(s);
  out->length = ZSTR_LEN(s);
}

static zend_result encode_python(zval *value, mc_php_encoded *out) {
  char buf[32];
  switch (Z_TYPE_P(value)) {
  case IS_STRING: {
    const char *p = Z_STRVAL_P(value);
    size_t n = Z_STRLEN_P(value);
    zend_string *s = zend_string_alloc(n + 1, 0);
    ZSTR_VAL(s)[0] = valid_utf8((const unsigned char *)p, n) ? 'S' : 'B';
    memcpy(ZSTR_VAL(s) + 1, p, n);
    ZSTR_VAL(s)[n + 1] = '\0';
    take(out, s);
    return SUCCESS;
  }
  case IS_LONG: {
    int n = snprintf(buf, sizeof buf, "I" ZEND_LONG_FMT, Z_LVAL_P(value));
    take(out, zend_string_init(buf, (size_t)n, 0));
    return SUCCESS;
  }
  case IS_DOUBLE: {
    double d = Z_DVAL_P(value);
    buf[0] = 'F';
    memcpy(buf + 1, &d, 8);
    take(out, zend_string_init(buf, 9, 0));
    return SUCCESS;
  }
  default:
    zend_throw_exception_ex(mc_php_ce_exception, MC_E_INVALID_VALUE,
                            "a cache of Python values holds strings, ints and floats (bindings/python's tags), not "
                            "%s; store it in a cache of bytes",
                            zend_zval_type_name(value));
    return FAILURE;
  }
}

zend_result mc_php_encode(zval *value, int type, mc_php_encoded *out) {
  out->owned = NULL;
  ZVAL_DEREF(value);
  if (type == MC_PHP_PYTHON) return encode_python(value, out);
  if (type == MC_PHP_INT64) {
    if (Z_TYPE_P(value) != IS_LONG) {
      zend_throw_exception_ex(mc_php_ce_exception, MC_E_INVALID_VALUE,
                              "a cache of int64 holds integers, not %s", zend_zval_type_name(value));
      return FAILURE;
    }
    int64_t v = Z_LVAL_P(value);
    memcpy(out->digits, &v, 8);
    out->data = out->digits;
    out->length = 8;
    return SUCCESS;
  }
  switch (Z_TYPE_P(value)) {
  case IS_STRING: {
    const char *p = Z_STRVAL_P(value);
    size_t n = Z_STRLEN_P(value);
    zend_long ignored;
    if ((n > 0 && p[0] == MC_TAG) || canonical_long(p, n, &ignored)) {
      take(out, tagged_copy('S', p, n));
    } else {
      out->data = p;
      out->length = n;
    }
    return SUCCESS;
  }
  case IS_LONG: {
    int n = snprintf(out->digits, sizeof out->digits, ZEND_LONG_FMT, Z_LVAL_P(value));
    out->data = out->digits;
    out->length = (size_t)n;
    return SUCCESS;
  }
  default: {
    zend_string *s = serialize_value(value);
    if (s == NULL) return FAILURE;
    take(out, s);
    return SUCCESS;
  }
  }
}

void mc_php_encoded_release(mc_php_encoded *e) {
  if (e->owned != NULL) {
    zend_string_release(e->owned);
    e->owned = NULL;
  }
}

/* ---------------------------------------------------------------------------------- */
/* Decoding                                                                            */

static zend_result decode_python(const char *p, size_t n, zval *out) {
  if (n == 0) {
    throw_decoding("an empty value in a cache of Python values");
    return FAILURE;
  }
  zend_long l;
  switch (p[0]) {
  case 'S':
  case 'B': ZVAL_STRINGL(out, p + 1, n - 1); return SUCCESS;
  case 'I':
    if (!canonical_long(p + 1, n - 1, &l)) {
      throw_decoding("a Python integer outside PHP's int range");
      return FAILURE;
    }
    ZVAL_LONG(out, l);
    return SUCCESS;
  case 'F': {
    double d;
    if (n != 9) {
      throw_decoding("a Python float not of 8 bytes");
      return FAILURE;
    }
    memcpy(&d, p + 1, 8);
    ZVAL_DOUBLE(out, d);
    return SUCCESS;
  }
  case 'P': throw_decoding("a pickled Python object, which PHP does not read"); return FAILURE;
  default: throw_decoding("an unknown tag in a cache of Python values"); return FAILURE;
  }
}

zend_result mc_php_decode(const char *p, size_t n, int type, zval *out) {
  zend_long l;
  if (type == MC_PHP_PYTHON) return decode_python(p, n, out);
  if (type == MC_PHP_INT64) {
    int64_t v;
    if (n != 8) {
      throw_decoding("an int64 value not of 8 bytes");
      return FAILURE;
    }
    memcpy(&v, p, 8);
    ZVAL_LONG(out, (zend_long)v);
    return SUCCESS;
  }
  if (n >= 2 && p[0] == MC_TAG) {
    if (p[1] == 'S') {
      ZVAL_STRINGL(out, p + 2, n - 2);
      return SUCCESS;
    }
    if (p[1] == 'Z' || p[1] == 'G') return unserialize_into(p + 2, n - 2, p[1], out);
  }
  if (n > 0 && n <= 20 && canonical_long(p, n, &l)) {
    ZVAL_LONG(out, l);
    return SUCCESS;
  }
  ZVAL_STRINGL(out, p, n);
  return SUCCESS;
}

/* ---------------------------------------------------------------------------------- */
/* Reading                                                                             */

int mc_php_read(mc_cache *cache, const char *key, size_t key_length, int type, zval *out) {
  char stack[8192];
  size_t length = 0;
  int status = mc_get(cache, key, key_length, stack, sizeof stack, &length);
  if (status == MC_OK) {
    return mc_php_decode(stack, length, type, out) == SUCCESS ? MC_OK : MC_E_DECODING_FAILED;
  }
  while (status == MC_E_BUFFER_TOO_SMALL) {
    /* Larger than the stack buffer: read into a string of the length reported (the
     * value may change between the calls, hence the loop). */
    zend_string *s = zend_string_alloc(length, 0);
    size_t capacity = length;
    status = mc_get(cache, key, key_length, ZSTR_VAL(s), capacity, &length);
    if (status == MC_OK) {
      zend_result r = mc_php_decode(ZSTR_VAL(s), length, type, out);
      zend_string_release(s);
      return r == SUCCESS ? MC_OK : MC_E_DECODING_FAILED;
    }
    zend_string_release(s);
  }
  return status;
}

/* ---------------------------------------------------------------------------------- */
/* Get-or-compute                                                                      */

/* Calls fci; on success stores its result under the claim (or with mc_set without one). */
static zend_result compute_and_store(mc_cache *cache, int type, zend_string *key, mc_claim *claim,
                                     zend_fcall_info *fci, zend_fcall_info_cache *fcc, double ttl, zval *out) {
  zval result;
  ZVAL_UNDEF(&result);
  fci->retval = &result;
  if (zend_call_function(fci, fcc) != SUCCESS || EG(exception) || Z_ISUNDEF(result)) {
    zval_ptr_dtor(&result);
    if (claim != NULL) mc_abandon(claim);
    return FAILURE;
  }
  mc_php_encoded e;
  if (mc_php_encode(&result, type, &e) != SUCCESS) {
    zval_ptr_dtor(&result);
    if (claim != NULL) mc_abandon(claim);
    return FAILURE;
  }
  int status = claim != NULL ? mc_publish(claim, e.data, e.length, ttl)
                             : mc_set(cache, ZSTR_VAL(key), ZSTR_LEN(key), e.data, e.length, ttl);
  mc_php_encoded_release(&e);
  if (status < 0) {
    zval_ptr_dtor(&result);
    mc_php_throw(status);
    return FAILURE;
  }
  ZVAL_COPY_VALUE(out, &result);
  return SUCCESS;
}

zend_result mc_php_get_or_compute(mc_cache *cache, int type, zend_string *key, zend_fcall_info *fci,
                                  zend_fcall_info_cache *fcc, double ttl, double wait, uint32_t flags, zval *out) {
  char stack[8192];
  for (;;) {
    size_t length = 0;
    mc_claim *claim = NULL;
    int status =
        mc_get_or_claim(cache, ZSTR_VAL(key), ZSTR_LEN(key), wait, flags, stack, sizeof stack, &length, &claim);
    switch (status) {
    case MC_OK:
    case MC_STALE: return mc_php_decode(stack, length, type, out);
    case MC_E_BUFFER_TOO_SMALL:
      status = mc_php_read(cache, ZSTR_VAL(key), ZSTR_LEN(key), type, out);
      if (status == MC_OK) return SUCCESS;
      if (status == MC_NOT_FOUND) continue; /* removed meanwhile: claim it */
      if (!EG(exception)) mc_php_throw(status);
      return FAILURE;
    case MC_CLAIMED: return compute_and_store(cache, type, key, claim, fci, fcc, ttl, out);
    case MC_BUSY: return compute_and_store(cache, type, key, NULL, fci, fcc, ttl, out);
    default: mc_php_throw(status); return FAILURE;
    }
  }
}
