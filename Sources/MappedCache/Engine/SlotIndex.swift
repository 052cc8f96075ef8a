import Synchronization

/// The index: `slotCount` slots, open addressing with linear probing from a key's home
/// slot, backward-shift deletion (no tombstones).
///
/// Slot states and transitions (all under the write lock, each inside one seqlock
/// write: `seq` odd → fields → `seq` even):
///
///     empty   (hash 0)            → live      insert (`publish`, `publishInline`)
///     live    (hash ≠ 0, loc → r) → live      overwrite (`publish*`, `rewriteInlineValue`),
///                                             touch (meta), move (`move`: loc changes,
///                                             a promotion or second chance copied r)
///     live                        → empty     remove, evict, expire (`remove`): backward-
///                                             shift deletion pulls later entries of the
///                                             run into the hole, so there are no tombstones
///     any     (seq odd)           → recovery  a writer died mid-write: repair
///                                             (`Checker`) drops the entry, unless the write
///                                             was a move (named by the intent record),
///                                             whose entry it keeps
///
/// A slot is only ever odd while its writer runs; readers that see odd wait (bounded).
/// While a removal shifts entries, the header's shift sequence is odd too, so a reader
/// that missed re-checks (an entry may have moved past its probe).
struct SlotIndex {
  let memory: MappedMemory

  /// Slots probed by the short paths (`Reader.probeInline`, `Writer.overwriteInPlace`)
  /// before they hand a lookup to the general path: at the table's 75 % load limit,
  /// almost every key sits within this many slots of home.
  static let shortProbe = 8

  var slotCount: Int { memory.slotCount }

  @inline(__always)
  func home(_ hash: UInt64) -> Int {
    // Lemire's multiply-shift range reduction: uniform over any slot count.
    Int(truncatingIfNeeded: hash.multipliedFullWidth(by: UInt64(memory.slotCount)).high)
  }

  @inline(__always)
  func next(_ i: Int) -> Int { i &+ 1 == memory.slotCount ? 0 : i &+ 1 }

  /// Slots from `j`'s home to `j` (0 when `j` is home), wrapping.
  @inline(__always)
  func distanceFromHome(_ j: Int, hash: UInt64) -> Int {
    let n = memory.slotCount
    // Safe: home and j are both in 0..<n, so the distance is in 0..<n.
    return (j - home(hash) + n) % n
  }

  // MARK: What a slot holds

  /// What a slot says about its entry: where its bytes are and what a reader returns
  /// with them. For an inline entry the lengths come from the slot's inline area (checked
  /// against its capacity) and `loc` names its header-only record; otherwise they come
  /// from the record at `loc` (checked by `recordHeader(at:)`).
  struct Entry {
    /// The record's offset. For an inline entry described by `entry(at:meta:)`, 0:
    /// readers never need it, and the load is kept off their path; `find` fills it in.
    var loc: Int
    var inline: Bool
    var klen: Int
    var vlen: Int
    var sum: UInt32
    var cas: UInt64
    /// The record's size in its log (the header alone for an inline entry).
    var recordSize: Int
    /// Key and value bytes, as counted in `liveBytes`.
    var liveBytes: Int { klen &+ vlen }
  }

  /// The entry slot `i` describes (given its `meta`), when every length and offset it
  /// names checks out; nil otherwise. Reads `loc` itself, only for an entry in a record.
  /// Racy under readers (they validate with the seqlock afterwards); exact for writers.
  @inline(__always)
  func entry(at i: Int, meta: UInt64) -> Entry? {
    if meta & Format.inlineBit != 0 {
      guard let l = memory.inlineLengths(i) else { return nil }
      return Entry(
        loc: 0, inline: true, klen: l.klen, vlen: l.vlen, sum: memory.inlineSum(i),
        cas: memory.inlineVersion(i), recordSize: Format.headerOnlyRecordBytes)
    }
    let loc = Int(truncatingIfNeeded: memory.loc(i).load(.relaxed))
    guard let rh = memory.recordHeader(at: loc), rh.kind == Format.kindEntry else { return nil }
    return Entry(loc: loc, inline: false, klen: rh.klen, vlen: rh.vlen, sum: rh.sum, cas: rh.cas, recordSize: rh.size)
  }

