/*
 * Argument and return types of the extension's functions and methods, as
 * stubs/mappedcache.php declares them (written by hand in gen_stub.php's form: the build
 * runs offline, and gen_stub.php fetches a parser).
 */

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_mappedcache_fetch, 0, 1, IS_MIXED, 0)
  ZEND_ARG_TYPE_MASK(0, key, MAY_BE_STRING | MAY_BE_ARRAY, NULL)
  ZEND_ARG_INFO_WITH_DEFAULT_VALUE(1, success, "null")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_MASK_EX(arginfo_mappedcache_store, 0, 1, MAY_BE_BOOL | MAY_BE_ARRAY)
  ZEND_ARG_TYPE_MASK(0, key, MAY_BE_STRING | MAY_BE_ARRAY, NULL)
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, var, IS_MIXED, 0, "null")
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, ttl, IS_LONG, 0, "0")
ZEND_END_ARG_INFO()

#define arginfo_mappedcache_add arginfo_mappedcache_store

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_MASK_EX(arginfo_mappedcache_delete, 0, 1, MAY_BE_BOOL | MAY_BE_ARRAY)
  ZEND_ARG_TYPE_MASK(0, key, MAY_BE_STRING | MAY_BE_ARRAY, NULL)
ZEND_END_ARG_INFO()

#define arginfo_mappedcache_exists arginfo_mappedcache_delete

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_MASK_EX(arginfo_mappedcache_inc, 0, 1, MAY_BE_LONG | MAY_BE_FALSE)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, step, IS_LONG, 0, "1")
  ZEND_ARG_INFO_WITH_DEFAULT_VALUE(1, success, "null")
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, ttl, IS_LONG, 0, "0")
ZEND_END_ARG_INFO()

#define arginfo_mappedcache_dec arginfo_mappedcache_inc

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_mappedcache_cas, 0, 3, _IS_BOOL, 0)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO(0, old, IS_LONG, 0)
  ZEND_ARG_TYPE_INFO(0, new, IS_LONG, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_mappedcache_entry, 0, 2, IS_MIXED, 0)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO(0, generator, IS_CALLABLE, 0)
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, ttl, IS_LONG, 0, "0")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_MASK_EX(arginfo_mappedcache_cache_info, 0, 0, MAY_BE_ARRAY | MAY_BE_FALSE)
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, limited, _IS_BOOL, 0, "false")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_mappedcache_clear_cache, 0, 0, _IS_BOOL, 0)
ZEND_END_ARG_INFO()

#define arginfo_mappedcache_enabled arginfo_mappedcache_clear_cache

/* MappedCache\Cache */

ZEND_BEGIN_ARG_INFO_EX(arginfo_class_MappedCache_Cache___construct, 0, 0, 1)
  ZEND_ARG_TYPE_INFO(0, path, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, capacity, IS_LONG, 0, "0")
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, valueType, IS_STRING, 1, "null")
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, readOnly, _IS_BOOL, 0, "false")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_close, 0, 0, IS_VOID, 0)
ZEND_END_ARG_INFO()

#define arginfo_class_MappedCache_Cache_clear arginfo_class_MappedCache_Cache_close

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_get, 0, 1, IS_MIXED, 0)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, default, IS_MIXED, 0, "null")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_has, 0, 1, _IS_BOOL, 0)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
ZEND_END_ARG_INFO()

#define arginfo_class_MappedCache_Cache_delete arginfo_class_MappedCache_Cache_has

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_ttl, 0, 1, IS_DOUBLE, 1)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_gets, 0, 1, IS_ARRAY, 1)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_getMany, 0, 1, IS_ARRAY, 0)
  ZEND_ARG_TYPE_INFO(0, keys, IS_ARRAY, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_set, 0, 2, IS_VOID, 0)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO(0, value, IS_MIXED, 0)
  ZEND_ARG_TYPE_MASK(0, ttl, MAY_BE_LONG | MAY_BE_DOUBLE, "0")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_add, 0, 2, _IS_BOOL, 0)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO(0, value, IS_MIXED, 0)
  ZEND_ARG_TYPE_MASK(0, ttl, MAY_BE_LONG | MAY_BE_DOUBLE, "0")
ZEND_END_ARG_INFO()

#define arginfo_class_MappedCache_Cache_replace arginfo_class_MappedCache_Cache_add

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_cas, 0, 3, _IS_BOOL, 0)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO(0, value, IS_MIXED, 0)
  ZEND_ARG_TYPE_INFO(0, version, IS_LONG, 0)
  ZEND_ARG_TYPE_MASK(0, ttl, MAY_BE_LONG | MAY_BE_DOUBLE, "0")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_touch, 0, 2, _IS_BOOL, 0)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
  ZEND_ARG_TYPE_MASK(0, ttl, MAY_BE_LONG | MAY_BE_DOUBLE, NULL)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_incr, 0, 1, IS_LONG, 0)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, by, IS_LONG, 0, "1")
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, initial, IS_LONG, 0, "0")
  ZEND_ARG_TYPE_MASK(0, ttl, MAY_BE_LONG | MAY_BE_DOUBLE, "0")
ZEND_END_ARG_INFO()

