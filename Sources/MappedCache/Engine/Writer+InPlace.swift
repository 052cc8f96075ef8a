/// Read-modify-write of an inline entry in its slot: `increment`'s common case.
extension Writer {
  /// Largest value `rewriteInPlace` hands its body room for (a counter is at most 8).
  static let inPlaceValueBytes = 16

  /// Changes `key`'s inline entry (within `SlotIndex.shortProbe` slots of home, live,
  /// its checksum intact) in its slot: `body` gets the current value and writes the new
  /// one into the buffer it is given, returning its length. The new value, a new
  /// version (`TableCounters.nextVersion`, so readers' and decoded caches' stamps see
  /// the change) and `expiry` (nil: the entry's own) are stored in one seqlock write of
  /// the slot (`SlotIndex.rewriteInlineValue`): no record is appended and no slot moves,
  /// as for a set's `rewriteInline`. Readers never see a torn value (they copy inside
  /// the `seq` bracket), and a writer killed inside it leaves the slot odd with the
  /// intent record set, which the next holder's repair empties like any half-written
  /// slot (the write protocol's step 5, DESIGN.md section 6).
  ///
  /// Returns false, having changed nothing (`body` may have run), when the entry is
  /// absent, expired, not inline, far from home, damaged, when `body` returns a length
  /// that does not fit inline, or when the new size would pass the cost limit: the
  /// caller then runs the general `update`. `midway` runs inside the slot's write (a
  /// test hook).
  @inline(__always)
  func rewriteInPlace(
    _ key: UnsafeRawBufferPointer, hash: UInt64, expiry: UInt64?, midway: () -> Void,
    _ held: borrowing WriteLock.Held,
    _ body: (_ current: UnsafeRawBufferPointer, _ out: UnsafeMutableRawBufferPointer) throws -> Int
  ) throws -> Bool {
    var i = index.home(hash)
    for _ in 0..<SlotIndex.shortProbe {
      let h = index.hash(at: i)
      if h == 0 { return false }
      if h == hash {
        let meta = index.meta(at: i)
        guard meta & Format.inlineBit != 0, let e = index.entry(at: i, meta: meta, matching: key) else { return false }
        // The clock is read only for an entry that can expire.
        if meta & Format.expiryMask != 0 && Expiry.isExpired(meta, now: Sys.expiryClockMilliseconds()) { return false }
        // Stable: the lock keeps every writer out of the slot.
        let current = index.bytes(of: e, slot: i).value
        guard KeyHash.checksum(current, hash: hash) == e.sum else { return false }
        return try withUnsafeTemporaryAllocation(byteCount: Self.inPlaceValueBytes, alignment: 8) { out in
          let n = try body(current, out)
          guard n >= 0, n <= out.count, key.count &+ n <= index.memory.inlineCapacity else { return false }
          let value = UnsafeRawBufferPointer(start: out.baseAddress, count: n)
          let live = counters.count(.liveBytes) - e.liveBytes + key.count + n
          let costLimit = counters.costLimit
          guard costLimit == 0 || live <= costLimit else { return false }
          let cas = counters.nextVersion(held)
          let newExpiry = (expiry ?? meta) & Format.expiryMask
          index.rewriteInlineValue(
            i, klen: key.count, meta: newExpiry | (meta & Format.referencedBit), value: value,
            sum: KeyHash.checksum(value, hash: hash), cas: cas, midway: midway, held)
          counters.set(.liveBytes, UInt64(max(0, live)), held)
          counters.bump(.sets, held)
          return true
        }
      }
      i = index.next(i)
    }
    return false
  }
}
