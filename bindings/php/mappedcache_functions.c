/*
 * APCu's functions under the name mappedcache_*, over the cache that php.ini names
 * (mappedcache.path, mappedcache.capacity), so that moving from APCu is a rename. As
 * APCu's do, they report failure by returning false with a warning that gives the
 * library's message; only arguments of the wrong type throw (TypeError, ValueError).
 *
 * The cache is opened on first use in each process and kept for the process's life
 * (across requests). A process forked after that (PHP-FPM's workers, pcntl_fork) reuses
 * the handle, which the library reopens for it on its first call there.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>

#include "php.h"
#include "zend_exceptions.h"

#include "php_mappedcache.h"

/* The functions' cache, opened (or reopened, when mappedcache.path changed) on demand;
 * NULL with a warning when it cannot be. */
static mc_cache *shared_cache(void) {
  const char *path = MCG(path);
  if (MCG(cache) != NULL && MCG(open_path) != NULL && path != NULL && strcmp(ZSTR_VAL(MCG(open_path)), path) == 0) {
    return MCG(cache);
  }
  if (path == NULL || path[0] == '\0') {
    php_error_docref(NULL, E_WARNING, "set mappedcache.path (in php.ini, or with ini_set) to the cache file's path");
    return NULL;
  }
  if (MCG(cache) != NULL) mc_close(MCG(cache));
  MCG(cache) = NULL;
  if (MCG(open_path) != NULL) zend_string_release(MCG(open_path));
  MCG(open_path) = NULL;
  mc_options options;
  mc_options_init(&options);
  options.capacity = MCG(capacity) > 0 ? (uint64_t)MCG(capacity) : 0;
  mc_cache *cache = NULL;
  int status = mc_open(path, &options, &cache);
  if (status != MC_OK) {
    php_error_docref(NULL, E_WARNING, "cannot open %s: %s", path, mc_last_error());
    return NULL;
  }
  mc_info info = {.struct_size = sizeof info};
  mc_info_get(cache, &info);
  MCG(cache) = cache;
  MCG(open_path) = zend_string_init(path, strlen(path), 1);
  MCG(value_type) = mc_php_value_type_of(info.value_type);
  return cache;
}

#define SHARED_CACHE()                                                                                                 \
  mc_cache *cache = shared_cache();                                                                                    \
  if (cache == NULL) RETURN_FALSE

/* Warns for a negative status; true when it did. */
static bool warned(int status) {
  if (status >= 0) return false;
  if (!EG(exception)) php_error_docref(NULL, E_WARNING, "%s", mc_last_error());
  return true;
}

/* Whether every element of keys is a string or an int (else a TypeError is thrown), checked
 * before a call acts on any of them. */
static bool all_keys(HashTable *keys) {
  zval *k;
  ZEND_HASH_FOREACH_VAL(keys, k) {
    ZVAL_DEREF(k);
    if (Z_TYPE_P(k) != IS_STRING && Z_TYPE_P(k) != IS_LONG) {
      zend_type_error("a cache key must be a string, %s given", zend_zval_type_name(k));
      return false;
    }
  }
  ZEND_HASH_FOREACH_END();
  return true;
}

/* Checks an array of keys (all_keys) and makes return_value the empty array its results
 * go in; false with the TypeError thrown. */
static bool begin_keys(HashTable *keys, zval *return_value) {
  if (!all_keys(keys)) return false;
  array_init(return_value);
  return true;
}

/* The APCu-style functions' ttl, whole seconds, checked as the methods' is (mc_php_ttl). */
static zend_result seconds_ttl(zend_long seconds, uint32_t arg_num, double *ttl) {
  zval zv;
  ZVAL_LONG(&zv, seconds);
  return mc_php_ttl(&zv, arg_num, ttl);
}

static void set_success(zval *success, bool value) {
  if (success != NULL) ZEND_TRY_ASSIGN_REF_BOOL(success, value);
}

