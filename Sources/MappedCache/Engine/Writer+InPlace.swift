import SystemCalls

/// Read-modify-write of an entry where it stands (inline in its slot, or in its record
/// with the same length): `increment`'s common case.
extension Writer {
  /// Largest value `rewriteInPlace` hands its body room for (a counter is at most 8).
  static let inPlaceValueBytes = 16

  /// Changes `key`'s entry (within `SlotIndex.shortProbe` slots of home, live, its
  /// checksum intact) where it stands: `body` gets the current value and writes the new
  /// one into the buffer it is given, returning its length. The new value, a new
  /// version (`TableCounters.nextVersion`, so readers' and decoded caches' stamps see
  /// the change) and `expiry` (nil: the entry's own) are stored in one seqlock write of
  /// the slot (`SlotIndex.rewriteInlineValue`, or `rewriteRecordValue` for an entry in a
  /// record, whose value bytes, checksum and version change in place): no record is
  /// appended and no slot moves, as for a set's `rewriteInline`. Readers never see a
  /// torn value (they copy slot and record inside the slot's `seq` bracket), and a
  /// writer killed inside it leaves the slot odd with the intent record set, which the
  /// next holder's repair empties like any half-written slot (the write protocol's step
  /// 5, DESIGN.md section 6); its record is then garbage the tail passes.
  ///
  /// Returns false, having changed nothing (`body` may have run), when the entry is
  /// absent, expired, far from home, damaged, when `body` returns a length that does not
  /// fit inline (or, in a record, differs from the old one), or when the new size would
  /// pass the cost limit: the caller then runs the general `update`. `midway` runs
  /// inside the slot's write (a test hook).
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
        guard let e = index.entry(at: i, meta: meta, matching: key) else { return false }
        // The clock is read only for an entry that can expire.
        if meta & Format.expiryMask != 0 && Expiry.isExpired(meta, now: Sys.expiryClockMilliseconds()) { return false }
        // Stable: the lock keeps every writer out of the slot.
        let current = index.bytes(of: e, slot: i).value
        guard KeyHash.checksum(current, hash: hash) == e.sum else { return false }
        return try withUnsafeTemporaryAllocation(byteCount: Self.inPlaceValueBytes, alignment: 8) { out in
          let n = try body(current, out)
          // Inline: the new value must fit the slot; in a record: have the old one's length.
          guard n >= 0, n <= out.count, e.inline ? key.count &+ n <= index.memory.inlineCapacity : n == e.vlen
          else { return false }
          let value = UnsafeRawBufferPointer(start: out.baseAddress, count: n)
          let live = counters.count(.liveBytes) - e.liveBytes + key.count + n
          let costLimit = counters.costLimit
          guard costLimit == 0 || live <= costLimit else { return false }
          let cas = counters.nextVersion(held)
          // A new expiry is stamped with its horizon (`Expiry`); otherwise the entry keeps
          // its expiry, horizon and hit count.
          let kept = meta & (Format.expiryMask | Expiry.horizonMask | Format.hitBits)
          let newMeta =
            expiry.map { Expiry.stamp($0, now: Sys.expiryClockMilliseconds()) | (meta & Format.hitBits) } ?? kept
          let sum = KeyHash.checksum(value, hash: hash)
          if e.inline {
            index.rewriteInlineValue(
              i, klen: key.count, meta: newMeta, value: value, sum: sum, cas: cas, midway: midway, held)
          } else {
            index.rewriteRecordValue(
              i, loc: e.loc, klen: key.count, meta: newMeta, value: value, sum: sum, cas: cas, midway: midway, held)
          }
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
