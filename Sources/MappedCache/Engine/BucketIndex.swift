import Synchronization

/// A partition's index: groups of four buckets of ten slots, a key in one of its two
/// places (`Placement`), found by its tag and then by its key in the record its slot
/// names (DESIGN.md, section 2).
///
/// Slot states and transitions (all under the partition's lock, each inside one seqlock
/// write of the bucket: `seq` odd → stores → `seq` even):
///
///     empty  (tag 0)             → live    insert (`publish`)
///     live   (tag, word → r)     → live    overwrite (`publish`: a new record;
///                                          `rewriteValue`: r's value in place), touch
///                                          (`setExpiry`), move (`move`: a copy of r)
///     live                       → empty   remove, evict, expire (`clear`); the second
///                                          step of a displacement (`displace`)
///     any    (seq odd)           → repair  a writer died mid-write: repair (`Checker`)
///                                          keeps each of the bucket's entries that
///                                          checks out, then makes `seq` even
///
/// A bucket is only ever odd while its writer runs; readers that see odd wait (bounded).
/// Entries move between buckets only between a key's two places (a displacement, written
/// in the new place before it is cleared from the old, inside the move sequence's
/// bracket, which readers that missed check), or in a split or merge of groups, which
/// changes the geometry word readers check (R5).
struct BucketIndex {
  let part: PartitionMemory

  /// One slot of one bucket.
  struct Slot: Equatable, Hashable {
    var place: Place
    var slot: Int
  }

  /// A live slot's entry: where it is, its word (offset and hit bits) and its record's
  /// checked header.
  struct Entry {
    var at: Slot
    var word: UInt32
    var header: RecordFormat.Header
    @inline(__always) var offset: Int { Int(truncatingIfNeeded: word & Format.offsetMask) }
    @inline(__always) var hits: UInt32 { word & Format.hitBits }
  }

  // MARK: Geometry

  /// The geometry word, acquire (read step R1).
  @inline(__always)
  func geometry() -> Geometry { Geometry(raw: part.word(.geometry).load(.acquiring)) }

  /// The geometry word, relaxed: for a reader after its acquire fence (R5), and writers.
  @inline(__always)
  func geometryRelaxed() -> Geometry { Geometry(raw: part.word(.geometry).load(.relaxed)) }

  /// The group count as writers see it (under the lock, after repair checked it).
  var groups: Int { geometryRelaxed().groups }

  /// Slots of the index (ten per bucket, four buckets per group).
  var slotCount: Int { groups * Format.slotsPerGroup }

  // MARK: Tags

  /// The slots of a bucket whose tag equals `tag`, as a mask of bits 0-9 (exact: each
  /// two-byte lane is compared with no carry between lanes).
  @inline(__always)
  static func matching(_ tags: (UInt32, UInt64, UInt64), _ tag: UInt16) -> UInt32 {
    let pattern = UInt64(tag) &* 0x0001_0001_0001_0001
    @inline(__always) func equalLanes(_ x: UInt64) -> UInt64 {
      // A lane's top bit ends set exactly when the lane is nonzero.
      let low: UInt64 = 0x7FFF_7FFF_7FFF_7FFF
      let nonzero = ((x & low) &+ low) | x
      return ~nonzero & 0x8000_8000_8000_8000
    }
    // The four lane bits (15, 31, 47, 63) gathered into bits 0-3 by one multiply: shifted
    // to 0, 16, 32 and 48, times 2^0 + 2^15 + 2^30 + 2^45 they land on 45, 46, 47 and 48,
    // and no two of the thirteen partial products share a bit, so nothing carries.
    @inline(__always) func lanes(_ m: UInt64) -> UInt32 {
      UInt32(truncatingIfNeeded: ((m >> 15) &* 0x0000_2000_4000_8001) >> 45) & 0xF
    }
    let first = equalLanes(UInt64(tags.0) ^ (pattern & 0xFFFF_FFFF) | 0xFFFF_FFFF_0000_0000)
    return lanes(first) | lanes(equalLanes(tags.1 ^ pattern)) << 2 | lanes(equalLanes(tags.2 ^ pattern)) << 6
  }