/* mappedcache_fetch(string|array $key, &$success = null): the value, false when missing. */
PHP_FUNCTION(mappedcache_fetch) {
  zend_string *key = NULL;
  HashTable *keys = NULL;
  zval *success = NULL;
  ZEND_PARSE_PARAMETERS_START(1, 2)
    Z_PARAM_ARRAY_HT_OR_STR(keys, key)
    Z_PARAM_OPTIONAL
    Z_PARAM_ZVAL(success)
  ZEND_PARSE_PARAMETERS_END();
  set_success(success, false);
  SHARED_CACHE();
  int type = MCG(value_type);
  if (key != NULL) {
    int status = mc_php_read(cache, ZSTR_VAL(key), ZSTR_LEN(key), type, return_value);
    if (status == MC_OK) {
      set_success(success, true);
      return;
    }
    if (EG(exception)) RETURN_THROWS();
    warned(status);
    RETURN_FALSE;
  }
  if (!begin_keys(keys, return_value)) RETURN_THROWS();
  zval *k;
  ZEND_HASH_FOREACH_VAL(keys, k) {
    zend_string *s = mc_php_key(k);
    if (s == NULL) MC_PHP_RETURN_THROWS_FREEING();
    zval value;
    int status = mc_php_read(cache, ZSTR_VAL(s), ZSTR_LEN(s), type, &value);
    if (status == MC_OK) zend_symtable_update(Z_ARRVAL_P(return_value), s, &value);
    zend_string_release(s);
    if (EG(exception)) MC_PHP_RETURN_THROWS_FREEING();
    if (warned(status)) {
      zval_ptr_dtor(return_value);
      RETURN_FALSE;
    }
  }
  ZEND_HASH_FOREACH_END();
  set_success(success, true);
}

/* One store; MC_OK, MC_NOT_STORED, or a negative status (warned, or an exception). */
static int store_one(mc_cache *cache, mc_php_store_fn fn, zend_string *key, zval *value, double ttl) {
  mc_php_encoded e;
  if (mc_php_encode(value, MCG(value_type), &e) != SUCCESS) return MC_E_ENCODING_FAILED;
  int status = fn(cache, ZSTR_VAL(key), ZSTR_LEN(key), e.data, e.length, ttl);
  mc_php_encoded_release(&e);
  warned(status);
  return status;
}

/* store and add: one key and value, or an array of them (then the keys that failed). */
static void store_values(INTERNAL_FUNCTION_PARAMETERS, mc_php_store_fn fn) {
  zend_string *key = NULL;
  HashTable *values = NULL;
  zval *value = NULL;
  zend_long ttl_seconds = 0;
  ZEND_PARSE_PARAMETERS_START(1, 3)
    Z_PARAM_ARRAY_HT_OR_STR(values, key)
    Z_PARAM_OPTIONAL
    Z_PARAM_ZVAL(value)
    Z_PARAM_LONG(ttl_seconds)
  ZEND_PARSE_PARAMETERS_END();
  double ttl;
  if (seconds_ttl(ttl_seconds, 3, &ttl) != SUCCESS) RETURN_THROWS();
  if (key != NULL && value == NULL) {
    zend_argument_count_error("%s() expects a value to store under the key", get_active_function_name());
    RETURN_THROWS();
  }
  SHARED_CACHE();
  if (key != NULL) {
    int status = store_one(cache, fn, key, value, ttl);
    if (EG(exception)) RETURN_THROWS();
    RETURN_BOOL(status == MC_OK);
  }
  array_init(return_value);
  zend_string *skey;
  zend_ulong ikey;
  zval *v;
  ZEND_HASH_FOREACH_KEY_VAL(values, ikey, skey, v) {
    zend_string *s = skey != NULL ? zend_string_copy(skey) : zend_long_to_str((zend_long)ikey);
    int status = store_one(cache, fn, s, v, ttl);
    zend_string_release(s);
    if (EG(exception)) MC_PHP_RETURN_THROWS_FREEING();
    if (status != MC_OK) {
      if (skey != NULL) {
        add_assoc_long(return_value, ZSTR_VAL(skey), -1);
      } else {
        add_index_long(return_value, ikey, -1);
      }
    }
  }
  ZEND_HASH_FOREACH_END();
}

PHP_FUNCTION(mappedcache_store) { store_values(INTERNAL_FUNCTION_PARAM_PASSTHRU, mc_set); }
PHP_FUNCTION(mappedcache_add) { store_values(INTERNAL_FUNCTION_PARAM_PASSTHRU, mc_add); }

/* A call on one key (true when it returns MC_OK, false with a warning on an error), or on
 * an array of keys, each checked first: then the keys whose status is (or, with
 * `listed_on_ok` false, is not) MC_OK, as a list (`as_set` false) or as [key => true]. */