  /// Does slot `i` (with this `meta`) hold `key`? The one answer every probe uses, reader
  /// and writer alike: the entry, when its bounds check out and its key equals `key`.
  /// The caller has matched the slot's hash with the key's.
  @inline(__always)
  func entry(at i: Int, meta: UInt64, matching key: UnsafeRawBufferPointer) -> Entry? {
    guard let e = entry(at: i, meta: meta), e.klen == key.count else { return nil }
    let equal = e.inline ? memory.inlineKeyEquals(i, key) : memory.keyEquals(record: e.loc, key)
    return equal ? e : nil
  }

  /// Copies `e`'s value (`e.vlen` bytes) to `out`.
  @inline(__always)
  func copyValue(of e: Entry, slot i: Int, to out: UnsafeMutableRawPointer) {
    if e.inline {
      memory.copyInlineValue(i, klen: e.klen, vlen: e.vlen, to: out)
    } else {
      memory.copyValue(record: e.loc, klen: e.klen, vlen: e.vlen, to: out)
    }
  }

  /// `e`'s key and value bytes in the mapping: stable for writers (under the lock);
  /// for a lock-free scan, valid only until the slot's seqlock is re-checked.
  func bytes(of e: Entry, slot i: Int) -> (key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
    if e.inline { return memory.inlineBytes(i, klen: e.klen, vlen: e.vlen) }
    return memory.recordBytes(
      e.loc,
      MappedMemory.RecordHeader(
        size: e.recordSize, klen: e.klen, kind: Format.kindEntry,
        vlen: e.vlen, sum: e.sum, hash: 0, cas: e.cas))
  }

  // MARK: Lock-free reads of a slot

  /// How a seqlock read of one slot went.
  enum SeqlockRead<R> {
    /// The slot did not change while `body` read it: what `body` returned is whole.
    case stable(R)
    /// A writer is changing the slot (its `seq` is odd).
    case busy
    /// A writer changed the slot while `body` read it: read it again.
    case changed
  }

  /// The one seqlock read of slot `i` (the read protocol's steps 1–3): load `seq` with
  /// acquire ordering; if even, run `body` (racy loads and copies, which must only
  /// bounds-check what they read); acquire fence; reload `seq`. Only a `.stable` result
  /// may be trusted, and only then judged (expiry, checksum) and handed out.
  @inline(__always)
  func seqlockRead<R>(_ i: Int, _ body: () -> R) -> SeqlockRead<R> {
    let seq = memory.seq(i)
    let s1 = seq.load(.acquiring)
    if s1 & 1 != 0 { return .busy }
    let r = body()
    atomicMemoryFence(ordering: .acquiring)
    return seq.load(.relaxed) == s1 ? .stable(r) : .changed
  }

  @inline(__always) func hash(at i: Int) -> UInt64 { memory.hash(i).load(.relaxed) }
  @inline(__always) func meta(at i: Int) -> UInt64 { memory.meta(i).load(.relaxed) }
  @inline(__always) func loc(at i: Int) -> Int { Int(truncatingIfNeeded: memory.loc(i).load(.relaxed)) }

  /// Sets slot `i`'s reference bit (CLOCK's "used since the hand passed"). A reader's
  /// only store: relaxed, outside the seqlock (a lost or late bit only changes eviction
  /// order), and only on a writable mapping.
  @inline(__always)
  func markReferenced(_ i: Int) { memory.meta(i).bitwiseOr(Format.referencedBit, .relaxed) }

