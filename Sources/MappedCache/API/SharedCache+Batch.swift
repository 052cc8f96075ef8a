// Batch reads (multi-get) and writes (multi-set): many keys per call, their memory
// misses overlapped (`CacheEngine.copyValues`, `CacheEngine.set(batch:)`).

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
  /// key's slot is prefetched before any is read. Reads take no lock.
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
    var out: [String: Value] = [:]
    out.reserveCapacity(list.count)
    let group = CacheEngine.batchGroup
    let room = CacheEngine.stackBufferBytes
    try bytes.withUnsafeBytes { all in
      try withUnsafeTemporaryAllocation(byteCount: group * room, alignment: 16) { scratch in
        try withUnsafeTemporaryAllocation(of: UnsafeRawBufferPointer.self, capacity: group) { keyBuffers in
          try withUnsafeTemporaryAllocation(of: UnsafeMutableRawBufferPointer.self, capacity: group) { buffers in
            try withUnsafeTemporaryAllocation(of: Int.self, capacity: group) { lengths in
              var start = 0
              while start < list.count {
                let count = min(group, list.count - start)
                for j in 0..<count {
                  let k = start + j
                  let from = k == 0 ? 0 : ends[k - 1]
                  keyBuffers[j] = UnsafeRawBufferPointer(rebasing: all[from..<ends[k]])
                  buffers[j] = UnsafeMutableRawBufferPointer(rebasing: scratch[j * room..<(j + 1) * room])
                }
                _ = engine.copyValues(
                  forKeys: UnsafeBufferPointer(rebasing: keyBuffers[..<count]),
                  into: UnsafeBufferPointer(rebasing: buffers[..<count]),
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
                start += count
              }
            }
          }
        }
      }
    }
    return out
  }

  // MARK: Multi-set

  /// Stores every pair under one acquisition of the write lock: other processes see
  /// either none or some prefix of the batch while it runs, and the whole batch after.
  /// Keys and values are all checked, encoded, hashed and checksummed first, and their
  /// slots prefetched, before the lock is taken: an invalid one throws before anything
  /// is stored, and the lock is held only for the stores. A key given twice keeps its
  /// last value.
  /// - Throws: as ``setObject(_:forKey:expires:)-(_,String,_)`` does, for the first
  ///   bad entry, before anything is stored.
  public func setObjects<S: Sequence>(_ items: S, expires: CacheExpiry? = nil) throws
  where S.Element == (key: String, value: Value) {
    let ms = expiryMs(expires)
    var batch: [CacheEngine.BatchEntry] = []
    batch.reserveCapacity(items.underestimatedCount)
    for (key, value) in items {
      let k = Array(key.utf8)
      let v = try codec.encode(value)
      let w = try k.withUnsafeBytes { kb in try v.withUnsafeBytes { vb in try engine.prepare(kb, vb, expiry: ms) } }
      batch.append((k, v, w))
    }
    guard !batch.isEmpty else { return }
    try engine.set(batch: batch)
  }

  /// `setObjects` for a dictionary.
  public func setObjects(_ items: [String: Value], expires: CacheExpiry? = nil) throws {
    try setObjects(items.map { (key: $0.key, value: $0.value) }, expires: expires)
  }
}
