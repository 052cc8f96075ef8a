import CMappedCacheABI
import Foundation
import MappedCache

// mappedcache.h: reading (mc_get, mc_get_alloc, mc_gets, mc_exists, mc_ttl, mc_get_many).

/// The status of a read that found a value of `length` bytes for a buffer of `capacity`.
@inline(__always)
func copiedStatus(_ length: Int, _ capacity: Int) -> Int32 {
  length <= capacity ? MC_OK : bufferTooSmall(length, capacity)
}

/// Out of line: the hot reads keep none of an error's making.
@inline(never)
func bufferTooSmall(_ length: Int, _ capacity: Int) -> Int32 {
  failure(ABIError.bufferTooSmall(needed: length, capacity: capacity))
}

@_cdecl("mc_get")
public func mcGet(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ buffer: UnsafeMutableRawPointer?,
  _ capacity: Int, _ length: UnsafeMutablePointer<Int>?
) -> Int32 {
  // The hottest call, in two parts: a handle open in this process, an ASCII key and a
  // buffer read at once; anything else (an error, the first use in a child of fork, a
  // key of other UTF-8, a NULL buffer of capacity 0 asking only the length) takes
  // `getChecked`, which makes every check in the order the header gives and names what
  // failed. No retain, no throw and no dispatch over the value type here, and no call
  // but the read's, so that little is saved and restored around it.
  guard let opened = Handles.openCache(cache), let key, let buffer, let length, capacity >= 0
  else { return getChecked(cache, key, keyLength, buffer, capacity, length) }
  return opened._withUnsafeGuaranteedRef { openCache in
    guard let current = openCache.storeIfCurrent else {
      return getChecked(cache, key, keyLength, buffer, capacity, length)
    }
    return current._withUnsafeGuaranteedRef { store in
      // 1 ... maxKey bytes, in one compare, before the key is looked at.
      guard UInt(bitPattern: keyLength &- 1) < UInt(bitPattern: store.maxKey),
        UTF8Check.isASCII(UnsafeRawBufferPointer(start: key, count: keyLength))
      else { return getChecked(cache, key, keyLength, buffer, capacity, length) }
      let k = UnsafeRawBufferPointer(start: key, count: keyLength)
      let n = store.get(checkedKey: k, into: UnsafeMutableRawBufferPointer(start: buffer, count: capacity))
      guard n >= 0 else { return MC_NOT_FOUND }
      length.pointee = n
      return copiedStatus(n, capacity)
    }
  }
}

/// `mc_get` with every check made and every failure named: its calls that are not a
/// plain read by an open handle.
@inline(never)
func getChecked(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ buffer: UnsafeMutableRawPointer?,
  _ capacity: Int, _ length: UnsafeMutablePointer<Int>?
) -> Int32 {
  Handles.withStore(cache) { store in
    let k = try Arguments.key(key, keyLength, maxKey: store.maxKey)
    let b = try Arguments.buffer(buffer, capacity)
    let out = try Arguments.output(length, "the length pointer")
    guard let n = try store.get(k, into: b) else { return MC_NOT_FOUND }
    out.pointee = n
    return copiedStatus(n, capacity)
  }
}

@_cdecl("mc_get_alloc")
public func mcGetAlloc(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int,
  _ value: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, _ length: UnsafeMutablePointer<Int>?
) -> Int32 {
  value?.pointee = nil
  return Handles.withStore(cache) { store in
    let k = try Arguments.key(key, keyLength, maxKey: store.maxKey)
    let out = try Arguments.output(value, "the value pointer")
    let outLength = try Arguments.output(length, "the length pointer")
    // A first read sized for small values; a larger one is read again at its size (a
    // few times, should it keep growing meanwhile).
    var size = 256
    for _ in 0..<16 {
      guard let memory = malloc(max(size, 1)) else { throw ABIError.noMemory("\(size) bytes for a value") }
      let n: Int?
      do { n = try store.get(k, into: UnsafeMutableRawBufferPointer(start: memory, count: size)) } catch {
        free(memory)
        throw error
      }
      guard let n else {
        free(memory)
        return MC_NOT_FOUND
      }
      if n <= size {
        out.pointee = memory
        outLength.pointee = n
        return MC_OK
      }
      free(memory)
      size = max(n, size * 2)
    }
    throw CacheError.timedOut(operation: "reading a value that kept growing between reads")
  }
}