  /// Counts a hit on slot `i`, whose `meta` the reader saw: the reference bit on the
  /// first, the frequent bit on the second, the hot bit on the third (the main log's
  /// clock keeps an entry for one pass of the hand per hit, up to 3, as S3-FIFO's
  /// frequency counter does). Call it only when `meta` lacks `Format.hotBit`: the bits
  /// are set in order, so the last one set means all are (a bit set late, after the
  /// hand cleared the others, only changes eviction order). Stores as `markReferenced`
  /// (two readers racing may set one bit for two hits).
  @inline(__always)
  func markHit(_ i: Int, meta: UInt64) {
    let bit =
      meta & Format.referencedBit == 0
      ? Format.referencedBit : meta & Format.frequentBit == 0 ? Format.frequentBit : Format.hotBit
    memory.meta(i).bitwiseOr(bit, .relaxed)
  }

  // MARK: Writers' lookups (under the lock, so slots cannot change underneath)

  enum Find {
    case found(slot: Int, entry: Entry)
    case empty(slot: Int)
    /// No empty slot in the whole table: only a damaged file gets here.
    case full
  }

  /// The slot holding `key`, or the empty slot that ends its probe run.
  func find(_ key: UnsafeRawBufferPointer, hash: UInt64, _ held: borrowing WriteLock.Held) -> Find {
    var i = home(hash)
    for _ in 0..<memory.slotCount {
      let h = self.hash(at: i)
      if h == 0 { return .empty(slot: i) }
      if h == hash, var e = entry(at: i, meta: meta(at: i), matching: key) {
        if e.inline { e.loc = loc(at: i) }
        return .found(slot: i, entry: e)
      }
      i = next(i)
    }
    return .full
  }

  /// The slot whose entry's record is at `loc` (the eviction hand's question), if any.
  func slot(hash: UInt64, loc: Int, _ held: borrowing WriteLock.Held) -> Int? {
    var i = home(hash)
    for _ in 0..<memory.slotCount {
      let h = self.hash(at: i)
      if h == 0 { return nil }
      if h == hash && self.loc(at: i) == loc { return i }
      i = next(i)
    }
    return nil
  }

  // MARK: Slot writes (under the lock, each one seqlock write)

  /// The seqlock write bracket for slot `i`: `seq` odd, release fence, the stores in
  /// `body`, `seq` even with release ordering. Every store into a slot is made in one.
  /// Parity-safe: the odd value is the stored one with its low bit set, so a word that
  /// damage left odd is odd during the write and even after it, never the reverse.
  @inline(__always)
  private func seqlockWrite(_ i: Int, _ body: () -> Void) {
    let seq = memory.seq(i)
    let odd = seq.load(.relaxed) | 1
    seq.store(odd, .relaxed)
    atomicMemoryFence(ordering: .releasing)
    body()
    seq.store(odd &+ 1, .releasing)
  }

  @inline(__always)
  private func storeWords(_ i: Int, hash: UInt64, loc: Int, meta: UInt64) {
    memory.hash(i).store(hash, .relaxed)
    memory.loc(i).store(UInt64(truncatingIfNeeded: loc), .relaxed)
    memory.meta(i).store(meta, .relaxed)
  }

  /// Points slot `i` at the record at `loc` (an entry kept in its record).
  @inline(__always)
  func publish(_ i: Int, hash: UInt64, loc: Int, meta: UInt64, _ held: borrowing WriteLock.Held) {
    seqlockWrite(i) { storeWords(i, hash: hash, loc: loc, meta: meta) }
  }

  /// Writes a whole inline entry into slot `i`: the words and the inline area.
  func publishInline(
    _ i: Int, hash: UInt64, loc: Int, meta: UInt64, key: UnsafeRawBufferPointer,
    value: UnsafeRawBufferPointer, sum: UInt32, cas: UInt64, _ held: borrowing WriteLock.Held
  ) {
    seqlockWrite(i) {
      storeWords(i, hash: hash, loc: loc, meta: meta | Format.inlineBit)
      memory.writeInline(i, key: key, value: value, sum: sum, cas: cas, held)
    }
  }

