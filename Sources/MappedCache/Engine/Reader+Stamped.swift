import SystemCalls

/// What identifies one write of one entry: its version (the header's cas counter, taken
/// under the write lock by every write of any key), with the value's length and
/// checksum. A process-local cache of decoded values (`DecodedValueCache`) keeps the
/// stamp of the bytes it decoded; on every read it reads the key's live entry's stamp
/// from the file and returns a kept value only if the stamps are equal.
///
/// Why equal stamps mean equal bytes (no ABA): every store of a value, by any process,
/// takes a new version from the counter under the lock (`TableCounters.nextVersion`:
/// `Writer.store`, `Writer.rewriteInline`, the in-place counter rewrite), and the
/// counter only moves forwards (nothing resets it: not `removeAll`, not repair, not
/// eviction; 2^64 writes do not happen). Moves by eviction copy a record whole, version
/// and bytes together, and `touch` changes only the expiry, read afresh on every hit. So
/// within one file a version names one write: one key, one value. The slot's own `seq`
/// would not do: an entry moves between slots (backward shift), and a remove and a
/// re-add can leave another slot with a sequence value seen before. Only damage to the
/// counter word could repeat a version; length and checksum must then match too.
@usableFromInline
struct EntryStamp: Equatable, Sendable {
  @usableFromInline var version: UInt64
  @usableFromInline var count: UInt32
  @usableFromInline var sum: UInt32

  @usableFromInline init(version: UInt64, count: UInt32, sum: UInt32) {
    self.version = version
    self.count = count
    self.sum = sum
  }

  /// No write (versions start at 1): kept values never carry it.
  @usableFromInline static let none = EntryStamp(version: 0, count: 0, sum: 0)

  init(_ e: SlotIndex.Entry) {
    self.init(version: e.cas, count: UInt32(truncatingIfNeeded: e.vlen), sum: e.sum)
  }
}

extension Reader {
  /// The decoded cache's read: `probeInline`'s short path for any entry (inline or in a
  /// record) within `SlotIndex.shortProbe` slots of home. Inside one seqlock read of the
  /// key's slot it compares the key, takes the entry's stamp and copies the value when
  /// it fits `buffer` (with an empty buffer, nothing: the stamp alone), and returns the
  /// value's length. `fastMiss` at an empty slot, `fastUnsure` for everything else (a
  /// writer in the slot, a long run, an expired entry, a checksum mismatch), which the
  /// caller hands to `lookup`. Skipping slots of other hashes without a seqlock check is
  /// safe, as in `probeInline`.
  @inline(__always)
  func probeStamped(
    _ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer,
    stamp: inout EntryStamp
  ) -> Int {
    let i = shortScan(hash)
    guard i >= 0 else { return i }
    let read = index.seqlockRead(i) { () -> (SlotIndex.Entry, meta: UInt64)? in
      let meta = index.meta(at: i)
      guard let e = index.entry(at: i, meta: meta, matching: key) else { return nil }
      if e.vlen <= buffer.count, let out = buffer.baseAddress { index.copyValue(of: e, slot: i, to: out) }
      return (e, meta)
    }
    guard case .stable(let found?) = read else { return Self.fastUnsure }
    // Whole, and this key's: now judge it (expiry from `meta`, read in the same bracket).
    let (e, meta) = found
    if meta & Format.expiryMask != 0 && Expiry.isExpired(meta, now: Sys.expiryClockMilliseconds()) {
      return Self.fastUnsure
    }
    if e.vlen <= buffer.count && checksumOnRead,
      KeyHash.checksum(UnsafeRawBufferPointer(start: buffer.baseAddress, count: e.vlen), hash: hash) != e.sum
    {
      return Self.fastUnsure
    }
    if meta & Format.hotBit == 0 && writable { index.markHit(i, meta: meta) }
    stamp = EntryStamp(e)
    return e.vlen
  }
}
