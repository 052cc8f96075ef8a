/*
 * The mappedcache extension's module and its class, MappedCache\Cache: one handle of
 * libmappedcache (mc_cache) per object, each method one call of the C ABI, with the
 * value encoding of mappedcache_values.c.
 *
 * A handle opened before fork() (PHP-FPM's master, pcntl_fork) works in the child: the
 * library opens the file again there on the child's first call.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>

#include "php.h"
#include "php_ini.h"
#include "ext/spl/spl_array.h"
#include "ext/spl/spl_exceptions.h"
#include "ext/standard/info.h"
#include "zend_exceptions.h"
#include "zend_interfaces.h"

#include "php_mappedcache.h"

ZEND_DECLARE_MODULE_GLOBALS(mappedcache)

zend_class_entry *mc_php_ce_cache, *mc_php_ce_exception, *mc_php_ce_invalid_key;
static zend_object_handlers cache_handlers;

typedef struct {
  mc_cache *cache; /* NULL once closed */
  int value_type;
  zend_string *path;
  zend_object std;
} cache_object;

static inline cache_object *cache_from(zend_object *o) {
  return (cache_object *)((char *)o - XtOffsetOf(cache_object, std));
}

static zend_object *cache_create(zend_class_entry *ce) {
  cache_object *c = zend_object_alloc(sizeof(cache_object), ce);
  zend_object_std_init(&c->std, ce);
  object_properties_init(&c->std, ce);
  c->std.handlers = &cache_handlers;
  return &c->std;
}

static void cache_free(zend_object *o) {
  cache_object *c = cache_from(o);
  if (c->cache != NULL) mc_close(c->cache);
  if (c->path != NULL) zend_string_release(c->path);
  zend_object_std_dtor(o);
}

/* The object's open handle, or NULL with an exception thrown. */
static cache_object *open_this(zval *this_zv) {
  cache_object *c = cache_from(Z_OBJ_P(this_zv));
  if (c->cache == NULL) {
    zend_throw_exception(mc_php_ce_exception, "the cache is closed (or was never opened)", MC_E_CLOSED);
    return NULL;
  }
  return c;
}

#define THIS_CACHE()                                                                                                   \
  cache_object *self = open_this(ZEND_THIS);                                                                           \
  if (self == NULL) RETURN_THROWS()

/* Throws for a negative status; true when it did. */
static inline bool failed(int status) {
  if (status >= 0) return false;
  if (!EG(exception)) mc_php_throw(status);
  return true;
}

/* ---------------------------------------------------------------------------------- */
/* Opening                                                                             */

PHP_METHOD(MappedCache_Cache, __construct) {
  zend_string *path, *value_type = NULL;
  zend_long capacity = 0;
  bool read_only = false;
  ZEND_PARSE_PARAMETERS_START(1, 4)
    Z_PARAM_PATH_STR(path)
    Z_PARAM_OPTIONAL
    Z_PARAM_LONG(capacity)
    Z_PARAM_STR_OR_NULL(value_type)
    Z_PARAM_BOOL(read_only)
  ZEND_PARSE_PARAMETERS_END();
  cache_object *c = cache_from(Z_OBJ_P(ZEND_THIS));
  if (c->cache != NULL) {
    zend_throw_error(NULL, "MappedCache\\Cache is already open");
    RETURN_THROWS();
  }
  if (capacity < 0) {
    zend_argument_value_error(2, "must be 0 (the default, 64 MiB) or a size in bytes");
    RETURN_THROWS();
  }
  mc_options options;
  mc_options_init(&options);
  options.capacity = (uint64_t)capacity;
  if (value_type != NULL) options.value_type = ZSTR_VAL(value_type);
  if (read_only) options.flags |= MC_OPEN_READ_ONLY;
  mc_cache *handle = NULL;
  int status = mc_open(ZSTR_VAL(path), &options, &handle);
  if (failed(status)) RETURN_THROWS();
  mc_info info = {.struct_size = sizeof info};
  mc_info_get(handle, &info);
  c->cache = handle;
  c->value_type = mc_php_value_type_of(info.value_type);
  c->path = zend_string_copy(path);
}