  /// Rewrites slot `i`'s inline value in place, its key (`klen` bytes) and words other
  /// than `meta` unchanged. `midway` runs after the stores, with `seq` still odd (a test
  /// hook: the reliability tests kill a counter's rewrite there).
  @inline(__always)
  func rewriteInlineValue(
    _ i: Int, klen: Int, meta: UInt64, value: UnsafeRawBufferPointer, sum: UInt32,
    cas: UInt64, midway: () -> Void = {}, _ held: borrowing WriteLock.Held
  ) {
    seqlockWrite(i) {
      memory.meta(i).store(meta | Format.inlineBit, .relaxed)
      memory.writeInlineValue(i, klen: klen, value: value, sum: sum, cas: cas, held)
      midway()
    }
  }

  /// Rewrites the value of slot `i`'s entry in its record at `loc` in place (the same
  /// length; the record's checksum and version too) and the slot's `meta`, in one seqlock
  /// write of the slot: readers copy a record only inside its slot's bracket, so none
  /// sees the rewrite half done. `midway` runs after the stores, with `seq` still odd (a
  /// test hook).
  @inline(__always)
  func rewriteRecordValue(
    _ i: Int, loc: Int, klen: Int, meta: UInt64, value: UnsafeRawBufferPointer, sum: UInt32,
    cas: UInt64, midway: () -> Void = {}, _ held: borrowing WriteLock.Held
  ) {
    seqlockWrite(i) {
      memory.meta(i).store(meta, .relaxed)
      memory.rewriteRecordValue(at: loc, klen: klen, value: value, sum: sum, cas: cas, held)
      midway()
    }
  }

  /// Replaces slot `i`'s `meta` (expiry and flags), keeping everything else.
  func setMeta(_ i: Int, _ meta: UInt64, _ held: borrowing WriteLock.Held) {
    seqlockWrite(i) { memory.meta(i).store(meta, .relaxed) }
  }

  /// Points slot `i` at `loc`, a whole copy of its entry's record that eviction has just
  /// appended and committed (a promotion or a second chance), in one seqlock write.
  /// The old copy stays inside its log's live range until the caller advances that
  /// log's tail, so every state a writer killed inside the write can leave the slot in
  /// (`loc` and `meta` each old or new; the hash is not written) names a whole copy.
  /// The intent record names the slot for the time of the write: repair then keeps
  /// the entry rather than drop it as it drops a set's half-written slot (only the
  /// entry being written may be lost, and a move writes none). `midway` runs between
  /// the `loc` and `meta` stores (a test hook: the reliability tests are killed there).
  /// Precondition: inside `CacheEngine.withWriteLock` (the intent record says `intentChange`).
  @inline(__always)
  func move(_ i: Int, toRecord loc: Int, meta: UInt64, midway: () -> Void = {}, _ held: borrowing WriteLock.Held) {
    let intent = memory.header(.intent)
    intent.store(Format.intentMoveBase &+ UInt64(i), .relaxed)
    atomicMemoryFence(ordering: .releasing)  // named before the slot turns odd
    seqlockWrite(i) {
      memory.loc(i).store(UInt64(truncatingIfNeeded: loc), .relaxed)
      midway()
      memory.meta(i).store(meta, .relaxed)
    }
    intent.store(Format.intentChange, .relaxed)
  }

  /// Copies everything slot `from` holds into slot `to`, in one seqlock write of `to`.
  func copy(from: Int, to: Int, _ held: borrowing WriteLock.Held) {
    seqlockWrite(to) {
      storeWords(to, hash: hash(at: from), loc: loc(at: from), meta: meta(at: from))
      memory.copyInlineArea(from: from, to: to, held)
    }
  }