@_cdecl("mc_gets")
public func mcGets(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ buffer: UnsafeMutableRawPointer?,
  _ capacity: Int, _ length: UnsafeMutablePointer<Int>?, _ version: UnsafeMutablePointer<UInt64>?
) -> Int32 {
  Handles.withStore(cache) { store in
    let k = try Arguments.key(key, keyLength, maxKey: store.maxKey)
    let b = try Arguments.buffer(buffer, capacity)
    let outLength = try Arguments.output(length, "the length pointer")
    let outVersion = try Arguments.output(version, "the version pointer")
    var status = MC_NOT_FOUND
    _ = try store.withVersionedValue(String(decoding: k, as: UTF8.self)) { bytes, v in
      outLength.pointee = bytes.count
      outVersion.pointee = v
      if bytes.count <= capacity, bytes.count > 0 {
        b.baseAddress!.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
      }
      status = copiedStatus(bytes.count, capacity)
    }
    return status
  }
}

@_cdecl("mc_exists")
public func mcExists(_ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int) -> Int32 {
  Handles.answer(cache, key, keyLength) { try $0.contains($1) }
}

@_cdecl("mc_ttl")
public func mcTTL(
  _ cache: OpaquePointer?, _ key: UnsafeRawPointer?, _ keyLength: Int, _ seconds: UnsafeMutablePointer<Double>?
) -> Int32 {
  Handles.withStore(cache) { store in
    let k = try Arguments.key(key, keyLength, maxKey: store.maxKey)
    let out = try Arguments.output(seconds, "the seconds pointer")
    guard let expiry = try store.expiry(String(decoding: k, as: UTF8.self)),
      let left = secondsLeft(expiry)
    else { return MC_NOT_FOUND }
    out.pointee = left
    return MC_OK
  }
}

/// Seconds until `expiry` (infinity for never), or nil once it has passed.
func secondsLeft(_ expiry: CacheExpiry) -> Double? {
  switch expiry {
  case .never: return .infinity
  case .seconds(let s): return s > 0 ? s : nil
  case .date(let d):
    let left = d.timeIntervalSinceNow
    return left > 0 ? left : nil
  }
}

@_cdecl("mc_get_many")
public func mcGetMany(
  _ cache: OpaquePointer?, _ count: Int, _ keys: UnsafePointer<UnsafeRawPointer?>?,
  _ keyLengths: UnsafePointer<Int>?, _ buffers: UnsafePointer<UnsafeMutableRawPointer?>?,
  _ capacities: UnsafePointer<Int>?, _ lengths: UnsafeMutablePointer<Int64>?, _ found: UnsafeMutablePointer<Int>?
) -> Int32 {
  Handles.withStore(cache) { store in
    let n = try Arguments.count(
      count, keys: keys, keyLengths: keyLengths,
      [
        (UnsafeRawPointer(buffers), "buffers"), (UnsafeRawPointer(capacities), "capacities"),
        (UnsafeRawPointer(lengths), "lengths"),
      ])
    var present = 0
    if n > 0, let keys, let keyLengths, let buffers, let capacities, let lengths {
      // Every key and buffer checked before anything is read.
      for j in 0..<n {
        _ = try Arguments.key(keys[j], keyLengths[j], maxKey: store.maxKey)
        _ = try Arguments.buffer(buffers[j], capacities[j])
      }
      let group = 64
      try withUnsafeTemporaryAllocation(of: UnsafeRawBufferPointer.self, capacity: group) { k in
        try withUnsafeTemporaryAllocation(of: UnsafeMutableRawBufferPointer.self, capacity: group) { b in
          try UnsafeMutableRawPointer(lengths).withMemoryRebound(to: Int.self, capacity: n) { all in
            var start = 0
            while start < n {
              let m = min(group, n - start)
              for j in 0..<m {
                k[j] = UnsafeRawBufferPointer(start: keys[start + j], count: keyLengths[start + j])
                b[j] = UnsafeMutableRawBufferPointer(start: buffers[start + j], count: capacities[start + j])
              }
              present += try store.getMany(
                UnsafeBufferPointer(rebasing: k[..<m]), into: UnsafeBufferPointer(rebasing: b[..<m]),
                lengths: UnsafeMutableBufferPointer(start: all + start, count: m))
              start += m
            }
          }
        }
      }
    }
    found?.pointee = present
    return MC_OK
  }
}