  /// The two-byte lanes of `x` that are zero, as a mask of bits 0-3 (lane 0 the low
  /// bytes): `matching`'s test of one word, for the ghost lines' tags.
  @inline(__always)
  static func zeroLanes(_ x: UInt64) -> UInt32 {
    let low: UInt64 = 0x7FFF_7FFF_7FFF_7FFF
    let zero = ~(((x & low) &+ low) | x) & 0x8000_8000_8000_8000
    return UInt32(truncatingIfNeeded: ((zero >> 15) &* 0x0000_2000_4000_8001) >> 45) & 0xF
  }

  /// The empty slots of a bucket, as a mask of bits 0-9.
  @inline(__always)
  func emptySlots(_ place: Place) -> UInt32 { part.tagMatches(place, 0) }

  // MARK: Lock-free reads of a bucket

  /// How a seqlock read of one bucket went.
  enum SeqlockRead<R> {
    /// The bucket did not change while `body` read it: what `body` returned is whole.
    case stable(R)
    /// A writer is changing the bucket (its `seq` is odd).
    case busy
    /// A writer changed the bucket while `body` read it: read it again.
    case changed
  }

  /// The one seqlock read of a bucket (read step R3): load `seq` with acquire ordering;
  /// if even, run `body` (racy loads and copies, which must only bounds-check what they
  /// read); acquire fence; reload `seq`. Only a `.stable` result may be trusted, and only
  /// then judged (expiry, checksum) and handed out.
  @inline(__always)
  func seqlockRead<R>(_ place: Place, _ body: () -> R) -> SeqlockRead<R> {
    let seq = part.seq(place)
    let s1 = seq.load(.acquiring)
    if s1 & 1 != 0 { return .busy }
    let r = body()
    atomicMemoryFence(ordering: .acquiring)
    return seq.load(.relaxed) == s1 ? .stable(r) : .changed
  }

  /// Does this bucket hold `key`? The one answer every probe uses, reader and writer
  /// alike: the first slot whose tag is `tag` and whose record checks out and holds
  /// `key`, with the value copied into `buffer` when it fits (nothing is copied when
  /// `buffer` is empty). Racy under readers (inside `seqlockRead`); exact for writers.
  /// `prefetchTail` false: the caller has fetched the records whole already (the batch
  /// read's B2). `words`: `key` as `KeyHash.shortKey` gave it, when it has at most 16
  /// bytes (nil: computed here); records' keys are compared with them, and longer keys
  /// byte for byte.
  @inline(__always)
  func lookup(
    _ place: Place, tag: UInt16, key: UnsafeRawBufferPointer, copyInto buffer: UnsafeMutableRawBufferPointer,
    prefetchTail: Bool = true, words: (UInt64, UInt64)? = nil
  ) -> Entry? {
    let words = words ?? KeyHash.shortWords(of: key)
    var m = part.tagMatches(place, tag)
    while m != 0 {
      let slot = m.trailingZeroBitCount
      m &= m &- 1
      let word = part.entryWord(place, slot).load(.relaxed)
      let offset = Int(truncatingIfNeeded: word & Format.offsetMask)
      // The value's line, while the header's miss is under way.
      if prefetchTail { part.prefetchRecordTail(at: offset) }
      guard let h = part.record(at: offset, free: false), h.klen == key.count,
        part.keyEquals(record: offset, h, key, words: words)
      else {
        continue
      }
      if h.vlen <= buffer.count, let out = buffer.baseAddress { part.copyValue(record: offset, h, to: out) }
      return Entry(at: Slot(place: place, slot: slot), word: word, header: h)
    }
    return nil
  }

  /// Counts a hit on a slot whose word the reader saw: the reference bit on the first,
  /// the frequent bit on the second, the hot bit on the third (the main log's clock
  /// keeps an entry for one pass of the hand per hit, up to 3). Call it only when the
  /// word lacks `Format.hotBit`. A reader's only store: an atomic OR, relaxed, outside
  /// the seqlock (a lost or late bit only changes eviction order), and only on a
  /// writable mapping.
  @inline(__always)
  func markHit(_ at: Slot, word: UInt32) {
    part.entryWord(at.place, at.slot).bitwiseOr(Self.hitBit(word), .relaxed)
  }

