// Batch reads (multi-get) and writes (multi-set): many keys per call, their memory
// misses overlapped (`CacheEngine.copyValues`, `CacheEngine.set(keys:values:expiry:)`).

extension SharedCache {
  // MARK: Multi-get

  /// The length `copyBytes(forKeys:into:lengths:)` reports for a key with no live entry.
  public static var missingLength: Int { -1 }

  /// Copies the stored bytes of many keys at once: the batch form of
  /// `copyBytes(forKey:into:)`, with no allocation, and faster per key than reading the
  /// keys one by one on a table larger than the CPU's caches (every key's slot is
  /// prefetched before any is read, so their memory misses overlap).
  ///
  /// For each `j`, the value of `keys[j]` (its UTF-8 bytes, as for the `String` key) is
  /// copied into `buffers[j]`, and `lengths[j]` is set to the value's length, or to
  /// ``missingLength`` (-1) when the key is missing or expired. As with the single
  /// read, a value longer than its buffer is not copied: its length says what to offer
  /// (read that key again with a buffer that large). Each key is read exactly as
  /// `copyBytes(forKey:into:)` reads it, in order: the same values, statistics
  /// (a hit or a miss per key) and eviction bookkeeping. Reads take no lock; a batch is
  /// not a snapshot (a write landing meanwhile may be seen by later keys only).
  ///
  /// ```swift
  /// let cache = try SharedCache<[UInt8]>(name: "demo")
  /// // Three 6-byte keys in one array, and a 256-byte buffer per key: made once, reused
  /// // for every batch (the call itself allocates nothing).
  /// let keyBytes = Array("user:1user:2user:3".utf8)
  /// let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: 3 * 256, alignment: 16)
  /// defer { storage.deallocate() }
  /// let buffers = (0..<3).map { UnsafeMutableRawBufferPointer(rebasing: storage[$0 * 256..<($0 + 1) * 256]) }
  /// var lengths = [Int](repeating: 0, count: 3)
  /// try keyBytes.withUnsafeBytes { all in
  ///   let keys = (0..<3).map { UnsafeRawBufferPointer(rebasing: all[$0 * 6..<($0 + 1) * 6]) }
  ///   try keys.withUnsafeBufferPointer { keys in
  ///     try buffers.withUnsafeBufferPointer { buffers in
  ///       try lengths.withUnsafeMutableBufferPointer { lengths in
  ///         _ = try cache.copyBytes(forKeys: keys, into: buffers, lengths: lengths)
  ///         for j in 0..<3 where lengths[j] >= 0 && lengths[j] <= buffers[j].count {
  ///           print(j, Array(buffers[j][..<lengths[j]]))  // key j's value
  ///         }
  ///       }
  ///     }
  ///   }
  /// }
  /// ```
  ///
  /// - Returns: how many keys were present (whether or not their values fit).
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` when
  ///   any key is bad, before anything is read (no length is set);
  ///   ``CacheError/invalidArgument(_:)`` when the three buffers differ in count.
  @inlinable
  public func copyBytes(
    forKeys keys: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    into buffers: UnsafeBufferPointer<UnsafeMutableRawBufferPointer>,
    lengths: UnsafeMutableBufferPointer<Int>
  ) throws -> Int {
    guard keys.count == buffers.count, keys.count == lengths.count else {
      throw CacheError.invalidArgument(
        "a batch read needs one buffer and one length per key: \(keys.count) keys, \(buffers.count) buffers, \(lengths.count) lengths"
      )
    }
    for k in keys { try checkKeySize(k) }
    return engine.copyValues(forKeys: keys, into: buffers, lengths: lengths)
  }

  /// The live values among `keys`; missing and expired keys are left out (a key given
  /// twice appears once). Read in batches (`copyBytes(forKeys:into:lengths:)`): every
  /// key's slot is prefetched before any is read. Reads take no lock. Where this handle
  /// keeps decoded values (`OpenPolicy.decodedValues`), each key of a prefetched group
  /// is read as ``object(forKey:)`` reads it: a kept value is returned only while the
  /// key's entry is the very write it was decoded from.
  /// - Throws: ``CacheError/emptyKey`` or ``CacheError/keyTooLarge(size:limit:)`` when
  ///   any key is bad, before anything is read; ``CacheError/decodingFailed(key:reason:)``
  ///   when a stored value is not a `Value`.
  public func objects<S: Sequence>(forKeys keys: S) throws -> [String: Value] where S.Element == String {
    let list = Array(keys)
    // Every key's bytes in one array (`ends[j]`: where key j ends), checked first.
    var bytes: [UInt8] = []
    var ends: [Int] = []
    ends.reserveCapacity(list.count)
    for k in list {
      let start = bytes.count
      bytes.append(contentsOf: k.utf8)
      ends.append(bytes.count)
      try bytes.withUnsafeBytes { try engine.checkKey(UnsafeRawBufferPointer(rebasing: $0[start...])) }
    }
    if let decoded { return try decodedObjects(list, keyBytes: bytes, ends: ends, decoded) }
    var out: [String: Value] = [:]
    out.reserveCapacity(list.count)
    let group = CacheEngine.batchGroup
    let room = CacheEngine.stackBufferBytes
    try withUnsafeTemporaryAllocation(byteCount: group * room, alignment: 16) { scratch in
      try withUnsafeTemporaryAllocation(of: UnsafeMutableRawBufferPointer.self, capacity: group) { buffers in
        try withUnsafeTemporaryAllocation(of: Int.self, capacity: group) { lengths in
          for j in 0..<group {
            buffers[j] = UnsafeMutableRawBufferPointer(rebasing: scratch[j * room..<(j + 1) * room])
          }
          try forEachGroup(of: bytes, ends: ends) { start, keyBuffers in
            let count = keyBuffers.count
            _ = engine.copyValues(
              forKeys: keyBuffers, into: UnsafeBufferPointer(rebasing: buffers[..<count]),
              lengths: UnsafeMutableBufferPointer(rebasing: lengths[..<count]))
            for j in 0..<count where lengths[j] >= 0 {
              let key = list[start + j]
              if lengths[j] <= room {
                out[key] = try decode(UnsafeRawBufferPointer(rebasing: buffers[j][..<lengths[j]]), key: key)
              } else if let v = try largerObject(forKey: key, size: lengths[j]) {
                // Larger than the batch's buffers: read again, sized (it may be gone by then).
                out[key] = v
              }
            }
          }
        }
      }
    }
    return out
  }

  /// Runs `body` on each group of at most `CacheEngine.batchGroup` keys, in order, with
  /// the index of its first key and a buffer of each of its keys. `keyBytes` holds the
  /// keys' bytes, key j ending at `ends[j]`.
  private func forEachGroup(
    of keyBytes: [UInt8], ends: [Int],
    _ body: (_ start: Int, _ keyBuffers: UnsafeBufferPointer<UnsafeRawBufferPointer>) throws -> Void
  ) rethrows {
    let group = CacheEngine.batchGroup
    try keyBytes.withUnsafeBytes { all in
      try withUnsafeTemporaryAllocation(of: UnsafeRawBufferPointer.self, capacity: group) { keyBuffers in
        var start = 0
        while start < ends.count {
          let count = min(group, ends.count - start)
          for j in 0..<count {
            let k = start + j
            keyBuffers[j] = UnsafeRawBufferPointer(rebasing: all[(k == 0 ? 0 : ends[k - 1])..<ends[k]])
          }
          try body(start, UnsafeBufferPointer(rebasing: keyBuffers[..<count]))
          start += count
        }
      }
    }
  }

  /// `objects(forKeys:)` with decoded values kept: per group of `CacheEngine.batchGroup`
  /// keys, every key hashed and its slot (and record) prefetched
  /// (`CacheEngine.prefetchGroup`), then each key read by the single typed read
  /// (`decodedObject`): its entry's stamp compared with the kept value's, the entry
  /// copied and decoded only when they differ. `keyBytes` holds the keys' bytes, key j
  /// ending at `ends[j]` (checked).
  private func decodedObjects(
    _ list: [String], keyBytes: [UInt8], ends: [Int], _ decoded: DecodedValueCache<Value>
  ) throws -> [String: Value] {
    var out: [String: Value] = [:]
    out.reserveCapacity(list.count)
    try withUnsafeTemporaryAllocation(of: UInt64.self, capacity: CacheEngine.batchGroup) { hashes in
      try forEachGroup(of: keyBytes, ends: ends) { start, keyBuffers in
        engine.prefetchGroup(keyBuffers, from: 0, count: keyBuffers.count, hashes: hashes)
        for j in 0..<keyBuffers.count {
          let key = list[start + j]
          if let v = try decodedObject(keyBuffers[j], key: key, hash: hashes[j], decoded) { out[key] = v }
        }
      }
    }
    return out
  }

  // MARK: Multi-set

  /// Stores every pair under one acquisition of the write lock: other processes see
  /// either none or some prefix of the batch while it runs, and the whole batch after.
  /// Values are all encoded and every key and value checked first, before the lock: an
  /// invalid one throws before anything is stored. The batch then goes through the
  /// raw multi-set (`CacheEngine.set(keys:values:expiry:)`: slots and records
  /// prefetched, the first entries hashed and checksummed before the lock is taken). A
  /// key given twice keeps its last value.
  /// - Throws: as ``setObject(_:forKey:expires:)-(_,String,_)`` does, for the first
  ///   bad entry, before anything is stored.
  public func setObjects<S: Sequence>(_ items: S, expires: CacheExpiry? = nil) throws
  where S.Element == (key: String, value: Value) {
    let ms = expiryMs(expires)
    // Every key's and every encoded value's bytes in one array each (entry j ends at
    // `ends[j]`), each entry checked as it is added.
    var keyBytes: [UInt8] = []
    var valueBytes: [UInt8] = []
    var ends: [(key: Int, value: Int)] = []
    ends.reserveCapacity(items.underestimatedCount)
    for (key, value) in items {
      let k0 = keyBytes.count
      let v0 = valueBytes.count
      keyBytes.append(contentsOf: key.utf8)
      try codec.withValueBytes(value) { valueBytes.append(contentsOf: $0) }
      try keyBytes.withUnsafeBytes { kb in
        try valueBytes.withUnsafeBytes { vb in
          try engine.checkEntry(
            UnsafeRawBufferPointer(rebasing: kb[k0...]), UnsafeRawBufferPointer(rebasing: vb[v0...]))
        }
      }
      ends.append((keyBytes.count, valueBytes.count))
    }
    guard !ends.isEmpty else { return }
    let n = ends.count
    try keyBytes.withUnsafeBytes { kb in
      try valueBytes.withUnsafeBytes { vb in
        let keys = UnsafeMutableBufferPointer<UnsafeRawBufferPointer>.allocate(capacity: n)
        let values = UnsafeMutableBufferPointer<UnsafeRawBufferPointer>.allocate(capacity: n)
        defer {
          keys.deallocate()
          values.deallocate()
        }
        var from = (key: 0, value: 0)
        for j in 0..<n {
          keys.initializeElement(at: j, to: UnsafeRawBufferPointer(rebasing: kb[from.key..<ends[j].key]))
          values.initializeElement(at: j, to: UnsafeRawBufferPointer(rebasing: vb[from.value..<ends[j].value]))
          from = ends[j]
        }
        try engine.set(keys: UnsafeBufferPointer(keys), values: UnsafeBufferPointer(values), expiry: ms)
      }
    }
  }

  /// `setObjects` for a dictionary.
  public func setObjects(_ items: [String: Value], expires: CacheExpiry? = nil) throws {
    try setObjects(items.map { (key: $0.key, value: $0.value) }, expires: expires)
  }
}

extension SharedCache where Value == [UInt8] {
  /// Stores many entries at once straight from the caller's memory: the batch form of
  /// `setBytes(_:forKey:expires:)` and the writing counterpart of
  /// `copyBytes(forKeys:into:lengths:)`, with no allocation (no `Array` per value, no
  /// dictionary). `values[j]` is stored under `keys[j]` (its UTF-8 bytes, as for the
  /// `String` key), in order, every entry expiring as given (or by `defaultExpiry`),
  /// all under one hold of the write lock: other processes see none or a prefix of the
  /// batch while it runs, and all of it after. A key given twice keeps its last value.
  ///
  /// Every entry is checked before the lock is taken, and the first entries (16) are
  /// hashed and checksummed, with their slots and records prefetched, before it too:
  /// under the lock each entry is stored exactly as a single `setBytes` stores it
  /// (replacing, evicting when the cache is full), while the next group's memory
  /// misses are already in flight.
  ///
  /// - Throws: ``CacheError/invalidArgument(_:)`` when the counts differ;
  ///   ``CacheError/emptyKey``, ``CacheError/keyTooLarge(size:limit:)`` or
  ///   ``CacheError/valueTooLarge(size:limit:)`` for the first bad entry, before anything
  ///   is stored; ``CacheError/readOnly(path:)`` on a read-only handle.
  @inlinable
  public func setBytes(
    _ values: UnsafeBufferPointer<UnsafeRawBufferPointer>, forKeys keys: UnsafeBufferPointer<UnsafeRawBufferPointer>,
    expires: CacheExpiry? = nil
  ) throws {
    guard keys.count == values.count else {
      throw CacheError.invalidArgument(
        "a batch write needs one value per key: \(keys.count) keys, \(values.count) values")
    }
    try engine.set(keys: keys, values: values, expiry: expiryMs(expires))
  }
}