static void key_statuses(INTERNAL_FUNCTION_PARAMETERS, mc_php_key_fn fn, bool listed_on_ok, bool as_set) {
  zend_string *key = NULL;
  HashTable *keys = NULL;
  ZEND_PARSE_PARAMETERS_START(1, 1)
    Z_PARAM_ARRAY_HT_OR_STR(keys, key)
  ZEND_PARSE_PARAMETERS_END();
  SHARED_CACHE();
  if (key != NULL) {
    int status = fn(cache, ZSTR_VAL(key), ZSTR_LEN(key));
    if (warned(status)) RETURN_FALSE;
    RETURN_BOOL(status == MC_OK);
  }
  if (!begin_keys(keys, return_value)) RETURN_THROWS();
  zval *k;
  ZEND_HASH_FOREACH_VAL(keys, k) {
    zend_string *s = mc_php_key(k);
    if (s == NULL) MC_PHP_RETURN_THROWS_FREEING();
    int status = fn(cache, ZSTR_VAL(s), ZSTR_LEN(s));
    warned(status);
    if ((status == MC_OK) == listed_on_ok) {
      if (as_set) {
        add_assoc_bool_ex(return_value, ZSTR_VAL(s), ZSTR_LEN(s), true);
      } else {
        add_next_index_str(return_value, zend_string_copy(s));
      }
    }
    zend_string_release(s);
  }
  ZEND_HASH_FOREACH_END();
}

/* mappedcache_delete(string|array $key): bool, or the keys that were not there. */
PHP_FUNCTION(mappedcache_delete) { key_statuses(INTERNAL_FUNCTION_PARAM_PASSTHRU, mc_delete, false, false); }

/* mappedcache_exists(string|array $key): bool, or [key => true] for those present. */
PHP_FUNCTION(mappedcache_exists) { key_statuses(INTERNAL_FUNCTION_PARAM_PASSTHRU, mc_exists, true, true); }

/* inc and dec: the new value (a missing key starts from 0), or false. */
static void step(INTERNAL_FUNCTION_PARAMETERS, bool down) {
  zend_string *key;
  zend_long by = 1, ttl_seconds = 0;
  zval *success = NULL;
  ZEND_PARSE_PARAMETERS_START(1, 4)
    Z_PARAM_STR(key)
    Z_PARAM_OPTIONAL
    Z_PARAM_LONG(by)
    Z_PARAM_ZVAL(success)
    Z_PARAM_LONG(ttl_seconds)
  ZEND_PARSE_PARAMETERS_END();
  set_success(success, false);
  double ttl;
  if (seconds_ttl(ttl_seconds, 4, &ttl) != SUCCESS) RETURN_THROWS();
  int64_t delta, result = 0;
  if (mc_php_delta(by, down, &delta) != SUCCESS) RETURN_THROWS();
  SHARED_CACHE();
  int status = mc_incr(cache, ZSTR_VAL(key), ZSTR_LEN(key), delta, 0, ttl, &result);
  if (warned(status)) RETURN_FALSE;
  set_success(success, true);
  RETURN_LONG((zend_long)result);
}

PHP_FUNCTION(mappedcache_inc) { step(INTERNAL_FUNCTION_PARAM_PASSTHRU, false); }
PHP_FUNCTION(mappedcache_dec) { step(INTERNAL_FUNCTION_PARAM_PASSTHRU, true); }

/* mappedcache_cas(string $key, int $old, int $new): whether the int old was replaced. */
PHP_FUNCTION(mappedcache_cas) {
  zend_string *key;
  zend_long old_value, new_value;
  ZEND_PARSE_PARAMETERS_START(3, 3)
    Z_PARAM_STR(key)
    Z_PARAM_LONG(old_value)
    Z_PARAM_LONG(new_value)
  ZEND_PARSE_PARAMETERS_END();
  SHARED_CACHE();
  char buffer[64];
  size_t length = 0;
  uint64_t version = 0;
  int status = mc_gets(cache, ZSTR_VAL(key), ZSTR_LEN(key), buffer, sizeof buffer, &length, &version);
  if (status == MC_NOT_FOUND || status == MC_E_BUFFER_TOO_SMALL) RETURN_FALSE; /* too long for an int */
  if (warned(status)) RETURN_FALSE;
  zval current;
  if (mc_php_decode(buffer, length, MCG(value_type), &current) != SUCCESS) RETURN_THROWS();
  if (Z_TYPE(current) != IS_LONG || Z_LVAL(current) != old_value) {
    zval_ptr_dtor(&current);
    RETURN_FALSE;
  }
  double ttl = 0;
  if (mc_ttl(cache, ZSTR_VAL(key), ZSTR_LEN(key), &ttl) != MC_OK || isinf(ttl)) ttl = 0;
  zval replacement;
  ZVAL_LONG(&replacement, new_value);
  mc_php_encoded e;
  if (mc_php_encode(&replacement, MCG(value_type), &e) != SUCCESS) RETURN_THROWS();
  status = mc_cas(cache, ZSTR_VAL(key), ZSTR_LEN(key), e.data, e.length, ttl, version);
  mc_php_encoded_release(&e);
  if (warned(status)) RETURN_FALSE;
  RETURN_BOOL(status == MC_OK);
}

/* mappedcache_entry(string $key, callable $generator, int $ttl = 0): the value, computed
 * by $generator($key) once across every process when missing. */