  /// The bit `markHit` sets in a slot whose word is `word` (which lacks `Format.hotBit`).
  @inline(__always)
  static func hitBit(_ word: UInt32) -> UInt32 {
    word & Format.referencedBit == 0
      ? Format.referencedBit : word & Format.frequentBit == 0 ? Format.frequentBit : Format.hotBit
  }

  // MARK: Writers' lookups (under the lock, so buckets cannot change underneath)

  /// The slot holding `key`, in either of its places.
  func find(_ key: UnsafeRawBufferPointer, placement pl: Placement, _ held: borrowing WriteLock.Held) -> Entry? {
    let none = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    let words = KeyHash.shortWords(of: key)
    // One loop over the two places: `lookup` inlined once (as in `Reader.quickCopy`).
    var place = pl.first
    while true {
      if let e = lookup(place, tag: pl.tag, key: key, copyInto: none, words: words) { return e }
      if place == pl.second { return nil }
      place = pl.second
    }
  }

  /// The slot naming the record at `offset` (whose key hashes to `hash`), if any: the
  /// eviction hand's question. A record no slot names is dead.
  func slot(naming offset: Int, hash: UInt64, _ held: borrowing WriteLock.Held) -> Entry? {
    let pl = Placement(hash: hash, groups: groups)
    if let e = slot(naming: offset, in: pl.first, tag: pl.tag) { return e }
    return pl.second == pl.first ? nil : slot(naming: offset, in: pl.second, tag: pl.tag)
  }

  private func slot(naming offset: Int, in place: Place, tag: UInt16) -> Entry? {
    var m = part.tagMatches(place, tag)
    while m != 0 {
      let slot = m.trailingZeroBitCount
      m &= m &- 1
      let word = part.entryWord(place, slot).load(.relaxed)
      if Int(truncatingIfNeeded: word & Format.offsetMask) == offset, let h = part.record(at: offset, free: false) {
        return Entry(at: Slot(place: place, slot: slot), word: word, header: h)
      }
    }
    return nil
  }

  /// What slot `at` holds (its tag nonzero and its record checking out), for scans and
  /// repair; nil for an empty slot or one whose record does not check out.
  func entry(at: Slot) -> Entry? {
    guard part.tag(at.place, at.slot) != 0 else { return nil }
    let word = part.entryWord(at.place, at.slot).load(.relaxed)
    guard let h = part.record(at: Int(truncatingIfNeeded: word & Format.offsetMask), free: false) else { return nil }
    return Entry(at: at, word: word, header: h)
  }

  /// The places of the key in the record of `e`, under `groups` groups.
  func placement(of e: Entry, groups: Int) -> (hash: UInt64, placement: Placement) {
    let hash = part.keyHash(record: e.offset, e.header)
    return (hash, Placement(hash: hash, groups: groups))
  }

  // MARK: Slot writes (under the lock, each one seqlock write of a bucket)

  /// The seqlock write bracket of a bucket: `seq` odd, release fence, the stores in
  /// `body`, `seq` even with release ordering. Every store into a bucket is made in one.
  /// Parity-safe: the odd value is the stored one with its low bit set, so a word that
  /// damage left odd is odd during the write and even after it, never the reverse.
  @inline(__always)
  func seqlockWrite<R>(_ place: Place, _ held: borrowing WriteLock.Held, _ body: () throws -> R) rethrows -> R {
    let seq = part.seq(place)
    let odd = seq.load(.relaxed) | 1
    seq.store(odd, .relaxed)
    atomicMemoryFence(ordering: .releasing)
    defer { seq.store(odd &+ 1, .releasing) }
    return try body()
  }

  /// Points slot `at` at the record at `offset` with hit bits `hits`, under `tag`.
  @inline(__always)
  func publish(_ at: Slot, offset: Int, hits: UInt32, tag: UInt16, _ held: borrowing WriteLock.Held) {
    seqlockWrite(at.place, held) {
      part.entryWord(at.place, at.slot).store(UInt32(truncatingIfNeeded: offset) | (hits & Format.hitBits), .relaxed)
      part.storeTag(at.place, at.slot, tag, held)
    }
  }