#define arginfo_class_MappedCache_Cache_decr arginfo_class_MappedCache_Cache_incr

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_setMany, 0, 1, IS_VOID, 0)
  ZEND_ARG_TYPE_INFO(0, values, IS_ARRAY, 0)
  ZEND_ARG_TYPE_MASK(0, ttl, MAY_BE_LONG | MAY_BE_DOUBLE, "0")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_deleteMany, 0, 1, IS_LONG, 0)
  ZEND_ARG_TYPE_INFO(0, keys, IS_ARRAY, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_sweep, 0, 0, IS_LONG, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_getOrCompute, 0, 2, IS_MIXED, 0)
  ZEND_ARG_TYPE_INFO(0, key, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO(0, compute, IS_CALLABLE, 0)
  ZEND_ARG_TYPE_MASK(0, ttl, MAY_BE_LONG | MAY_BE_DOUBLE, "0")
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, wait, IS_DOUBLE, 0, "30.0")
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, serveStale, _IS_BOOL, 0, "false")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_keys, 0, 0, IS_ARRAY, 0)
ZEND_END_ARG_INFO()

#define arginfo_class_MappedCache_Cache_toArray arginfo_class_MappedCache_Cache_keys
#define arginfo_class_MappedCache_Cache_stats arginfo_class_MappedCache_Cache_keys
#define arginfo_class_MappedCache_Cache_info arginfo_class_MappedCache_Cache_keys

ZEND_BEGIN_ARG_WITH_RETURN_OBJ_INFO_EX(arginfo_class_MappedCache_Cache_getIterator, 0, 0, Iterator, 0)
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_verify, 0, 0, IS_LONG, 0)
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, repair, _IS_BOOL, 0, "false")
ZEND_END_ARG_INFO()

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_class_MappedCache_Cache_grow, 0, 1, IS_LONG, 0)
  ZEND_ARG_TYPE_INFO(0, capacity, IS_LONG, 0)
ZEND_END_ARG_INFO()

ZEND_FUNCTION(mappedcache_fetch);
ZEND_FUNCTION(mappedcache_store);
ZEND_FUNCTION(mappedcache_add);
ZEND_FUNCTION(mappedcache_delete);
ZEND_FUNCTION(mappedcache_exists);
ZEND_FUNCTION(mappedcache_inc);
ZEND_FUNCTION(mappedcache_dec);
ZEND_FUNCTION(mappedcache_cas);
ZEND_FUNCTION(mappedcache_entry);
ZEND_FUNCTION(mappedcache_cache_info);
ZEND_FUNCTION(mappedcache_clear_cache);
ZEND_FUNCTION(mappedcache_enabled);

static const zend_function_entry ext_functions[] = {
  ZEND_FE(mappedcache_fetch, arginfo_mappedcache_fetch)
  ZEND_FE(mappedcache_store, arginfo_mappedcache_store)
  ZEND_FE(mappedcache_add, arginfo_mappedcache_add)
  ZEND_FE(mappedcache_delete, arginfo_mappedcache_delete)
  ZEND_FE(mappedcache_exists, arginfo_mappedcache_exists)
  ZEND_FE(mappedcache_inc, arginfo_mappedcache_inc)
  ZEND_FE(mappedcache_dec, arginfo_mappedcache_dec)
  ZEND_FE(mappedcache_cas, arginfo_mappedcache_cas)
  ZEND_FE(mappedcache_entry, arginfo_mappedcache_entry)
  ZEND_FE(mappedcache_cache_info, arginfo_mappedcache_cache_info)
  ZEND_FE(mappedcache_clear_cache, arginfo_mappedcache_clear_cache)
  ZEND_FE(mappedcache_enabled, arginfo_mappedcache_enabled)
  ZEND_FE_END
};

#define MC_METHODS(X)                                                                                                  \
  X(__construct) X(close) X(get) X(has) X(ttl) X(gets) X(getMany) X(set) X(add) X(replace) X(cas) X(delete) X(touch)   \
  X(incr) X(decr) X(setMany) X(deleteMany) X(clear) X(sweep) X(getOrCompute) X(keys) X(toArray) X(getIterator)        \
  X(stats) X(info) X(verify) X(grow)

#define MC_DECLARE(name) ZEND_METHOD(MappedCache_Cache, name);
MC_METHODS(MC_DECLARE)
#undef MC_DECLARE

static const zend_function_entry class_MappedCache_Cache_methods[] = {
#define MC_ENTRY(name) ZEND_ME(MappedCache_Cache, name, arginfo_class_MappedCache_Cache_##name, ZEND_ACC_PUBLIC)
  MC_METHODS(MC_ENTRY)
#undef MC_ENTRY
  ZEND_FE_END
};

static const zend_function_entry class_MappedCache_CacheException_methods[] = {ZEND_FE_END};

static zend_class_entry *register_class_MappedCache_CacheException(zend_class_entry *parent) {
  zend_class_entry ce;
  INIT_NS_CLASS_ENTRY(ce, "MappedCache", "CacheException", class_MappedCache_CacheException_methods);
  return zend_register_internal_class_ex(&ce, parent);
}

static zend_class_entry *register_class_MappedCache_InvalidKeyException(zend_class_entry *parent) {
  zend_class_entry ce;
  INIT_NS_CLASS_ENTRY(ce, "MappedCache", "InvalidKeyException", class_MappedCache_CacheException_methods);
  return zend_register_internal_class_ex(&ce, parent);
}

static zend_class_entry *register_class_MappedCache_Cache(zend_class_entry *aggregate) {
  zend_class_entry ce;
  INIT_NS_CLASS_ENTRY(ce, "MappedCache", "Cache", class_MappedCache_Cache_methods);
  zend_class_entry *class_entry = zend_register_internal_class_ex(&ce, NULL);
  class_entry->ce_flags |= ZEND_ACC_FINAL | ZEND_ACC_NOT_SERIALIZABLE;
  zend_class_implements(class_entry, 1, aggregate);
  return class_entry;
}