PHP_FUNCTION(mappedcache_entry) {
  zend_string *key;
  zend_fcall_info fci;
  zend_fcall_info_cache fcc;
  zend_long ttl_seconds = 0;
  ZEND_PARSE_PARAMETERS_START(2, 3)
    Z_PARAM_STR(key)
    Z_PARAM_FUNC(fci, fcc)
    Z_PARAM_OPTIONAL
    Z_PARAM_LONG(ttl_seconds)
  ZEND_PARSE_PARAMETERS_END();
  double ttl;
  if (seconds_ttl(ttl_seconds, 3, &ttl) != SUCCESS) RETURN_THROWS();
  SHARED_CACHE();
  zval arg;
  ZVAL_STR(&arg, key);
  fci.params = &arg;
  fci.param_count = 1;
  if (mc_php_get_or_compute(cache, MCG(value_type), key, &fci, &fcc, ttl, 30, 0, return_value) != SUCCESS) {
    if (EG(exception) && !instanceof_function(EG(exception)->ce, mc_php_ce_exception)) RETURN_THROWS();
    if (EG(exception)) {
      /* A library error: a warning and false, as the other functions report them. */
      zval message;
      zend_object *ex = EG(exception);
      ZVAL_COPY(&message, zend_read_property(ex->ce, ex, "message", sizeof "message" - 1, 1, NULL));
      zend_clear_exception();
      php_error_docref(NULL, E_WARNING, "%s", Z_TYPE(message) == IS_STRING ? Z_STRVAL(message) : "failed");
      zval_ptr_dtor(&message);
    }
    RETURN_FALSE;
  }
}

typedef struct {
  zval *list;
} info_context;

static int list_entry(void *context, const void *key, size_t key_length, const void *value, size_t value_length,
                      double ttl) {
  info_context *c = context;
  zval entry;
  array_init_size(&entry, 3);
  add_assoc_stringl(&entry, "info", key, key_length);
  add_assoc_long(&entry, "ttl", isinf(ttl) ? 0 : (zend_long)ceil(ttl));
  add_assoc_long(&entry, "mem_size", (zend_long)(key_length + value_length));
  add_next_index_zval(c->list, &entry);
  return 0;
}

/* mappedcache_cache_info(bool $limited = false): APCu's counters (and, unless limited,
 * cache_list: each entry's key, seconds left and size), from the file's statistics. */
PHP_FUNCTION(mappedcache_cache_info) {
  bool limited = false;
  ZEND_PARSE_PARAMETERS_START(0, 1)
    Z_PARAM_OPTIONAL
    Z_PARAM_BOOL(limited)
  ZEND_PARSE_PARAMETERS_END();
  SHARED_CACHE();
  mc_stats s = {.struct_size = sizeof s};
  if (warned(mc_stats_get(cache, &s))) RETURN_FALSE;
  array_init(return_value);
  add_assoc_long(return_value, "num_slots", (zend_long)s.slot_count);
  add_assoc_long(return_value, "num_hits", (zend_long)s.hits);
  add_assoc_long(return_value, "num_misses", (zend_long)s.misses);
  add_assoc_long(return_value, "num_inserts", (zend_long)s.sets);
  add_assoc_long(return_value, "num_entries", (zend_long)s.entries);
  add_assoc_long(return_value, "expunges", (zend_long)s.evictions);
  add_assoc_long(return_value, "mem_size", (zend_long)s.live_bytes);
  add_assoc_long(return_value, "capacity", (zend_long)s.capacity);
  add_assoc_string(return_value, "memory_type", "mmap");
  add_assoc_str(return_value, "file", zend_string_copy(MCG(open_path)));
  if (limited) return;
  zval list;
  array_init(&list);
  info_context c = {.list = &list};
  int status = mc_foreach(cache, 0, list_entry, &c);
  add_assoc_zval(return_value, "cache_list", &list);
  if (warned(status)) {
    zval_ptr_dtor(return_value);
    RETURN_FALSE;
  }
}

/* mappedcache_clear_cache(): removes every entry, in every process's view. */
PHP_FUNCTION(mappedcache_clear_cache) {
  ZEND_PARSE_PARAMETERS_NONE();
  SHARED_CACHE();
  if (warned(mc_clear(cache))) RETURN_FALSE;
  RETURN_TRUE;
}

/* mappedcache_enabled(): whether the functions' cache opens. */
PHP_FUNCTION(mappedcache_enabled) {
  ZEND_PARSE_PARAMETERS_NONE();
  const char *path = MCG(path);
  if (path == NULL || path[0] == '\0') RETURN_FALSE;
  RETURN_BOOL(shared_cache() != NULL);
}
