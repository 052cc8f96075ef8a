import Synchronization

/// Slot states and transitions (all under the write lock, each inside one seqlock
/// write: `seq` odd → fields → `seq` even):
///
///     empty   (hash 0)            → live      insert
///     live    (hash ≠ 0, loc → r) → live      overwrite, touch (meta), move (loc changes:
///                                             a promotion or second chance copied r)
///     live                        → empty     remove, evict, expire: backward-shift
///                                             deletion pulls later entries of the run
///                                             into the hole, so there are no tombstones
///     any     (seq odd)           → recovery  a writer died mid-write: `check(repair:)`
///                                             drops the entry, unless the write was a
///                                             move (named by the intent record), whose
///                                             entry it keeps
///
/// A slot is only ever odd while its writer runs; readers that see odd spin (bounded).
extension CacheEngine {
  /// The seqlock write bracket for slot `i`: `seq` odd, release fence, the stores in
  /// `body`, `seq` even with release ordering. Every store into a slot is made in one.
  @inline(__always)
  func seqlockWrite(_ i: Int, _ body: () -> Void) {
    let seq = memory.slot(i, Format.S.seq)
    let s = seq.pointee.load(ordering: .relaxed)
    seq.pointee.store(s &+ 1, ordering: .relaxed)
    atomicMemoryFence(ordering: .releasing)
    body()
    seq.pointee.store(s &+ 2, ordering: .releasing)
  }

  @inline(__always)
  private func storeWords(_ i: Int, hash: UInt64, loc: Int, meta: UInt64) {
    memory.slot(i, Format.S.hash).pointee.store(hash, ordering: .relaxed)
    memory.slot(i, Format.S.loc).pointee.store(UInt64(truncatingIfNeeded: loc), ordering: .relaxed)
    memory.slot(i, Format.S.meta).pointee.store(meta, ordering: .relaxed)
  }

  /// One seqlock write of a slot's three data words.
  @inline(__always)
  func writeSlot(_ i: Int, hash: UInt64, loc: Int, meta: UInt64) {
    seqlockWrite(i) { storeWords(i, hash: hash, loc: loc, meta: meta) }
  }

  /// Points slot `i` at `loc`, a whole copy of its entry's record that eviction has
  /// just appended and committed (a promotion or a second chance), in one seqlock write.
  /// The old copy stays inside its log's live range until the caller advances that
  /// log's tail, so every state a writer killed inside the write can leave the slot in
  /// (`loc` and `meta` each old or new; the hash is not written) names a whole copy.
  /// The intent record names the slot for the time of the write: repair then keeps
  /// the entry rather than drop it as it drops a set's half-written slot (only the
  /// entry being written may be lost, and a move writes none). `midway` runs between
  /// the `loc` and `meta` stores (a test hook: the reliability tests are killed there).
  /// Precondition: inside `withWriteLock` (the intent record says `intentChange`).
  @inline(__always)
  func moveSlot(_ i: Int, loc: Int, meta: UInt64, midway: () -> Void = {}) {
    store(Format.H.intent, Format.intentMoveBase &+ UInt64(i))
    atomicMemoryFence(ordering: .releasing)  // named before the slot turns odd
    seqlockWrite(i) {
      memory.slot(i, Format.S.loc).pointee.store(UInt64(truncatingIfNeeded: loc), ordering: .relaxed)
      midway()
      memory.slot(i, Format.S.meta).pointee.store(meta, ordering: .relaxed)
    }
    store(Format.H.intent, Format.intentChange)
  }

  /// One seqlock write of a whole inline entry: the words and the inline area.
  func writeSlotInline(_ i: Int, hash: UInt64, loc: Int, meta: UInt64, key: UnsafeRawBufferPointer,
                       value: UnsafeRawBufferPointer, sum: UInt32, cas: UInt64) {
    seqlockWrite(i) {
      storeWords(i, hash: hash, loc: loc, meta: meta | Format.inlineBit)
      memory.writeInline(i, key: key, value: value, sum: sum, cas: cas)
    }
  }

  /// One seqlock write of slot `i`'s value, key and words other than `meta` unchanged:
  /// an inline entry overwritten in place (its key already in the slot, `klen` bytes).
  @inline(__always)
  func rewriteSlotValue(_ i: Int, klen: Int, meta: UInt64, value: UnsafeRawBufferPointer, sum: UInt32, cas: UInt64) {
    seqlockWrite(i) {
      memory.slot(i, Format.S.meta).pointee.store(meta | Format.inlineBit, ordering: .relaxed)
      memory.writeInlineValue(i, klen: klen, value: value, sum: sum, cas: cas)
    }
  }

  /// One seqlock write of slot `to` with everything slot `from` holds.
  func copySlot(from: Int, to: Int) {
    seqlockWrite(to) {
      storeWords(to, hash: slotHash(from), loc: slotLoc(from), meta: slotMeta(from))
      memory.copyInlineArea(from: from, to: to)
    }
  }

  @inline(__always) func slotHash(_ i: Int) -> UInt64 { memory.slot(i, Format.S.hash).pointee.load(ordering: .relaxed) }
  @inline(__always) func slotLoc(_ i: Int) -> Int {
    Int(truncatingIfNeeded: memory.slot(i, Format.S.loc).pointee.load(ordering: .relaxed))
  }
  @inline(__always) func slotMeta(_ i: Int) -> UInt64 { memory.slot(i, Format.S.meta).pointee.load(ordering: .relaxed) }

  enum Find {
    /// For an inline entry, `record` describes it from its slot (lengths checked against
    /// the inline area, checksum and version from the slot), not from its log record.
    case found(slot: Int, loc: Int, record: MappedMemory.RecordHeader)
    case empty(slot: Int)
    /// No empty slot in the whole table: only a damaged file gets here.
    case full
  }

