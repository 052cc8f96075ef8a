// `SystemError` and `Errno`, which `CacheError.system` carries, live in the package's
// system-call target (`Sources/SystemCalls`): re-exported here so that `import
// MappedCache` is all an application needs to catch and read them.
@_exported import SystemCalls