  /// Points slot `at` at `offset`, a whole copy of its entry's record that eviction has
  /// just appended and committed (a promotion or a second chance), with hit bits `hits`.
  /// The old copy stays inside its log's live range until the caller advances that
  /// log's tail, so a writer killed inside the write leaves a slot that names a whole
  /// copy, old or new (repair keeps it).
  /// `midway` runs inside the write, after the store (a test hook: the reliability tests
  /// kill the process there).
  @inline(__always)
  func move(
    _ at: Slot, toRecord offset: Int, hits: UInt32, midway: () -> Void = {}, _ held: borrowing WriteLock.Held
  ) {
    seqlockWrite(at.place, held) {
      part.entryWord(at.place, at.slot).store(UInt32(truncatingIfNeeded: offset) | (hits & Format.hitBits), .relaxed)
      midway()
    }
  }

  /// Replaces a live slot's hit bits, keeping its record: eviction's clock hand taking
  /// one off. No seqlock write: the word's offset stays, and a reader's concurrent bit
  /// may be lost (an order change only).
  @inline(__always)
  func setHits(_ e: Entry, _ hits: UInt32, _ held: borrowing WriteLock.Held) {
    part.entryWord(e.at.place, e.at.slot).store(
      UInt32(truncatingIfNeeded: e.offset) | (hits & Format.hitBits), .relaxed)
  }

  /// Empties slot `at` in one seqlock write.
  @inline(__always)
  func clear(_ at: Slot, _ held: borrowing WriteLock.Held) {
    seqlockWrite(at.place, held) {
      part.storeTag(at.place, at.slot, 0, held)
      part.entryWord(at.place, at.slot).store(0, .relaxed)
    }
  }

  /// Rewrites the value of `e`'s record in place with `c`'s (the same length; its
  /// version, checksum and, when it has one, expiry too), in one seqlock write of its bucket: readers
  /// copy a record only inside its bucket's bracket, so none sees the rewrite half done.
  /// `midway` runs after the stores, with `seq` still odd (a test hook).
  @inline(__always)
  func rewriteValue(_ e: Entry, _ c: RecordFormat.Content, midway: () -> Void = {}, _ held: borrowing WriteLock.Held) {
    seqlockWrite(e.at.place, held) {
      part.rewriteValue(at: e.offset, e.header, c, held)
      midway()
    }
  }

  /// Rewrites `e`'s record as `c`, a record of its key with another value, in place within
  /// `extent` bytes (`MappedMemory.rewriteRecord`), in one seqlock write of its bucket.
  /// `midway` runs after the stores, with `seq` still odd (a test hook).
  @inline(__always)
  func rewriteRecord(
    _ e: Entry, extent: Int, _ c: RecordFormat.Content, midway: () -> Void = {}, _ held: borrowing WriteLock.Held
  ) {
    seqlockWrite(e.at.place, held) {
      part.rewriteRecord(at: e.offset, e.header, extent: extent, c, held)
      midway()
    }
  }

  /// Rewrites the expiry of `e`'s record, which has one, in one seqlock write of its bucket.
  func setExpiry(_ e: Entry, _ expiry: UInt64, _ held: borrowing WriteLock.Held) {
    seqlockWrite(e.at.place, held) { part.rewriteExpiry(at: e.offset, e.header, expiry: expiry, held) }
  }

  // MARK: Finding room

  /// A free slot for a new key of placement `pl`: an empty one in its first place, else
  /// in its second, else one freed by moving entries to their other places (`displace`,
  /// looking at up to `searchLimit` entries). Nil when none frees up.
  func allocate(_ pl: Placement, searchLimit: Int = BucketIndex.deepSearch, _ held: borrowing WriteLock.Held) -> Slot? {
    let first = emptySlots(pl.first)
    if first != 0 { return Slot(place: pl.first, slot: first.trailingZeroBitCount) }
    let second = emptySlots(pl.second)
    if second != 0 { return Slot(place: pl.second, slot: second.trailingZeroBitCount) }
    return displace(pl, limit: searchLimit, held)
  }