  /// Writers' lookup (under the lock: slots cannot change underneath).
  func find(_ key: UnsafeRawBufferPointer, hash: UInt64) -> Find {
    var i = memory.home(hash)
    for _ in 0..<memory.slotCount {
      let h = slotHash(i)
      if h == 0 { return .empty(slot: i) }
      if h == hash {
        let loc = slotLoc(i)
        if slotMeta(i) & Format.inlineBit != 0 {
          // Compare in the slot (no second memory access); describe the entry from it.
          if let l = memory.inlineLengths(i), l.klen == key.count, memory.inlineKeyEquals(i, key) {
            let rh = MappedMemory.RecordHeader(size: Format.headerOnlyRecordBytes, klen: l.klen,
                                               kind: Format.kindHeaderOnly, vlen: l.vlen, sum: memory.inlineSum(i),
                                               hash: h, cas: memory.inlineVersion(i))
            return .found(slot: i, loc: loc, record: rh)
          }
        } else if let rh = memory.recordHeader(at: loc), rh.kind == Format.kindEntry, rh.klen == key.count,
                  memory.keyEquals(record: loc, key) {
          return .found(slot: i, loc: loc, record: rh)
        }
      }
      i = memory.next(i)
    }
    return .full
  }

  /// The value bytes of an entry `find` returned: in its slot when inline, else in its
  /// record. Writers only (under the lock, so the bytes cannot change underneath).
  func foundValue(slot i: Int, loc: Int, _ rh: MappedMemory.RecordHeader) -> UnsafeRawBufferPointer {
    rh.kind == Format.kindHeaderOnly ? memory.inlineBytes(i, klen: rh.klen, vlen: rh.vlen).value
                                     : memory.recordBytes(loc, rh).value
  }

  /// The slot whose entry lives at `loc`, if any.
  func findSlot(hash: UInt64, loc: Int) -> Int? {
    var i = memory.home(hash)
    for _ in 0..<memory.slotCount {
      let h = slotHash(i)
      if h == 0 { return nil }
      if h == hash && slotLoc(i) == loc { return i }
      i = memory.next(i)
    }
    return nil
  }

  /// Removes slot `i`'s entry, updating the entry and byte counts, with backward-shift
  /// deletion: each later entry of the run that may sit in the hole moves into it (one
  /// seqlock write each), so runs stay as short as the load allows, with no tombstones.
  /// The shift sequence is odd meanwhile, so readers re-check any miss.
  func removeSlot(_ i: Int) {
    if slotMeta(i) & Format.inlineBit != 0, let l = memory.inlineLengths(i) {
      store(Format.H.liveBytes, load(Format.H.liveBytes) &- UInt64(l.klen + l.vlen))
    } else if let rh = memory.recordHeader(at: slotLoc(i)) {
      store(Format.H.liveBytes, load(Format.H.liveBytes) &- UInt64(rh.klen + rh.vlen))
    }
    store(Format.H.entries, load(Format.H.entries) &- 1)
    let shift = memory.word(Format.H.shiftSeq)
    shift.pointee.wrappingAdd(1, ordering: .relaxed)
    atomicMemoryFence(ordering: .releasing)
    shiftClear(i)
    shift.pointee.wrappingAdd(1, ordering: .releasing)
  }

  /// Empties slot `i` by backward shift: each later entry of the run that may sit in
  /// the hole moves into it, and the last hole becomes empty. Precondition: the shift
  /// sequence is odd (the caller brackets the change for readers).
  func shiftClear(_ i: Int) {
    let n = memory.slotCount
    var hole = i
    var j = i
    for _ in 0..<n {
      j = memory.next(j)
      let h = slotHash(j)
      if h == 0 || j == i { break }
      let home = memory.home(h)
      // j may move to the hole iff the hole lies between j's home and j.
      let fromHome = (j - home + n) % n
      let fromHole = (j - hole + n) % n
      if fromHome >= fromHole {
        copySlot(from: j, to: hole)
        hole = j
      }
    }
    writeSlot(hole, hash: 0, loc: 0, meta: 0)
  }

  @inline(__always)
  func isExpired(_ meta: UInt64, now: UInt64) -> Bool {
    let e = meta & Format.expiryMask
    return e != 0 && e <= now
  }

  // MARK: Ghost (keys recently evicted from the small log)

  @inline(__always)
  private func ghostPlace(_ hash: UInt64) -> (index: Int, tag: UInt32) {
    let index = Int(truncatingIfNeeded: ((hash >> 20) & 0xFFFF_FFFF) &* UInt64(layout.ghostCount) >> 32)
    return (index, UInt32(truncatingIfNeeded: hash >> 1) | 1)
  }

  func ghostRemember(_ hash: UInt64) {
    let g = ghostPlace(hash)
    memory.ghost(g.index, ghostOffset: layout.ghostOffset).pointee.store(g.tag, ordering: .relaxed)
  }

  /// Whether `hash` was recently evicted from the small log (and forgets it).
  func ghostRecall(_ hash: UInt64) -> Bool {
    let g = ghostPlace(hash)
    let w = memory.ghost(g.index, ghostOffset: layout.ghostOffset)
    guard w.pointee.load(ordering: .relaxed) == g.tag else { return false }
    w.pointee.store(0, ordering: .relaxed)
    return true
  }

  func ghostClear() {
    for i in 0..<layout.ghostCount {
      memory.ghost(i, ghostOffset: layout.ghostOffset).pointee.store(0, ordering: .relaxed)
    }
  }
}
