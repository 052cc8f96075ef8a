/// Test hooks: ways for the reliability tests to put the shared state where a real
/// writer can leave it (holding a lock, stopped or killed mid-publish), so that other
/// processes' behaviour in that state can be checked. Not for production use.
extension CacheEngine {
  /// Takes write locks exactly as a write does (repair first if needed, intent word
  /// set): with `oddKey`, its partition's, leaving its bucket mid-write (seq odd, as a
  /// writer stopped inside W6 would); without, every partition's, in order, as a holder
  /// of the whole file would. Runs `whileHeld` (which may sleep, or during which the
  /// process may be stopped or killed), then restores the bucket and releases.
  func _holdWriteLock(oddKey: UnsafeRawBufferPointer?, _ whileHeld: () -> Void) throws {
    guard let oddKey else { return try holdEveryLock(from: 0, whileHeld) }
    let hash = KeyHash.key(oddKey)
    try withKeyLock(hash: hash) { part in
      let found = part.index.find(oddKey, placement: Placement(hash: hash, groups: part.index.groups), part.held)
      if let e = found { part.index._toggleSequence(e.at.place, part.held) }
      whileHeld()
      if let e = found { part.index._toggleSequence(e.at.place, part.held) }
    }
  }

  private func holdEveryLock(from p: Int, _ whileHeld: () -> Void) throws {
    guard p < currentPartitionCount else { return whileHeld() }
    try withWriteLock(partition: p) { _ in try holdEveryLock(from: p + 1, whileHeld) }
  }

  /// Takes `key`'s partition's lock and moves its record to the main log's head as a
  /// promotion does, running `whileHeld` inside the slot's write (`BucketIndex.move`:
  /// the bucket odd, the new offset stored), where a reliability test kills the process.
  /// Returns false, without running `whileHeld`, if the key is absent or main is full.
  func _holdWriteLockMidMove(key: UnsafeRawBufferPointer, _ whileHeld: () -> Void) throws -> Bool {
    let hash = KeyHash.key(key)
    return try withKeyLock(hash: hash) { part in
      guard let e = part.index.find(key, placement: Placement(hash: hash, groups: part.index.groups), part.held),
        part.logs.fits(.main, e.header.size + part.policy.mainReserve)
      else { return false }
      part.policy.moveToMainHead(
        e, hits: e.hits & ~Format.referencedBit, unearned: false, midway: whileHeld, part.held)
      return true
    }
  }

  /// Leaves partition `p` as a writer killed inside `body` would: takes the lock as a
  /// write does (repairing first if needed), sets the intent word, runs `body` (which
  /// changes the partition part way, through the engine's own layers), and releases the
  /// lock with the intent word as `body` left it (set: the next writer repairs). The
  /// lock is released, not taken over: `ReliabilityLockTests` kill real holders.
  func _crashDuring(partition p: Int, _ body: (borrowing LockedPartition) throws -> Void) throws {
    guard let lock else { throw CacheError.readOnly(path: path) }
    let part = try lock.acquire(p)
    defer { lock.release(p) }
    if part.needsRepair() { repair(part) }
    part.memory.word(.intent).store(Format.intentChange, .relaxed)
    try body(part)
  }

  /// Where `key`'s entry is (looked up under its partition's lock), for tests: its
  /// partition, bucket, slot and record.
  func _find(_ key: UnsafeRawBufferPointer) throws -> (partition: Int, entry: BucketIndex.Entry)? {
    let hash = KeyHash.key(key)
    return try withKeyLock(hash: hash) { part in
      part.index.find(key, placement: Placement(hash: hash, groups: part.index.groups), part.held).map {
        (part.number, $0)
      }
    }
  }

  /// The file offset of a partition's byte `offset` (tests that damage the file).
  func _fileOffset(partition p: Int, _ offset: Int) -> Int { memory._partitionOffset(p) + offset }

  /// The file offset of a bucket's first byte (its sequence word), in partition `p`.
  func _bucketOffset(partition p: Int, _ place: Place) -> Int {
    _fileOffset(partition: p, partition(p).memory.groupOffset(place.group) + place.bucket * Format.bucketBytes)
  }

  /// The file offsets of a slot's tag (2 bytes) and entry word (4 bytes), in partition `p`.
  func _slotOffsets(partition p: Int, _ at: BucketIndex.Slot) -> (tag: Int, word: Int) {
    let b = _bucketOffset(partition: p, at.place)
    return (b + Format.BucketOffset.tags + 2 * at.slot, b + Format.BucketOffset.words + 4 * at.slot)
  }
}

extension SharedCache {
  /// Test hook (see `CacheEngine._holdWriteLock`): holds the write locks while
  /// `whileHeld` runs (`oddSlotForKey`'s partition's, with its bucket left odd
  /// meanwhile; without a key, every partition's).
  @_spi(Testing)
  public func _holdWriteLock(oddSlotForKey key: String? = nil, _ whileHeld: () -> Void) throws {
    if let key {
      try withKey(key) { try engine._holdWriteLock(oddKey: $0, whileHeld) }
    } else {
      try engine._holdWriteLock(oddKey: nil, whileHeld)
    }
  }

  /// Test hook (see `CacheEngine._holdWriteLockMidMove`): holds `key`'s partition's lock
  /// while `whileHeld` runs inside the move of its record (an eviction step's slot write).
  @_spi(Testing)
  public func _holdWriteLockMidMove(key: String, _ whileHeld: () -> Void) throws -> Bool {
    try withKey(key) { try engine._holdWriteLockMidMove(key: $0, whileHeld) }
  }
}

extension CacheFile {
  /// Test hook: the 16-bit checksum a record keeps for `value` stored under `key`
  /// (`KeyHash.checksum`, seeded with the key's hash). A test that reads a damaged value
  /// back tells by it a value no 16-bit check can see (its checksum equals the written
  /// value's: one damaged value in 65,536) from one a read should have refused.
  @_spi(Testing)
  public static func _recordChecksum(of value: [UInt8], forKey key: [UInt8]) -> UInt16 {
    key.withUnsafeBytes { k in value.withUnsafeBytes { KeyHash.checksum($0, hash: KeyHash.key(k)) } }
  }
}