  /// Entries a displacement search looks at before it gives up. Each costs a record read
  /// (its key's other place is computed from its hash), most of them cache misses.
  ///
  /// Shallow: the two buckets' own entries, moved one step. A writer tries this first and,
  /// while the index can still grow, splits a group rather than search deeper: at a fill
  /// rate of a million keys a second, a deep search on every insert into a full bucket
  /// made filling ten times slower. Deep: the last resort before an eviction.
  static let shallowSearch = 2 * Format.slotsPerBucket
  static let deepSearch = 256

  /// Frees a slot in one of `pl`'s buckets, both full, by moving entries to their other
  /// places: a breadth-first cuckoo search. Its first level is the entries of the two
  /// buckets; an entry whose other place has room is moved there; otherwise the entries
  /// of that other place are the next level, each to be moved on first. At most
  /// `limit` entries are looked at (at the index's load, one level usually does). The
  /// first level's records are prefetched together, and each entry's other bucket is
  /// looked at as soon as its key is hashed, so the search ends at the first entry that
  /// can move. Moves are made
  /// from the end of the chain back, each writing the entry in its new place before
  /// clearing the old, inside the move sequence's bracket (`moving`), so a reader that
  /// misses probes again.
  private func displace(_ pl: Placement, limit: Int, _ held: borrowing WriteLock.Held) -> Slot? {
    let n = groups
    for i in 0..<(pl.second == pl.first ? 1 : 2) {
      let place = i == 0 ? pl.first : pl.second
      for slot in 0..<Format.slotsPerBucket {
        part.prefetchRecord(at: Int(truncatingIfNeeded: part.entryWord(place, slot).load(.relaxed) & Format.offsetMask))
      }
    }
    // Search nodes: a slot whose entry would move, its other place, and the node whose
    // slot it would free (-1 for the first level).
    return withUnsafeTemporaryAllocation(of: (Slot, Place, Int).self, capacity: limit) { nodes -> Slot? in
      var count = 0
      // Adds `place`'s entries as nodes; returns the first first-level node whose other
      // place has room (nil for a deeper level, judged below) as it is made: one of the
      // first few usually has, and each node costs a key's hash. `count` goes in and out
      // (a captured variable is checked for exclusive access on every use).
      func expand(_ place: Place, parent: Int, _ count: inout Int) -> Int? {
        for slot in 0..<Format.slotsPerBucket where count < limit {
          let at = Slot(place: place, slot: slot)
          guard let other = otherPlace(of: at, groups: n) else { continue }
          nodes[count] = (at, other, parent)
          count += 1
          if parent < 0 && emptySlots(other) != 0 { return count - 1 }
        }
        return nil
      }
      var found = expand(pl.first, parent: -1, &count)
      if found == nil && pl.second != pl.first { found = expand(pl.second, parent: -1, &count) }
      var next = found ?? 0
      // Made when first needed: a shallow search (`shallowSearch`, most inserts into a
      // full index) never expands past the two buckets, and its allocation and hashing
      // were most of a displacement's cost.
      var expanded: Set<Int>? = nil
      while next < count {
        let (_, other, _) = nodes[next]
        let room = emptySlots(other)
        if room != 0 {
          // Move along the chain: this node's entry to the free slot, then each parent's
          // entry into the slot its child freed.
          var target = Slot(place: other, slot: room.trailingZeroBitCount)
          var k = next
          moving(held) {
            while k >= 0 {
              let (at, _, parent) = nodes[k]
              moveEntry(at, to: target, held)
              target = at
              k = parent
            }
          }
          return target
        }
        if count < limit {
          if expanded == nil { expanded = [pl.first.number, pl.second.number] }
          if expanded!.insert(other.number).inserted { _ = expand(other, parent: next, &count) }
        }
        next += 1
      }
      return nil
    }
  }

