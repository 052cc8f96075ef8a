import SystemCalls

/// Read-modify-write of an entry where it stands (its record rewritten in place, with
/// the same length): `increment`'s common case.
extension Writer {
  /// Largest value `rewriteInPlace` hands its body room for (a counter is at most 8).
  static let inPlaceValueBytes = 16

  /// Changes `key`'s entry (live, its checksum intact) where it stands: `body` gets the
  /// current value and writes the new one into the buffer it is given, returning its
  /// length, which must be the old one. The new value, a new version (so readers' and
  /// decoded caches' stamps see the change) and `expiry` (nil: the entry's own) are
  /// stored in one seqlock write of the bucket (`Writer.rewrite`): no record is
  /// appended and no slot moves, as for a set's W3. Readers never see a torn value (they
  /// copy a record inside its bucket's `seq` bracket), and a writer killed inside it
  /// leaves the bucket odd with the intent word naming the slot, which the next holder's
  /// repair drops (DESIGN.md, section 6).
  ///
  /// Returns false, having changed nothing (`body` may have run), when the entry is
  /// absent, expired, damaged, when `body` returns another length, when an expiry is
  /// given for a record without one: the caller then runs the general `update`. `midway` runs inside the bucket's write (a test hook).
  @inline(__always)
  func rewriteInPlace(
    _ key: UnsafeRawBufferPointer, hash: UInt64, expiry: UInt64?, midway: () -> Void,
    _ part: borrowing LockedPartition,
    _ body: (_ current: UnsafeRawBufferPointer, _ out: UnsafeMutableRawBufferPointer) throws -> Int
  ) throws -> Bool {
    let index = part.index
    guard let e = index.find(key, placement: Placement(hash: hash, groups: index.groups), part.held) else {
      return false
    }
    let h = e.header
    // The clock is read only for an entry that can expire.
    if h.expiry != 0 && Expiry.isExpired(h.expiry, now: SystemCall.expiryClockMilliseconds()) { return false }
    // A new expiry needs the record's field (none is stored in it as 0).
    let stamped = expiry.map { Expiry.stamp($0, now: SystemCall.expiryClockMilliseconds()) }
    if let stamped, stamped != 0, !h.hasExpiry { return false }
    return try part.memory.withValue(record: e.offset, h, part.held) { current in
      // Stable: the lock keeps every writer out of the record.
      guard KeyHash.checksum(current, hash: hash) == h.sum else { return false }
      return try withUnsafeTemporaryAllocation(byteCount: Self.inPlaceValueBytes, alignment: 8) { out in
        let n = try body(current, out)
        guard n == h.vlen, n <= out.count else { return false }
        let value = UnsafeRawBufferPointer(start: out.baseAddress, count: n)
        let c = RecordFormat.Content(
          key: key, value: value, sum: KeyHash.checksum(value, hash: hash), expiry: stamped ?? h.expiry)
        Self.rewrite(e, c, midway: midway, part)
        return true
      }
    }
  }
}

extension Writer {
  /// A counter's change: `delta` added, or taken away (`subtracting`); nil where the
  /// result would overflow.
  struct CounterStep {
    let delta: Int
    let subtracting: Bool

    @inline(__always)
    func applied(to old: Int) -> Int? {
      let (new, overflow) = subtracting ? old.subtractingReportingOverflow(delta) : old.addingReportingOverflow(delta)
      return overflow ? nil : new
    }
  }

  /// `CacheEngine.changeCounter`'s locked part: the hint's slot checked (`hintedWord`:
  /// W1's checks, W2), its record the key's with an 8-byte value and no expiry
  /// (`shortEntry`'s form: a counter that may expire goes the general way, which reads
  /// the clock), the value's checksum intact, then `step` and the rewrite (W3,
  /// `rewrite`, the intent word naming the slot, then clear). `.elsewise` having
  /// changed nothing otherwise; `.refused` when the result would overflow. A call, whose
  /// arguments cost a little: made `@_transparent`, the increment took more
  /// (`scripts/callgrind.sh`).
  @inline(__always)
  static func changeCounter(
    _ key: UnsafeRawBufferPointer, words: (UInt64, UInt64), hash: UInt64, _ seen: Sighting,
    _ part: borrowing LockedPartition, _ step: CounterStep
  ) -> CacheEngine.CounterChange {
    let mem = part.memory
    let hint = seen.hint
    guard let word = hintedWord(seen, part.partition, in: part.partition.file) else { return .elsewise }
    let offset = Int(truncatingIfNeeded: word & Format.offsetMask)
    guard let h = mem.shortEntry(at: offset, keyCount: key.count, valueCount: 8),
      mem.keyEquals(record: offset, h, key, words: words)
    else { return .elsewise }
    let e = BucketIndex.Entry(at: BucketIndex.Slot(place: hint.place, slot: hint.slot), word: word, header: h)
    return mem.withValue(record: offset, h, part.held) { current -> CacheEngine.CounterChange in
      // Stable: the lock keeps every writer out of the record.
      guard KeyHash.checksum(current, hash: hash) == h.sum else { return .elsewise }
      let old = Int(littleEndian: current.loadUnaligned(as: Int.self))
      guard let new = step.applied(to: old) else { return .refused(old) }
      return withUnsafeBytes(of: new.littleEndian) { value in
        // W3, the whole change: the intent word names the slot while the record is
        // rewritten, and is clear again after it (`marking`).
        let c = RecordFormat.Content(key: key, value: value, sum: KeyHash.checksum(value, hash: hash), expiry: h.expiry)
        rewrite(e, c, leaving: 0, part)
        return .changed(new)
      }
    }
  }
}