PHP_METHOD(MappedCache_Cache, close) {
  ZEND_PARSE_PARAMETERS_NONE();
  cache_object *c = cache_from(Z_OBJ_P(ZEND_THIS));
  if (c->cache != NULL) mc_close(c->cache);
  c->cache = NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Reading                                                                             */

PHP_METHOD(MappedCache_Cache, get) {
  zend_string *key;
  zval *default_value = NULL;
  ZEND_PARSE_PARAMETERS_START(1, 2)
    Z_PARAM_STR(key)
    Z_PARAM_OPTIONAL
    Z_PARAM_ZVAL(default_value)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  int status = mc_php_read(self->cache, ZSTR_VAL(key), ZSTR_LEN(key), self->value_type, return_value);
  if (status == MC_NOT_FOUND) {
    if (default_value != NULL) RETURN_COPY(default_value);
    RETURN_NULL();
  }
  if (failed(status)) RETURN_THROWS();
}

/* has and delete: one call on a key; whether it returned MC_OK. */
static void key_status(INTERNAL_FUNCTION_PARAMETERS, mc_php_key_fn fn) {
  zend_string *key;
  ZEND_PARSE_PARAMETERS_START(1, 1)
    Z_PARAM_STR(key)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  int status = fn(self->cache, ZSTR_VAL(key), ZSTR_LEN(key));
  if (failed(status)) RETURN_THROWS();
  RETURN_BOOL(status == MC_OK);
}

PHP_METHOD(MappedCache_Cache, has) { key_status(INTERNAL_FUNCTION_PARAM_PASSTHRU, mc_exists); }

PHP_METHOD(MappedCache_Cache, ttl) {
  zend_string *key;
  ZEND_PARSE_PARAMETERS_START(1, 1)
    Z_PARAM_STR(key)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  double seconds = 0;
  int status = mc_ttl(self->cache, ZSTR_VAL(key), ZSTR_LEN(key), &seconds);
  if (failed(status)) RETURN_THROWS();
  if (status == MC_NOT_FOUND) RETURN_NULL();
  RETURN_DOUBLE(seconds);
}

PHP_METHOD(MappedCache_Cache, gets) {
  zend_string *key;
  ZEND_PARSE_PARAMETERS_START(1, 1)
    Z_PARAM_STR(key)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  void *data = NULL;
  size_t length = 0;
  uint64_t version = 0;
  /* Asks the length first (capacity 0), then reads into a buffer of that length, again
   * while the value grows between the calls. */
  int status = mc_gets(self->cache, ZSTR_VAL(key), ZSTR_LEN(key), NULL, 0, &length, &version);
  while (status == MC_E_BUFFER_TOO_SMALL) {
    efree(data);
    data = emalloc(length + 1);
    size_t capacity = length;
    status = mc_gets(self->cache, ZSTR_VAL(key), ZSTR_LEN(key), data, capacity, &length, &version);
  }
  if (status == MC_NOT_FOUND) {
    efree(data);
    RETURN_NULL();
  }
  if (failed(status)) {
    efree(data);
    RETURN_THROWS();
  }
  zval value;
  zend_result r = mc_php_decode(data != NULL ? data : "", length, self->value_type, &value);
  efree(data);
  if (r != SUCCESS) RETURN_THROWS();
  array_init_size(return_value, 2);
  add_next_index_zval(return_value, &value);
  add_next_index_long(return_value, (zend_long)version);
}

PHP_METHOD(MappedCache_Cache, getMany) {
  HashTable *keys;
  ZEND_PARSE_PARAMETERS_START(1, 1)
    Z_PARAM_ARRAY_HT(keys)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  array_init_size(return_value, zend_hash_num_elements(keys));
  zval *k;
  ZEND_HASH_FOREACH_VAL(keys, k) {
    zend_string *key = mc_php_key(k);
    if (key == NULL) MC_PHP_RETURN_THROWS_FREEING();
    zval value;
    int status = mc_php_read(self->cache, ZSTR_VAL(key), ZSTR_LEN(key), self->value_type, &value);
    if (status == MC_OK) {
      zend_symtable_update(Z_ARRVAL_P(return_value), key, &value);
    } else if (status != MC_NOT_FOUND && failed(status)) {
      zend_string_release(key);
      MC_PHP_RETURN_THROWS_FREEING();
    }
    zend_string_release(key);
  }
  ZEND_HASH_FOREACH_END();
}

/* ---------------------------------------------------------------------------------- */
/* Writing                                                                             */

static void store(INTERNAL_FUNCTION_PARAMETERS, mc_php_store_fn fn, bool returns_bool) {
  zend_string *key;
  zval *value, *ttl_arg = NULL;
  ZEND_PARSE_PARAMETERS_START(2, 3)
    Z_PARAM_STR(key)
    Z_PARAM_ZVAL(value)
    Z_PARAM_OPTIONAL
    Z_PARAM_NUMBER(ttl_arg)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  double ttl;
  if (mc_php_ttl(ttl_arg, 3, &ttl) != SUCCESS) RETURN_THROWS();
  mc_php_encoded e;
  if (mc_php_encode(value, self->value_type, &e) != SUCCESS) RETURN_THROWS();
  int status = fn(self->cache, ZSTR_VAL(key), ZSTR_LEN(key), e.data, e.length, ttl);
  mc_php_encoded_release(&e);
  if (failed(status)) RETURN_THROWS();
  if (returns_bool) RETURN_BOOL(status == MC_OK);
}

PHP_METHOD(MappedCache_Cache, set) { store(INTERNAL_FUNCTION_PARAM_PASSTHRU, mc_set, false); }
PHP_METHOD(MappedCache_Cache, add) { store(INTERNAL_FUNCTION_PARAM_PASSTHRU, mc_add, true); }
PHP_METHOD(MappedCache_Cache, replace) { store(INTERNAL_FUNCTION_PARAM_PASSTHRU, mc_replace, true); }

PHP_METHOD(MappedCache_Cache, cas) {
  zend_string *key;
  zval *value, *ttl_arg = NULL;
  zend_long version;
  ZEND_PARSE_PARAMETERS_START(3, 4)
    Z_PARAM_STR(key)
    Z_PARAM_ZVAL(value)
    Z_PARAM_LONG(version)
    Z_PARAM_OPTIONAL
    Z_PARAM_NUMBER(ttl_arg)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  double ttl;
  if (mc_php_ttl(ttl_arg, 4, &ttl) != SUCCESS) RETURN_THROWS();
  mc_php_encoded e;
  if (mc_php_encode(value, self->value_type, &e) != SUCCESS) RETURN_THROWS();
  int status = mc_cas(self->cache, ZSTR_VAL(key), ZSTR_LEN(key), e.data, e.length, ttl, (uint64_t)version);
  mc_php_encoded_release(&e);
  if (failed(status)) RETURN_THROWS();
  RETURN_BOOL(status == MC_OK);
}

PHP_METHOD(MappedCache_Cache, delete) { key_status(INTERNAL_FUNCTION_PARAM_PASSTHRU, mc_delete); }

PHP_METHOD(MappedCache_Cache, touch) {
  zend_string *key;
  zval *ttl_arg;
  ZEND_PARSE_PARAMETERS_START(2, 2)
    Z_PARAM_STR(key)
    Z_PARAM_NUMBER(ttl_arg)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  double ttl;
  if (mc_php_ttl(ttl_arg, 2, &ttl) != SUCCESS) RETURN_THROWS();
  int status = mc_touch(self->cache, ZSTR_VAL(key), ZSTR_LEN(key), ttl);
  if (failed(status)) RETURN_THROWS();
  RETURN_BOOL(status == MC_OK);
}

static void count_by(INTERNAL_FUNCTION_PARAMETERS, bool down) {
  zend_string *key;
  zend_long by = 1, initial = 0;
  zval *ttl_arg = NULL;
  ZEND_PARSE_PARAMETERS_START(1, 4)
    Z_PARAM_STR(key)
    Z_PARAM_OPTIONAL
    Z_PARAM_LONG(by)
    Z_PARAM_LONG(initial)
    Z_PARAM_NUMBER(ttl_arg)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  double ttl;
  if (mc_php_ttl(ttl_arg, 4, &ttl) != SUCCESS) RETURN_THROWS();
  int64_t delta, result = 0;
  if (mc_php_delta(by, down, &delta) != SUCCESS) RETURN_THROWS();
  int status = mc_incr(self->cache, ZSTR_VAL(key), ZSTR_LEN(key), delta, initial, ttl, &result);
  if (failed(status)) RETURN_THROWS();
  RETURN_LONG((zend_long)result);
}

PHP_METHOD(MappedCache_Cache, incr) { count_by(INTERNAL_FUNCTION_PARAM_PASSTHRU, false); }
PHP_METHOD(MappedCache_Cache, decr) { count_by(INTERNAL_FUNCTION_PARAM_PASSTHRU, true); }

PHP_METHOD(MappedCache_Cache, setMany) {
  HashTable *values;
  zval *ttl_arg = NULL;
  ZEND_PARSE_PARAMETERS_START(1, 2)
    Z_PARAM_ARRAY_HT(values)
    Z_PARAM_OPTIONAL
    Z_PARAM_NUMBER(ttl_arg)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  double ttl;
  if (mc_php_ttl(ttl_arg, 2, &ttl) != SUCCESS) RETURN_THROWS();
  uint32_t n = zend_hash_num_elements(values);
  if (n == 0) return;
  const void **keys = safe_emalloc(n, sizeof(void *), 0);
  size_t *key_lengths = safe_emalloc(n, sizeof(size_t), 0);
  const void **data = safe_emalloc(n, sizeof(void *), 0);
  size_t *lengths = safe_emalloc(n, sizeof(size_t), 0);
  zend_string **key_strings = ecalloc(n, sizeof(zend_string *));
  mc_php_encoded *encoded = ecalloc(n, sizeof(mc_php_encoded));
  uint32_t count = 0;
  bool ok = true;
  zend_string *skey;
  zend_ulong ikey;
  zval *value;
  ZEND_HASH_FOREACH_KEY_VAL(values, ikey, skey, value) {
    key_strings[count] = skey != NULL ? zend_string_copy(skey) : zend_long_to_str((zend_long)ikey);
    if (mc_php_encode(value, self->value_type, &encoded[count]) != SUCCESS) {
      zend_string_release(key_strings[count]);
      ok = false;
      break;
    }
    keys[count] = ZSTR_VAL(key_strings[count]);
    key_lengths[count] = ZSTR_LEN(key_strings[count]);
    data[count] = encoded[count].data;
    lengths[count] = encoded[count].length;
    count++;
  }
  ZEND_HASH_FOREACH_END();
  int status = ok ? mc_set_many(self->cache, count, keys, key_lengths, data, lengths, ttl) : MC_OK;
  for (uint32_t i = 0; i < count; i++) {
    zend_string_release(key_strings[i]);
    mc_php_encoded_release(&encoded[i]);
  }
  efree(keys), efree(key_lengths), efree(data), efree(lengths), efree(key_strings), efree(encoded);
  if (!ok || failed(status)) RETURN_THROWS();
}

PHP_METHOD(MappedCache_Cache, deleteMany) {
  HashTable *list;
  ZEND_PARSE_PARAMETERS_START(1, 1)
    Z_PARAM_ARRAY_HT(list)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  uint32_t n = zend_hash_num_elements(list);
  if (n == 0) RETURN_LONG(0);
  const void **keys = safe_emalloc(n, sizeof(void *), 0);
  size_t *key_lengths = safe_emalloc(n, sizeof(size_t), 0);
  zend_string **key_strings = ecalloc(n, sizeof(zend_string *));
  uint32_t count = 0;
  zval *k;
  ZEND_HASH_FOREACH_VAL(list, k) {
    key_strings[count] = mc_php_key(k);
    if (key_strings[count] == NULL) break;
    keys[count] = ZSTR_VAL(key_strings[count]);
    key_lengths[count] = ZSTR_LEN(key_strings[count]);
    count++;
  }
  ZEND_HASH_FOREACH_END();
  size_t removed = 0;
  int status = count == n ? mc_delete_many(self->cache, count, keys, key_lengths, &removed) : MC_OK;
  for (uint32_t i = 0; i < count; i++) zend_string_release(key_strings[i]);
  efree(keys), efree(key_lengths), efree(key_strings);
  if (count != n || failed(status)) RETURN_THROWS();
  RETURN_LONG((zend_long)removed);
}

PHP_METHOD(MappedCache_Cache, clear) {
  ZEND_PARSE_PARAMETERS_NONE();
  THIS_CACHE();
  if (failed(mc_clear(self->cache))) RETURN_THROWS();
}

PHP_METHOD(MappedCache_Cache, sweep) {
  ZEND_PARSE_PARAMETERS_NONE();
  THIS_CACHE();
  size_t removed = 0;
  if (failed(mc_sweep(self->cache, &removed))) RETURN_THROWS();
  RETURN_LONG((zend_long)removed);
}

PHP_METHOD(MappedCache_Cache, getOrCompute) {
  zend_string *key;
  zend_fcall_info fci;
  zend_fcall_info_cache fcc;
  zval *ttl_arg = NULL;
  double wait = 30;
  bool serve_stale = false;
  ZEND_PARSE_PARAMETERS_START(2, 5)
    Z_PARAM_STR(key)
    Z_PARAM_FUNC(fci, fcc)
    Z_PARAM_OPTIONAL
    Z_PARAM_NUMBER(ttl_arg)
    Z_PARAM_DOUBLE(wait)
    Z_PARAM_BOOL(serve_stale)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  double ttl;
  if (mc_php_ttl(ttl_arg, 3, &ttl) != SUCCESS) RETURN_THROWS();
  if (!(wait >= 0) || isinf(wait)) {
    zend_argument_value_error(4, "must be a number of seconds, 0 or more");
    RETURN_THROWS();
  }
  zval arg;
  ZVAL_STR(&arg, key);
  fci.params = &arg;
  fci.param_count = 1;
  uint32_t flags = serve_stale ? MC_CLAIM_SERVE_STALE : 0;
  if (mc_php_get_or_compute(self->cache, self->value_type, key, &fci, &fcc, ttl, wait, flags, return_value) !=
      SUCCESS) {
    RETURN_THROWS();
  }
}

/* ---------------------------------------------------------------------------------- */
/* Iteration, statistics, checks                                                       */

typedef struct {
  zval *array;
  int value_type;
  bool keys_only;
  bool failed;
} visit_context;

static int visit_entry(void *context, const void *key, size_t key_length, const void *value, size_t value_length,
                       double ttl) {
  visit_context *v = context;
  zval entry;
  if (v->keys_only) {
    ZVAL_STRINGL(&entry, key, key_length);
    add_next_index_zval(v->array, &entry);
    return 0;
  }
  if (mc_php_decode(value, value_length, v->value_type, &entry) != SUCCESS) {
    v->failed = true;
    return 1;
  }
  zend_symtable_str_update(Z_ARRVAL_P(v->array), key, key_length, &entry);
  return 0;
}

static void collect(INTERNAL_FUNCTION_PARAMETERS, bool keys_only) {
  THIS_CACHE();
  array_init(return_value);
  visit_context v = {.array = return_value, .value_type = self->value_type, .keys_only = keys_only};
  int status = mc_foreach(self->cache, keys_only ? MC_FOREACH_KEYS_ONLY : 0, visit_entry, &v);
  if (v.failed || failed(status)) MC_PHP_RETURN_THROWS_FREEING();
}

PHP_METHOD(MappedCache_Cache, keys) {
  ZEND_PARSE_PARAMETERS_NONE();
  collect(INTERNAL_FUNCTION_PARAM_PASSTHRU, true);
}

PHP_METHOD(MappedCache_Cache, toArray) {
  ZEND_PARSE_PARAMETERS_NONE();
  collect(INTERNAL_FUNCTION_PARAM_PASSTHRU, false);
}

PHP_METHOD(MappedCache_Cache, getIterator) {
  ZEND_PARSE_PARAMETERS_NONE();
  zval entries;
  collect(INTERNAL_FUNCTION_PARAM_PASSTHRU, false);
  if (EG(exception)) RETURN_THROWS();
  ZVAL_COPY_VALUE(&entries, return_value);
  object_init_ex(return_value, spl_ce_ArrayIterator);
  zend_call_known_instance_method_with_1_params(spl_ce_ArrayIterator->constructor, Z_OBJ_P(return_value), NULL,
                                                &entries);
  zval_ptr_dtor(&entries);
}

PHP_METHOD(MappedCache_Cache, stats) {
  ZEND_PARSE_PARAMETERS_NONE();
  THIS_CACHE();
  mc_stats s = {.struct_size = sizeof s};
  if (failed(mc_stats_get(self->cache, &s))) RETURN_THROWS();
  array_init_size(return_value, 19);
#define STAT(name) add_assoc_long(return_value, #name, (zend_long)s.name)
  STAT(entries), STAT(live_bytes), STAT(capacity), STAT(hits), STAT(misses), STAT(busy_misses), STAT(sets);
  STAT(evictions), STAT(expirations), STAT(recoveries), STAT(removals), STAT(lock_takeovers), STAT(slot_count);
  STAT(max_entries), STAT(count_limit), STAT(cost_limit), STAT(partition_count), STAT(index_splits);
  STAT(index_merges);
#undef STAT
}

PHP_METHOD(MappedCache_Cache, info) {
  ZEND_PARSE_PARAMETERS_NONE();
  THIS_CACHE();
  mc_info info = {.struct_size = sizeof info};
  if (failed(mc_info_get(self->cache, &info))) RETURN_THROWS();
  array_init_size(return_value, 7);
  add_assoc_str(return_value, "path", zend_string_copy(self->path));
  add_assoc_long(return_value, "capacity", (zend_long)info.capacity);
  add_assoc_long(return_value, "max_key_size", (zend_long)info.max_key_size);
  add_assoc_long(return_value, "max_value_size", (zend_long)info.max_value_size);
  add_assoc_bool(return_value, "writable", info.writable != 0);
  add_assoc_string(return_value, "value_type", info.value_type);
  add_assoc_long(return_value, "partition_count", (zend_long)info.partition_count);
}

PHP_METHOD(MappedCache_Cache, verify) {
  bool repair = false;
  ZEND_PARSE_PARAMETERS_START(0, 1)
    Z_PARAM_OPTIONAL
    Z_PARAM_BOOL(repair)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  size_t problems = 0;
  int status = mc_verify(self->cache, repair ? 1 : 0, &problems);
  if (status != MC_E_CORRUPTED && failed(status)) RETURN_THROWS();
  RETURN_LONG((zend_long)problems);
}

PHP_METHOD(MappedCache_Cache, grow) {
  zend_long capacity;
  ZEND_PARSE_PARAMETERS_START(1, 1)
    Z_PARAM_LONG(capacity)
  ZEND_PARSE_PARAMETERS_END();
  THIS_CACHE();
  int64_t grown = 0;
  if (failed(mc_grow(self->cache, capacity, &grown))) RETURN_THROWS();
  RETURN_LONG((zend_long)grown);
}

/* ---------------------------------------------------------------------------------- */
/* Registration                                                                        */

#include "mappedcache_arginfo.h"

static PHP_INI_MH(on_update_serializer) {
  const char *v = ZSTR_VAL(new_value);
  if (ZSTR_LEN(new_value) != 0 && strcmp(v, "php") != 0 && strcmp(v, "igbinary") != 0 && strcmp(v, "auto") != 0) {
    php_error_docref(NULL, E_WARNING, "mappedcache.serializer must be php, igbinary or auto, not \"%s\"", v);
    return FAILURE;
  }
  return OnUpdateString(entry, new_value, mh_arg1, mh_arg2, mh_arg3, stage);
}

PHP_INI_BEGIN()
  STD_PHP_INI_ENTRY("mappedcache.path", "", PHP_INI_ALL, OnUpdateString, path, zend_mappedcache_globals,
                    mappedcache_globals)
  STD_PHP_INI_ENTRY("mappedcache.capacity", "64M", PHP_INI_ALL, OnUpdateLong, capacity, zend_mappedcache_globals,
                    mappedcache_globals)
  STD_PHP_INI_ENTRY("mappedcache.serializer", "auto", PHP_INI_ALL, on_update_serializer, serializer,
                    zend_mappedcache_globals, mappedcache_globals)
PHP_INI_END()

static PHP_GINIT_FUNCTION(mappedcache) {
#if defined(COMPILE_DL_MAPPEDCACHE) && defined(ZTS)
  ZEND_TSRMLS_CACHE_UPDATE();
#endif
  memset(mappedcache_globals, 0, sizeof *mappedcache_globals);
}

/* CacheException's constants: the C ABI's error codes (getCode()), named as in mappedcache.h. */
static const struct {
  const char *name;
  int code;
} error_codes[] = {
    {"INVALID_ARGUMENT", MC_E_INVALID_ARGUMENT}, {"CLOSED", MC_E_CLOSED}, {"NO_MEMORY", MC_E_NO_MEMORY},
    {"EMPTY_KEY", MC_E_EMPTY_KEY}, {"KEY_TOO_LARGE", MC_E_KEY_TOO_LARGE}, {"INVALID_KEY", MC_E_INVALID_KEY},
    {"VALUE_TOO_LARGE", MC_E_VALUE_TOO_LARGE}, {"INVALID_VALUE", MC_E_INVALID_VALUE},
    {"NOT_A_CACHE_FILE", MC_E_NOT_A_CACHE_FILE}, {"INCOMPATIBLE_FORMAT", MC_E_INCOMPATIBLE_FORMAT},
    {"TYPE_MISMATCH", MC_E_TYPE_MISMATCH}, {"DECODING_FAILED", MC_E_DECODING_FAILED},
    {"ENCODING_FAILED", MC_E_ENCODING_FAILED}, {"CORRUPTED", MC_E_CORRUPTED}, {"READ_ONLY", MC_E_READ_ONLY},
    {"UNSAFE_FILE", MC_E_UNSAFE_FILE}, {"FILE_REPLACED", MC_E_FILE_REPLACED}, {"DISK_FULL", MC_E_DISK_FULL},
    {"TOO_MANY_PROCESSES", MC_E_TOO_MANY_PROCESSES}, {"NOT_AN_INTEGER", MC_E_NOT_AN_INTEGER},
    {"TIMED_OUT", MC_E_TIMED_OUT}, {"COMPUTE_FAILED", MC_E_COMPUTE_FAILED}, {"SYSTEM", MC_E_SYSTEM},
    {"FORKED", MC_E_FORKED}, {"OTHER", MC_E_OTHER},
};

static PHP_MINIT_FUNCTION(mappedcache) {
  REGISTER_INI_ENTRIES();
  mc_php_ce_exception = register_class_MappedCache_CacheException(spl_ce_RuntimeException);
  for (size_t i = 0; i < sizeof error_codes / sizeof error_codes[0]; i++) {
    zend_declare_class_constant_long(mc_php_ce_exception, error_codes[i].name, strlen(error_codes[i].name),
                                     error_codes[i].code);
  }
  mc_php_ce_invalid_key = register_class_MappedCache_InvalidKeyException(mc_php_ce_exception);
  mc_php_ce_cache = register_class_MappedCache_Cache(zend_ce_aggregate);
  mc_php_ce_cache->create_object = cache_create;
  memcpy(&cache_handlers, zend_get_std_object_handlers(), sizeof cache_handlers);
  cache_handlers.offset = XtOffsetOf(cache_object, std);
  cache_handlers.free_obj = cache_free;
  cache_handlers.clone_obj = NULL;
  return SUCCESS;
}

static PHP_MSHUTDOWN_FUNCTION(mappedcache) {
  if (MCG(cache) != NULL) mc_close(MCG(cache));
  MCG(cache) = NULL;
  if (MCG(open_path) != NULL) zend_string_release(MCG(open_path));
  MCG(open_path) = NULL;
  UNREGISTER_INI_ENTRIES();
  return SUCCESS;
}

static PHP_MINFO_FUNCTION(mappedcache) {
  php_info_print_table_start();
  php_info_print_table_row(2, "MappedCache support", "enabled");
  php_info_print_table_row(2, "Extension version", PHP_MAPPEDCACHE_VERSION);
  php_info_print_table_row(2, "libmappedcache version", mc_version());
  php_info_print_table_end();
  DISPLAY_INI_ENTRIES();
}

zend_module_entry mappedcache_module_entry = {
    STANDARD_MODULE_HEADER,
    "mappedcache",
    ext_functions,
    PHP_MINIT(mappedcache),
    PHP_MSHUTDOWN(mappedcache),
    NULL,
    NULL,
    PHP_MINFO(mappedcache),
    PHP_MAPPEDCACHE_VERSION,
    PHP_MODULE_GLOBALS(mappedcache),
    PHP_GINIT(mappedcache),
    NULL,
    NULL,
    STANDARD_MODULE_PROPERTIES_EX,
};

#ifdef COMPILE_DL_MAPPEDCACHE
#ifdef ZTS
ZEND_TSRMLS_CACHE_DEFINE()
#endif
ZEND_GET_MODULE(mappedcache)
#endif