  /// The other place of the entry in slot `at` (nil for an empty slot, a record that does
  /// not check out, or a key whose two places are one).
  private func otherPlace(of at: Slot, groups n: Int) -> Place? {
    guard let e = entry(at: at) else { return nil }
    let pl = placement(of: e, groups: n).placement
    let other = pl.first == at.place ? pl.second : pl.first
    return other == at.place ? nil : other
  }

  /// Moves the entry of slot `from` to the empty slot `to`: written there, then cleared
  /// here (each one seqlock write). Precondition: inside `moving`.
  private func moveEntry(_ from: Slot, to: Slot, _ held: borrowing WriteLock.Held) {
    let word = part.entryWord(from.place, from.slot).load(.relaxed)
    let tag = part.tag(from.place, from.slot)
    publish(to, offset: Int(truncatingIfNeeded: word & Format.offsetMask), hits: word & Format.hitBits, tag: tag, held)
    clear(from, held)
  }

  /// The move sequence's bracket: odd while `body` moves entries between buckets (the
  /// stored value with bit 0 set, relaxed, then a release fence), even after (release).
  /// A reader that missed while it was odd, or saw it change, probes again
  /// (read step R5). A sequence left odd by a dead writer is made even by repair
  /// (`Checker`) before any other change.
  /// Nested brackets are one (an inner one finds the sequence odd and leaves it so).
  @inline(__always)
  func moving<R>(_ held: borrowing WriteLock.Held, _ body: () throws -> R) rethrows -> R {
    let seq = part.word(.moves)
    let current = seq.load(.relaxed)
    if current & 1 != 0 { return try body() }
    let odd = current | 1
    seq.store(odd, .relaxed)
    atomicMemoryFence(ordering: .releasing)
    defer { seq.store(odd &+ 1, .releasing) }
    return try body()
  }

  /// The move sequence (acquire): odd while entries move between buckets.
  @inline(__always)
  func moveSequence() -> UInt64 { part.word(.moves).load(.acquiring) }

  // MARK: Whole-index work

  /// Every slot of the index, group by group.
  func forEachSlot(groups n: Int, _ body: (Slot) throws -> Void) rethrows {
    for g in 0..<n {
      for b in 0..<Format.bucketsPerGroup {
        let place = Place(group: g, bucket: b)
        for s in 0..<Format.slotsPerBucket { try body(Slot(place: place, slot: s)) }
      }
    }
  }

  /// Whether a bucket's sequence word is odd (left mid-write, seen under the lock).
  func isMidWrite(_ place: Place) -> Bool { part.seq(place).load(.relaxed) & 1 != 0 }

  /// Empties slot `at` of a bucket a dead writer left odd, without a bracket of its own
  /// (the bucket is odd already: `finishSequence` makes it even afterwards).
  func clearInOddBucket(_ at: Slot, _ held: borrowing WriteLock.Held) {
    part.storeTag(at.place, at.slot, 0, held)
    part.entryWord(at.place, at.slot).store(0, .relaxed)
  }

  /// Turns a bucket's sequence word even if a dead writer left it odd, with release
  /// ordering, once repair has checked its entries.
  func finishSequence(_ place: Place, _ held: borrowing WriteLock.Held) {
    let seq = part.seq(place)
    if seq.load(.relaxed) & 1 != 0 { seq.add(1, .releasing) }
  }

  /// Flips a bucket's sequence word by one (a test hook leaves a bucket odd with it, and
  /// then even again).
  func _toggleSequence(_ place: Place, _ held: borrowing WriteLock.Held) { part.seq(place).add(1, .releasing) }

  /// Empties every slot of groups `0 ..< n`, one seqlock write per bucket.
  func clearAll(groups n: Int, _ held: borrowing WriteLock.Held) {
    for g in 0..<n {
      for b in 0..<Format.bucketsPerGroup {
        let place = Place(group: g, bucket: b)
        // Parity-safe: a bucket a dead writer left odd ends even too.
        seqlockWrite(place, held) {
          for s in 0..<Format.slotsPerBucket { clearInOddBucket(Slot(place: place, slot: s), held) }
        }
      }
    }
  }
}
