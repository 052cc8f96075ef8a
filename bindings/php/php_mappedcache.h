/*
 * The mappedcache extension: MappedCache\Cache (mappedcache.c), APCu's functions over the
 * cache that php.ini names (mappedcache_functions.c) and the value encoding both use
 * (mappedcache_values.c). A thin layer over libmappedcache's C ABI (mappedcache.h).
 */
#ifndef PHP_MAPPEDCACHE_H
#define PHP_MAPPEDCACHE_H

#include "php.h"
#include "mappedcache.h"

extern zend_module_entry mappedcache_module_entry;
#define phpext_mappedcache_ptr &mappedcache_module_entry

#define PHP_MAPPEDCACHE_VERSION "0.1.0"

ZEND_BEGIN_MODULE_GLOBALS(mappedcache)
  char *path;              /* mappedcache.path */
  zend_long capacity;      /* mappedcache.capacity */
  char *serializer;        /* mappedcache.serializer: php, igbinary or auto */
  mc_cache *cache;         /* the functions' cache, opened on first use */
  zend_string *open_path;  /* the path it was opened at */
  int value_type;          /* its value type (enum mc_php_value_type) */
ZEND_END_MODULE_GLOBALS(mappedcache)

ZEND_EXTERN_MODULE_GLOBALS(mappedcache)
#define MCG(v) ZEND_MODULE_GLOBALS_ACCESSOR(mappedcache, v)

/* The value types of mc_info, as this extension encodes PHP values for each. */
enum mc_php_value_type { MC_PHP_BYTES, MC_PHP_STRING, MC_PHP_INT64, MC_PHP_PYTHON };

/* A value's bytes as stored, and what owns them (NULL when they are the zval's own). */
typedef struct {
  const char *data;
  size_t length;
  zend_string *owned;
  char digits[24];
} mc_php_encoded;

/* The value type named by mc_info's value_type. */
int mc_php_value_type_of(const char *name);
/* Encodes value for a cache of `type`; FAILURE with an exception thrown. */
zend_result mc_php_encode(zval *value, int type, mc_php_encoded *out);
void mc_php_encoded_release(mc_php_encoded *e);
/* Decodes stored bytes into *out; FAILURE with an exception thrown. */
zend_result mc_php_decode(const char *data, size_t length, int type, zval *out);

/* Reads key's value into *out: MC_OK, MC_NOT_FOUND or a negative status. */
int mc_php_read(mc_cache *cache, const char *key, size_t key_length, int type, zval *out);

/* The C ABI's calls on one key (mc_exists, mc_delete) and its stores (mc_set, mc_add,
 * mc_replace), which both APIs pass to one function each. */
typedef int (*mc_php_key_fn)(mc_cache *, const void *, size_t);
typedef int (*mc_php_store_fn)(mc_cache *, const void *, size_t, const void *, size_t, double);

/* A key of an iterable or array: a string, or an int as its decimal string; NULL with a
 * TypeError thrown. */
zend_string *mc_php_key(zval *k);

/* Throws the exception for a status of the C ABI (with the library's message). */
void mc_php_throw(int status);
/* A time-to-live argument in seconds: 0 never expires; FAILURE (ValueError) if negative. */
zend_result mc_php_ttl(zval *ttl, uint32_t arg_num, double *seconds);

/* What an increment by `by` adds, or a decrement (`down`) subtracts; FAILURE (ValueError
 * on argument 2) when -by is out of range. */
zend_result mc_php_delta(zend_long by, bool down, int64_t *delta);

/* Get-or-compute for both APIs: the value of key, computing it with fci (passing args)
 * once across every process when missing. FAILURE with an exception thrown. */
zend_result mc_php_get_or_compute(mc_cache *cache, int type, zend_string *key, zend_fcall_info *fci,
                                  zend_fcall_info_cache *fcc, double ttl, double wait, uint32_t flags, zval *out);

/* Returns after an exception from a function that had begun filling return_value (an
 * array), freeing what it held. */
#define MC_PHP_RETURN_THROWS_FREEING()                                                                                 \
  do {                                                                                                                 \
    zval_ptr_dtor(return_value);                                                                                       \
    ZVAL_NULL(return_value);                                                                                           \
    RETURN_THROWS();                                                                                                   \
  } while (0)

extern zend_class_entry *mc_php_ce_cache, *mc_php_ce_exception, *mc_php_ce_invalid_key;

void mc_php_register_functions_globals(void);

#endif
