import CMappedCacheABI
import MappedCache

// mappedcache.h: writing (mc_set, mc_add, mc_replace, mc_cas, mc_delete, mc_touch,
// mc_incr, mc_set_many, mc_delete_many, mc_clear, mc_sweep, mc_set_limits).

@_cdecl("mc_set")
public func mcSet(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ value: UnsafeRawPointer?,
  _ valueLength: Int, _ ttl: Double
) -> Int32 {
  Handles.withStore(cache) { store in
    let k = try Arguments.key(key, keyLength, maxKey: store.maxKey)
    let v = try Arguments.value(value, valueLength, maxValue: store.maxValue)
    try store.set(k, v, expires: try Arguments.expiry(ttl))
    return MC_OK
  }
}

/// `mc_add`, `mc_replace` and `mc_cas`: MC_OK when stored, MC_NOT_STORED when not.
private func conditionalSet(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ value: UnsafeRawPointer?,
  _ valueLength: Int, _ ttl: Double, _ condition: WriteCondition
) -> Int32 {
  Handles.withStore(cache) { store in
    let k = try Arguments.key(key, keyLength, maxKey: store.maxKey)
    let v = try Arguments.value(value, valueLength, maxValue: store.maxValue)
    let stored = try store.set(
      String(decoding: k, as: UTF8.self), v, expires: try Arguments.expiry(ttl), if: condition)
    return stored ? MC_OK : MC_NOT_STORED
  }
}

@_cdecl("mc_add")
public func mcAdd(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ value: UnsafeRawPointer?,
  _ valueLength: Int, _ ttl: Double
) -> Int32 {
  conditionalSet(cache, key, keyLength, value, valueLength, ttl, .absent)
}

@_cdecl("mc_replace")
public func mcReplace(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ value: UnsafeRawPointer?,
  _ valueLength: Int, _ ttl: Double
) -> Int32 {
  conditionalSet(cache, key, keyLength, value, valueLength, ttl, .present)
}

@_cdecl("mc_cas")
public func mcCAS(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ value: UnsafeRawPointer?,
  _ valueLength: Int, _ ttl: Double, _ version: UInt64
) -> Int32 {
  conditionalSet(cache, key, keyLength, value, valueLength, ttl, .version(version))
}

@_cdecl("mc_delete")
public func mcDelete(_ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int) -> Int32 {
  Handles.answer(cache, key, keyLength) { try $0.delete($1) }
}

@_cdecl("mc_touch")
public func mcTouch(_ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ ttl: Double) -> Int32 {
  Handles.answer(cache, key, keyLength) { store, k in try store.touch(k, expires: try Arguments.expiry(ttl)) }
}

@_cdecl("mc_incr")
public func mcIncr(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ delta: Int64, _ initial: Int64,
  _ ttl: Double, _ result: UnsafeMutablePointer<Int64>?
) -> Int32 {
  Handles.withStore(cache) { store in
    let k = try Arguments.key(key, keyLength, maxKey: store.maxKey)
    // 0 keeps an existing counter's expiry here, rather than making it never expire.
    let expires = ttl == 0 ? nil : try Arguments.expiry(ttl)
    let n = try store.increment(String(decoding: k, as: UTF8.self), by: delta, initial: initial, expires: expires)
    result?.pointee = n
    return MC_OK
  }
}

@_cdecl("mc_set_many")
public func mcSetMany(
  _ cache: OpaquePointer?, _ count: Int, _ keys: UnsafePointer<UnsafeRawPointer?>?,
  _ keyLengths: UnsafePointer<Int>?, _ values: UnsafePointer<UnsafeRawPointer?>?,
  _ valueLengths: UnsafePointer<Int>?, _ ttl: Double
) -> Int32 {
  Handles.withStore(cache) { store in
    let n = try Arguments.count(
      count, keys: keys, keyLengths: keyLengths,
      [(UnsafeRawPointer(values), "values"), (UnsafeRawPointer(valueLengths), "value_lengths")])
    let expires = try Arguments.expiry(ttl)
    guard n > 0, let keys, let keyLengths, let values, let valueLengths else { return MC_OK }
    let k = UnsafeMutableBufferPointer<UnsafeRawBufferPointer>.allocate(capacity: n)
    let v = UnsafeMutableBufferPointer<UnsafeRawBufferPointer>.allocate(capacity: n)
    defer {
      k.deallocate()
      v.deallocate()
    }
    for j in 0..<n {
      k[j] = try Arguments.key(keys[j], keyLengths[j], maxKey: store.maxKey)
      v[j] = try Arguments.value(values[j], valueLengths[j], maxValue: store.maxValue)
    }
    try store.setMany(UnsafeBufferPointer(k), UnsafeBufferPointer(v), expires: expires)
    return MC_OK
  }
}

@_cdecl("mc_delete_many")
public func mcDeleteMany(
  _ cache: OpaquePointer?, _ count: Int, _ keys: UnsafePointer<UnsafeRawPointer?>?,
  _ keyLengths: UnsafePointer<Int>?, _ removed: UnsafeMutablePointer<Int>?
) -> Int32 {
  Handles.withStore(cache) { store in
    let n = try Arguments.count(count, keys: keys, keyLengths: keyLengths)
    var list: [String] = []
    if n > 0, let keys, let keyLengths {
      list.reserveCapacity(n)
      for j in 0..<n {
        list.append(String(decoding: try Arguments.key(keys[j], keyLengths[j], maxKey: store.maxKey), as: UTF8.self))
      }
    }
    let gone = list.isEmpty ? 0 : try store.deleteMany(list)
    removed?.pointee = gone
    return MC_OK
  }
}

@_cdecl("mc_clear")
public func mcClear(_ cache: OpaquePointer?) -> Int32 {
  Handles.withStore(cache) { store in
    try store.clear()
    return MC_OK
  }
}

@_cdecl("mc_sweep")
public func mcSweep(_ cache: OpaquePointer?, _ removed: UnsafeMutablePointer<Int>?) -> Int32 {
  Handles.withStore(cache) { store in
    let n = try store.sweep()
    removed?.pointee = n
    return MC_OK
  }
}

@_cdecl("mc_set_limits")
public func mcSetLimits(_ cache: OpaquePointer?, _ countLimit: Int64, _ costLimit: Int64) -> Int32 {
  Handles.withStore(cache) { store in
    try store.setLimits(
      count: countLimit < 0 ? nil : Int(countLimit), cost: costLimit < 0 ? nil : Int(costLimit))
    return MC_OK
  }
}
