import Foundation
import SystemCalls

// Atomic counters, bulk removal, and iteration (bulk reads and writes: SharedCache+Batch.swift).

extension SharedCache where Value: FixedWidthInteger {
  /// Adds `delta` to the counter under `key` and returns the new value, atomically across
  /// every process sharing the file (a read-modify-write under the write lock). A missing
  /// or expired counter starts from `initial`. With `expires` the counter's expiry is set;
  /// without, a new counter gets `defaultExpiry` and an existing one keeps its own.
  /// A counter is rewritten where it stands, inline in its slot or in its record (no new
  /// record, a new version), in one seqlock write of the slot.
  /// Throws `.notAnInteger` when the stored bytes are not a `Value` (nothing is changed)
  /// and `.invalidArgument` when the result would overflow `Value` (nothing is changed).
  @inlinable @discardableResult
  public func increment(
    forKey key: String, by delta: Value = 1, initial: Value = 0,
    expires: CacheExpiry? = nil
  ) throws -> Value {
    try adjust(key, expires, initial, by: delta, subtracting: false)
  }

  /// Subtracts `delta` from the counter under `key`; see `increment`.
  @inlinable @discardableResult
  public func decrement(
    forKey key: String, by delta: Value = 1, initial: Value = 0,
    expires: CacheExpiry? = nil
  ) throws -> Value {
    try adjust(key, expires, initial, by: delta, subtracting: true)
  }

  /// The counter's change, `delta` added (or, `subtracting`, taken away): in place when
  /// it is live, an `Int` without a new expiry the straight way
  /// (`CacheEngine.changeCounter`, handed the delta: a closure there cost the increment
  /// two closure calls), else by `CacheEngine.rewriteInPlace` (with no allocation), else
  /// through the general update (`adjustByUpdate`).
  @inlinable
  func adjust(
    _ key: String, _ expires: CacheExpiry?, _ initial: Value, by delta: Value, subtracting: Bool
  ) throws -> Value {
    if Value.self == Int.self && expires == nil {
      let change = withKey(key) { k in
        engine.changeCounter(k, by: unsafeBitCast(delta, to: Int.self), subtracting: subtracting)
      }
      switch change {
      case .changed(let new): return unsafeBitCast(new, to: Value.self)
      case .refused(let old): throw overflow(key, unsafeBitCast(old, to: Value.self))
      case .elsewise: break
      }
    }
    let op = { (old: Value) -> Value? in
      let (r, overflow) = subtracting ? old.subtractingReportingOverflow(delta) : old.addingReportingOverflow(delta)
      return overflow ? nil : r
    }
    let given: UInt64? = expires.map { expiryMsComputed($0) }
    var result = initial
    let done = try withKey(key) { k in
      try engine.rewriteInPlace(k, expiry: given) { current, out in
        let old: Value
        do { old = try codec.decodeValue(current) } catch { throw CacheError.notAnInteger(key: key) }
        guard let new = op(old) else { throw overflow(key, old) }
        result = new
        var n = -1
        try codec.withValueBytes(new) { b in
          if b.count <= out.count, let dst = out.baseAddress {
            if let src = b.baseAddress { dst.copyMemory(from: src, byteCount: b.count) }
            n = b.count
          }
        }
        return n
      }
    }
    return done ? result : try adjustByUpdate(key, expires, initial, op)
  }

  @usableFromInline
  func overflow(_ key: String, _ old: Value) -> CacheError {
    CacheError.invalidArgument(
      "changing the counter \"\(key)\" (\(old)) would overflow \(Value.self); reset it or use a wider type")
  }

  /// The counter's change through `Writer.update` (a new counter, an expired one, one far
  /// from home): the new value is stored by the write protocol.
  @usableFromInline
  func adjustByUpdate(
    _ key: String, _ expires: CacheExpiry?, _ initial: Value,
    _ op: (Value) -> Value?
  ) throws -> Value {
    let now = SystemCall.wallClockMilliseconds()
    let given = expires.map { $0.milliseconds(now: now) }
    let fresh = (defaultExpiry).milliseconds(now: now)
    var result = initial
    _ = try withKey(key) { k in
      try engine.update(k) { bytes, info in
        let old: Value
        if let bytes {
          do { old = try codec.decode(bytes) } catch { throw CacheError.notAnInteger(key: key) }
        } else {
          old = initial
        }
        guard let new = op(old) else { throw overflow(key, old) }
        result = new
        let expiry = given ?? (info.map { $0.expiryMilliseconds ?? 0 } ?? fresh)
        return .store(try codec.encode(new), expiry: expiry)
      }
    }
    return result
  }
}

extension SharedCache {
  // MARK: Bulk

  /// Removes every key of `keys` under one acquisition of the write lock (a batch of
  /// invalidations costs one lock hold, not one per key); returns how many were present.
  /// Every key is checked first: an empty or oversized one throws before anything is removed.
  @discardableResult
  public func removeObjects<S: Sequence>(forKeys keys: S) throws -> Int where S.Element == String {
    try engine.remove(keys: keys.map { Array($0.utf8) })
  }

  // MARK: Iteration

  /// The keys of every live entry. Built without the write lock (writers are never
  /// blocked): keys written or removed while it runs may be missing or included.
  public var allKeys: [String] {
    var keys: [String] = []
    var seen = Set<[UInt8]>()
    engine.forEachEntry(values: false) { e in
      // Keys that are not UTF-8 are reserved for the cache's own records (claims,
      // cached failures): they are not the caller's.
      if let s = String(validating: e.key, as: UTF8.self), seen.insert(e.key).inserted { keys.append(s) }
      return true
    }
    return keys
  }

  /// Calls `body` with each live entry (key, value, expiry), each copied whole under its
  /// slot's version counter, without the write lock. Return false to stop. Entries
  /// written or moved during the walk may be missed; none is visited twice. A value that
  /// fails to decode throws `.decodingFailed` and ends the walk.
  public func forEachObject(
    includeExpired: Bool = false,
    _ body: (_ key: String, _ value: Value, _ expires: CacheExpiry) throws -> Bool
  ) throws {
    var seen = Set<[UInt8]>()
    try engine.forEachEntry(values: true, includeExpired: includeExpired) { e in
      guard let key = String(validating: e.key, as: UTF8.self), let bytes = e.value,
        seen.insert(e.key).inserted
      else { return true }
      let value = try bytes.withUnsafeBytes { try decode($0, key: key) }
      return try body(key, value, CacheExpiry.from(milliseconds: e.info.expiryMilliseconds))
    }
  }

  /// Every live entry as a dictionary (see `forEachObject`).
  public func allObjects() throws -> [String: Value] {
    var out: [String: Value] = [:]
    try forEachObject { k, v, _ in
      out[k] = v
      return true
    }
    return out
  }
}