  /// Empties slot `i` in one seqlock write (no shift: see `remove` for removals).
  func clear(_ i: Int, _ held: borrowing WriteLock.Held) {
    seqlockWrite(i) { storeWords(i, hash: 0, loc: 0, meta: 0) }
  }

  /// Empties slot `i`, which a dead writer may have left odd: the words are zeroed while
  /// `seq` is still odd, and only then does `seq` turn even (release), so no reader can
  /// take the half-written entry for a whole one in between.
  func clearLeftMidWrite(_ i: Int, _ held: borrowing WriteLock.Held) {
    let seq = memory.seq(i)
    guard seq.load(.relaxed) & 1 != 0 else { return clear(i, held) }
    storeWords(i, hash: 0, loc: 0, meta: 0)
    seq.add(1, .releasing)
  }

  /// Turns slot `i`'s sequence word even if a dead writer left it odd, with release
  /// ordering. Only for a slot whose contents are whole either way: a move's (see `move`).
  func finishSequence(_ i: Int, _ held: borrowing WriteLock.Held) {
    let seq = memory.seq(i)
    if seq.load(.relaxed) & 1 != 0 { seq.add(1, .releasing) }
  }

  /// Whether slot `i`'s sequence word is odd (left mid-write, seen under the lock).
  func isMidWrite(_ i: Int) -> Bool { memory.seq(i).load(.relaxed) & 1 != 0 }

  /// Flips slot `i`'s sequence word by one (a test hook leaves a slot odd with it, and
  /// then even again).
  func _toggleSequence(_ i: Int, _ held: borrowing WriteLock.Held) { memory.seq(i).add(1, .releasing) }

  // MARK: Removal (backward shift)

  /// Brackets a change that moves entries between slots for readers: the shift sequence
  /// is odd meanwhile, so a reader that missed re-checks.
  /// Parity-safe as `seqlockWrite` is: a shift sequence that damage left odd (readers
  /// then wait on every miss) is odd during the change and even after it.
  @inline(__always)
  func shifting<R>(_ held: borrowing WriteLock.Held, _ body: () throws -> R) rethrows -> R {
    let shift = memory.header(.shiftSeq)
    let odd = shift.load(.relaxed) | 1
    shift.store(odd, .relaxed)
    atomicMemoryFence(ordering: .releasing)
    defer { shift.store(odd &+ 1, .releasing) }
    return try body()
  }

  /// Whether the shift sequence is odd: a removal is moving entries, or (seen under the
  /// lock) damage left it so.
  var isShifting: Bool { memory.header(.shiftSeq).load(.relaxed) & 1 != 0 }

  /// Removes slot `i`'s entry, updating the entry and byte counts, by backward shift
  /// (`shiftClear`), inside the shift sequence's bracket.
  func remove(_ i: Int, counters: TableCounters, _ held: borrowing WriteLock.Held) {
    if let e = entry(at: i, meta: meta(at: i)) { counters.changeLiveBytes(adding: 0, removing: e.liveBytes, held) }
    counters.set(.entries, counters.value(.entries) &- 1, held)
    shifting(held) { shiftClear(i, held) }
  }

  /// Empties slot `i` by backward shift: each later entry of the run that may sit in
  /// the hole moves into it (one seqlock write each), and the last hole becomes empty,
  /// so runs stay as short as the load allows. Precondition: inside `shifting`.
  func shiftClear(_ i: Int, _ held: borrowing WriteLock.Held) {
    let n = memory.slotCount
    var hole = i
    var j = i
    for _ in 0..<n {
      j = next(j)
      let h = hash(at: j)
      if h == 0 || j == i { break }
      // j may move to the hole iff the hole lies between j's home and j.
      // Safe: j and hole are both in 0..<n.
      if distanceFromHome(j, hash: h) >= (j - hole + n) % n {
        copy(from: j, to: hole, held)
        hole = j
      }
    }
    clear(hole, held)
  }
}
