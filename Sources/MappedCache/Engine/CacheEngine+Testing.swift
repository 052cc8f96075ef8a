/// Test hooks: ways for the reliability tests to put the shared state where a real
/// writer can leave it (holding the lock, stopped or killed mid-publish), so that
/// other processes' behaviour in that state can be checked. Not for production use.
extension CacheEngine {
  /// Takes the write lock exactly as a write does (repair first if needed, intent
  /// record marked), optionally leaves the slot of `oddKey` mid-write (seq odd, as a
  /// writer stopped inside step 5 of the write protocol would), and runs `whileHeld`
  /// (which may sleep, or during which the process may be stopped or killed). Then
  /// restores the slot and releases the lock.
  func _holdWriteLock(oddKey: UnsafeRawBufferPointer?, _ whileHeld: () -> Void) throws {
    try withWriteLock { held in
      var odd: Int? = nil
      if let oddKey, case .found(let i, _) = index.find(oddKey, hash: KeyHash.key(oddKey), held) {
        index._toggleSequence(i, held)
        odd = i
      }
      whileHeld()
      if let odd { index._toggleSequence(odd, held) }
    }
  }

  /// Takes the write lock and moves `key`'s record to the main log's head as a promotion
  /// does, running `whileHeld` inside the slot's write (`SlotIndex.move`'s midway point:
  /// the slot odd, its new location stored), where a reliability test kills the process.
  /// Returns false, without running `whileHeld`, if the key is absent or main is full.
  func _holdWriteLockMidMove(key: UnsafeRawBufferPointer, _ whileHeld: () -> Void) throws -> Bool {
    try withWriteLock { held in
      let main = logs.state(.main)
      guard case .found(let i, let e) = index.find(key, hash: KeyHash.key(key), held),
        main.need(e.recordSize) + layout.mainReserve <= main.free
      else { return false }
      policy.moveToMainHead(
        slot: i, record: e.loc, size: e.recordSize,
        meta: index.meta(at: i) & ~Format.referencedBit, midway: whileHeld, held)
      return true
    }
  }
}

extension CacheEngine {
  /// The slot and entry holding `key` (looked up under the write lock), for tests.
  func _find(_ key: UnsafeRawBufferPointer) throws -> (slot: Int, entry: SlotIndex.Entry)? {
    try withWriteLock { held in
      if case .found(let i, let e) = index.find(key, hash: KeyHash.key(key), held) { return (i, e) }
      return nil
    }
  }

  /// The file offset of slot `i`'s first byte.
  func _slotOffset(_ i: Int) -> Int { layout.slotsOffset + i * layout.slotBytes }
}

extension SharedCache {
  /// Test hook (see `CacheEngine._holdWriteLock`): holds the write lock while
  /// `whileHeld` runs, with the slot of `oddSlotForKey` left odd (mid-write) meanwhile.
  @_spi(Testing)
  public func _holdWriteLock(oddSlotForKey key: String? = nil, _ whileHeld: () -> Void) throws {
    if let key {
      var k = key
      try k.withUTF8 { try engine._holdWriteLock(oddKey: UnsafeRawBufferPointer($0), whileHeld) }
    } else {
      try engine._holdWriteLock(oddKey: nil, whileHeld)
    }
  }

  /// Test hook (see `CacheEngine._holdWriteLockMidMove`): holds the write lock while
  /// `whileHeld` runs inside the move of `key`'s record (an eviction step's slot write).
  @_spi(Testing)
  public func _holdWriteLockMidMove(key: String, _ whileHeld: () -> Void) throws -> Bool {
    var k = key
    return try k.withUTF8 { try engine._holdWriteLockMidMove(key: UnsafeRawBufferPointer($0), whileHeld) }
  }
}
