import SystemCalls

/// The write side: every change to a partition, each under its lock (each function
/// takes its witness and the partition it names). The write protocol, as `store` numbers
/// it (encoding, hashing and checksumming happen before the lock, in `prepare`, W0;
/// `CacheEngine.withWriteLock` takes the lock, repairs first if the last holder died
/// mid-change, and sets the intent word, W1):
///  W2. find the key in its two places;
///  W3. an entry of the same record size is rewritten in place: one seqlock write of its
///      bucket (`BucketIndex.rewriteValue`), keeping its place in the eviction order;
///  W3b. one whose record changes size, too, when the new record fits in the old one's
///      bytes and those of dead records right after it (`rewriteExtent`,
///      `BucketIndex.rewriteRecord`);
///  W4. make room: a group for the index when a new entry would pass 95 % of its slots
///      (`IndexResizer.growIfFull`), a free record for a record bound for main
///      (`FreeLists.take`) or room in the destination log (`EvictionPolicy.makeRoom`),
///      then for a new key a slot (`BucketIndex.allocate`, or an eviction from its two
///      buckets when the index is waiting for space);
///  W5. write the record into the free record, or at the log's head (a wrap marker first
///      if it would pass the limit) and then advance the head: the record is complete
///      before anything names it;
///  W6. publish: one seqlock write of the bucket (the slot's word and tag);
///  W7. update the counts, and list an overwrite's old record as free (`FreeLists.release`);
///      `withWriteLock` clears the intent word and releases the lock.
/// A writer killed at any point leaves: before W6, an unreferenced record (garbage the
/// tail skips); during W6 (or W3, W3b), an odd bucket, checked entry by entry by the next
/// writer's repair (W3 and W3b name their slot in the intent word, and repair drops it); after W6,
/// a stored entry with stale counts (recounted by repair).
struct Writer {
  let memory: MappedMemory
  let maxKey: Int
  let maxValue: Int
  let path: String
  /// Told of ghost hits (the growth policy's signal). Owned by the engine.
  unowned(unsafe) let growthTrigger: GrowthTrigger
  /// The slots this handle's recent sets found their keys in (W0's hints). Freed by
  /// the engine's `deinit`.
  let recent: RecentSlots

  typealias SetCondition = CacheEngine.SetCondition
  typealias SetOutcome = CacheEngine.SetOutcome

  /// An encoded entry, checked and hashed, ready to be stored under the lock.
  ///
  /// The fields are laid out words first, the hint and the checksum last, so that the
  /// batch write's two groups of 16 (`BatchWriter`) stay within the 1 KiB a temporary
  /// allocation takes from the stack rather than the heap.
  struct PreparedWrite {
    var hash: UInt64
    /// The key's and the value's bytes (both at most `UInt32.max`: the header's limits
    /// are 32-bit), from which `size` follows.
    var keyCount: UInt32
    var valueCount: UInt32
    /// The expiry word (`Expiry`), 0 for none.
    var expiry: UInt64
    /// The key's partition, and the partition count it was routed by.
    var partition: Int
    var routedWith: Int
    /// Where W0 saw, or recalled (`RecentSlots`), the key's tag in one of its two buckets
    /// (`SlotHint`), racily: a hint that `overwriteHinted` checks under the lock.
    var hint: SlotHint
    var sum: UInt16

    /// A write of no hint, routed by no count (W0's, which has them, sets both after).
    @inline(__always)
    init(hash: UInt64, sum: UInt16, keyCount: Int, valueCount: Int, expiry: UInt64, partition: Int) {
      self.hash = hash
      self.keyCount = UInt32(truncatingIfNeeded: keyCount)
      self.valueCount = UInt32(truncatingIfNeeded: valueCount)
      self.expiry = expiry
      self.partition = partition
      routedWith = 0
      hint = .none
      self.sum = sum
    }

    /// The record's bytes, computed where a write needs them: the common set, an
    /// overwrite in place, compares lengths instead (kept in W0, the size lengthened it,
    /// `scripts/callgrind.sh`). A record has an expiry field exactly when
    /// its expiry word is not 0, as `PartitionMemory` writes it.
    @inline(__always)
    var size: Int {
      RecordFormat.size(keyCount: Int(keyCount), valueCount: Int(valueCount), expiry: expiry != 0)
    }

    /// The same write, routed to partition `p` (the file grew after `prepare`).
    @inline(__always)
    func routed(to p: Int) -> PreparedWrite {
      var w = self
      w.partition = p
      return w
    }
  }

  /// An entry on its way into a partition under the lock: its key's and its value's
  /// bytes (views, valid for the call), what W0 prepared of them, and how it goes in:
  /// with a version to keep rather than a new one (`keep`: a touch, growth's copy), and
  /// straight into main (`intoMain`: growth's copy).
  struct Incoming {
    let key: UnsafeRawBufferPointer
    let value: UnsafeRawBufferPointer
    let w: PreparedWrite
    var keep: UInt32? = nil
    var intoMain = false

    /// The record's contents, with `version`.
    @inline(__always)
    func content(version: UInt32) -> RecordFormat.Content {
      RecordFormat.Content(key: key, value: value, version: version, sum: w.sum, expiry: w.expiry)
    }
  }

  /// What W0 saw of a key's slot (`SlotHint`), with what `hintedWord` checks it by under
  /// the lock: the key's tag, and the partition count W0 routed by.
  struct Sighting {
    let hint: SlotHint
    let tag: UInt16
    let routedWith: Int
  }

  @inline(__always)
  func checkKey(_ key: UnsafeRawBufferPointer) throws(CacheError) {
    if key.count == 0 { throw .emptyKey }
    if key.count > maxKey { throw .keyTooLarge(size: key.count, limit: maxKey) }
  }

  /// W0: checks, hashes and checksums an entry, before the lock. Inlined: returned
  /// through memory from a call, the struct was copied with loads that overlapped the
  /// callee's stores, each stalling until those reached the cache. With `prefetch` false
  /// the caller prefetches the key's first bucket itself (the batch write prefetches a
  /// whole group's in a loop of their own, as the batch read does).
  @inline(__always)
  func prepare(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer,
    expiry: UInt64, prefetch: Bool = true
  ) throws(CacheError) -> PreparedWrite {
    try checkKey(key)
    if value.count > maxValue { throw .valueTooLarge(size: value.count, limit: maxValue) }
    let hash = KeyHash.key(key)
    let count = memory.partitionCount
    let p = IndexGeometry.partition(hash, count: count)
    // The key's first bucket and its partition's lock line are where the locked part
    // starts: fetch them now, so that their misses overlap the checksum and the lock
    // rather than stalling under it.
    let first = prefetch ? prefetchFirstBucket(hash, partition: p) : nil
    let stamped = expiry == 0 ? 0 : Expiry.stamp(expiry, now: SystemCall.wallClockMilliseconds())
    let sum = KeyHash.checksum(value, hash: hash)
    // Then the record that bucket names for the key's tag (an overwrite's old record,
    // which W2 reads and W3 may write in place), owned: its miss overlaps taking the lock.
    // The slot is kept as the write's hint.
    var hint = SlotHint.none
    if let first { hint = lookAhead(hash: hash, first: first.place, groups: first.groups, memory.partition(p)) }
    var w = PreparedWrite(
      hash: hash, sum: sum, keyCount: key.count, valueCount: value.count, expiry: stamped, partition: p)
    w.routedWith = count
    w.hint = hint
    return w
  }

  /// The first slot of a key's first bucket that held the key's tag when W0 (of this set
  /// or, recalled, of an earlier one) looked, else of its second bucket, before the lock,
  /// racily, with the slot's word and the group count the places were computed from;
  /// `slot` -1 for none. 14 bytes (group counts are 32-bit in the geometry word, a
  /// bucket is one of four, a slot one of ten).
  struct SlotHint {
    private var group: UInt32
    var word: UInt32
    private var groupCount: UInt32
    private var bucket: UInt8
    private var slotNumber: Int8

    /// A hint of W0's look at the bucket, or recalled from `RecentSlots` (an earlier
    /// set's: `recalled`).
    @inline(__always)
    init(place: Place, slot: Int, word: UInt32, groups: Int, recalled: Bool = false) {
      group = UInt32(truncatingIfNeeded: place.group)
      bucket = UInt8(truncatingIfNeeded: place.bucket) | (recalled ? 0x80 : 0)
      slotNumber = Int8(truncatingIfNeeded: slot)
      self.word = word
      groupCount = UInt32(truncatingIfNeeded: groups)
    }

    @inline(__always) var place: Place { Place(group: Int(group), bucket: Int(bucket & 3)) }
    @inline(__always) var slot: Int { Int(slotNumber) }
    @inline(__always) var groups: Int {
      get { Int(groupCount) }
      set { groupCount = UInt32(truncatingIfNeeded: newValue) }
    }
    static var none: SlotHint { SlotHint(place: Place(group: 0, bucket: 0), slot: -1, word: 0, groups: 0) }
    @inline(__always) var isNone: Bool { slotNumber < 0 }

    /// Whether the hint came from `RecentSlots` (an earlier set's), not from W0's look
    /// at the bucket (bit 7 of `bucket`): one that fails under the lock is forgotten there.
    @inline(__always) var isRecalled: Bool { bucket & 0x80 != 0 }
  }

  /// Prefetches, for writing, what a write of the key of hash `hash` starts with under
  /// partition `p`'s lock: the partition's lock line and the key's first bucket (hints:
  /// the geometry is read racily, and a prefetch never faults). With writers on two
  /// cores, each line a set writes was last written by the other about half the time,
  /// and each such line has to move. Returns the bucket's place, nil when the group
  /// count read is out of range.
  @inline(__always) @discardableResult
  func prefetchFirstBucket(_ hash: UInt64, partition p: Int) -> (place: Place, groups: Int)? {
    let part = memory.partition(p)
    part.prefetchWriteLine()
    let groups = BucketIndex(part: part).geometryRelaxed().groups
    guard part.isValidGroupCount(groups) else { return nil }
    let first = Placement.first(hash: hash, groups: groups)
    part.prefetchBucket(first, write: true)
    return (first, groups)
  }

  /// W0's look for the slot an overwrite will rewrite, before the lock, racily: the slot
  /// an earlier set of the key found (`RecentSlots`), else the first slot of the key's
  /// first bucket holding its tag, else of its second; `.none` when neither has the tag
  /// (a new key). The record it names is fetched owned now, so that its miss overlaps
  /// the checksum and the lock: a recalled slot's together with the bucket, not once the
  /// bucket's tags have come. A slot found in the buckets is remembered for the next set.
  /// A recalled hint's place is computed here, from the key's hash and `groups`, and its
  /// slot checked to be one of a bucket's, before anything forms an address from them.
  @_transparent
  func lookAhead(hash: UInt64, first: Place, groups: Int, _ part: PartitionMemory) -> SlotHint {
    if let r = recent.recall(hash), r.slot < Format.slotsPerBucket {
      part.prefetchRecord(at: Int(truncatingIfNeeded: r.word & Format.offsetMask), write: true)
      let place = r.second ? Placement.second(hash: hash, groups: groups) : first
      return SlotHint(place: place, slot: r.slot, word: r.word, groups: groups, recalled: true)
    }
    // A key whose first bucket was full went to its second (in a full index, two in five
    // and more). Looked at here, not left to W2 under the lock, its set stays the hinted
    // overwrite too. The second bucket is fetched (shared: most keys are not there)
    // while the first's tags come, so that its miss does not follow the first's.
    let tag = IndexGeometry.tag(hash)
    let second = Placement.second(hash: hash, groups: groups)
    part.prefetchBucket(second, write: false)
    var hint = part.prefetchRecord(named: tag, in: first, write: true)
    if hint.isNone && second != first { hint = part.prefetchRecord(named: tag, in: second, write: true) }
    hint.groups = groups
    if !hint.isNone { recent.remember(hash, word: hint.word, slot: hint.slot, second: hint.place != first) }
    return hint
  }

  /// Stores one entry: the write protocol, W2-W7 (see the type's comment). `now` is the
  /// expiry clock, or 0 to read it when first needed.
  @inline(__always)
  func store(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ w: PreparedWrite,
    condition: SetCondition, now: UInt64 = 0, _ part: borrowing LockedPartition
  ) throws -> SetOutcome {
    try store(Incoming(key: key, value: value, w: w), condition: condition, now: now, part)
  }

  /// `store` of `s`, which may keep a version or go straight into main.
  @inline(__always)
  func store(
    _ s: Incoming, condition: SetCondition, now: UInt64 = 0, _ part: borrowing LockedPartition
  ) throws -> SetOutcome {
    let (key, w) = (s.key, s.w)
    assert(w.partition == part.number)
    let index = part.index
    var clock = now
    // W2.
    let placement = Placement(hash: w.hash, groups: index.groups)
    let found = index.find(key, placement: placement, part.held)
    if let refusal = refusal(condition, live: unexpired(found, clock: &clock)) { return refusal }
    // W3.
    if let e = found, Self.fitsInPlace(e.header, valueCount: Int(w.valueCount), expiry: w.expiry) {
      let version = Self.rewrite(e, s.content(version: 0), keeping: s.keep, part)
      return .stored(version: UInt64(version))
    }
    return try storeChanging(s, found: found, placement: placement, now: clock, part)
  }

  /// W1's checks, W2 and W3 of the common set, an overwrite in place, in one short path
  /// under the lock: the slot of one of the key's buckets that W0 saw holding its tag, or
  /// that an earlier set of the key found (`hint`, `RecentSlots`), checked again now that
  /// nothing can change it (the same group count and routing, the same word and tag, a
  /// record that checks out, the key, the value's length, the expiry's presence). A key
  /// has one entry, so a slot that holds it is the one W2 would find. Returns the
  /// write's version; nil (having changed nothing) for anything else,
  /// which `store` then handles under the same hold of the lock. Inlined into the set:
  /// it skips W2's placement and tag scan, which W0 already made, and the locked body's
  /// call. Transparent: `@inline(__always)` left it a call, the set being large.
  @_transparent
  func overwriteHinted(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer, _ w: PreparedWrite,
    _ part: borrowing LockedPartition
  ) -> UInt32? {
    overwriteHinted(
      RecordFormat.Content(key: key, value: value, sum: w.sum, expiry: w.expiry), words: KeyHash.shortWords(of: key),
      Sighting(hint: w.hint, tag: IndexGeometry.tag(w.hash), routedWith: w.routedWith), part)
  }

  /// `overwriteHinted` of a write whose parts the caller holds apart: the record's
  /// contents `c` (the value's checksum, the stamped expiry word; the version is taken
  /// here), the key's `KeyHash.shortWords`, and what W0 saw (`CacheEngine.set` keeps
  /// them in registers).
  @_transparent
  func overwriteHinted(
    _ c: RecordFormat.Content, words: (UInt64, UInt64), _ seen: Sighting, shortOnly: Bool = false,
    _ part: borrowing LockedPartition
  ) -> UInt32? {
    let (key, value, expiry, hint) = (c.key, c.value, c.expiry, seen.hint)
    guard let word = Self.hintedWord(seen, part.partition, in: memory) else { return nil }
    let mem = part.memory
    let offset = Int(truncatingIfNeeded: word & Format.offsetMask)
    // With `shortOnly` (the straight set's), only the common record's form, read with the
    // key's and the value's lengths: no call on the set's way (`shortEntry`). The checks
    // after it then repeat what it judged; skipping them (`shortOnly ||`) lengthened the
    // set (`scripts/callgrind.sh`).
    let header =
      shortOnly
      ? mem.shortEntry(at: offset, keyCount: key.count, valueCount: value.count) : mem.record(at: offset, free: false)
    guard let h = header, h.klen == key.count, Self.fitsInPlace(h, valueCount: value.count, expiry: expiry),
      mem.keyEquals(record: offset, h, key, words: words)
    else { return nil }
    // W3, the whole change: the intent word names the slot while the record is
    // rewritten, and is clear again after it (`marking`).
    let e = BucketIndex.Entry(at: BucketIndex.Slot(place: hint.place, slot: hint.slot), word: word, header: h)
    return Self.rewrite(e, c, leaving: 0, part)
  }

  /// W1's checks and W2 of a hinted write: the hint's slot's word when the slot still
  /// holds what W0 saw, under the lock. W1: nothing to repair
  /// (`Partition.needsRepair(checkingLogs: false)`, spelt out), and the group count the
  /// hint's place was computed from. W0 found that count in range
  /// (`prefetchFirstBucket`; a recalled hint's must equal it), so of `geometryIsSane`
  /// only the index's clearance of the logs is left to check (the whole check lengthened
  /// the set, `scripts/callgrind.sh`). The intent word is looked at
  /// again after `acquireSettled`, which hands back a partition whose intent a dead
  /// writer set (not a split) for `store` to repair. W2: the hinted slot, its word and
  /// tag as W0 saw them. `file`: the mapping whose header the routing is checked in (the
  /// caller's copy: static, the straight increment's call copies no `Writer`).
  @_transparent
  static func hintedWord(_ seen: Sighting, _ part: Partition, in file: MappedMemory) -> UInt32? {
    let (hint, tag) = (seen.hint, seen.tag)
    guard !hint.isNone, file.liveRouting() <= seen.routedWith else { return nil }
    let mem = part.memory
    guard mem.word(.intent).load(.relaxed) == 0, part.index.groups == hint.groups,
      part.indexClearsLogs(groups: hint.groups)
    else { return nil }
    let word = mem.entryWord(hint.place, hint.slot).load(.relaxed)
    guard word == hint.word, mem.tag(hint.place, hint.slot) == tag else { return nil }
    return word
  }

  /// Whether W3 rewrites an entry with header `h` in place for a value of `valueCount`
  /// bytes with expiry word `expiry`: the same record size (the value's length, an
  /// expiry in both or neither).
  @inline(__always)
  static func fitsInPlace(_ h: RecordFormat.Header, valueCount: Int, expiry: UInt64) -> Bool {
    h.vlen == valueCount && h.hasExpiry == (expiry != 0)
  }

  /// W3b-W7 of `store`: a new key (`found` nil), or an entry that W3 could not rewrite
  /// in place; `found` and `placement` are W2's. Out of line, so that `store`'s W2 and
  /// W3, the common set, inline into their callers.
  @inline(never)
  private func storeChanging(
    _ s: Incoming, found: BucketIndex.Entry?, placement: Placement, now: UInt64, _ part: borrowing LockedPartition
  ) throws -> SetOutcome {
    let (key, value, w, keep, intoMain) = (s.key, s.value, s.w, s.keep, s.intoMain)
    let index = part.index
    var clock = now
    var found = found
    var placement = placement
    // W3b, W3c.
    if let e = found, !intoMain {
      switch try resize(e, s, now: &clock, part) {
      case .stored(let outcome):
        return outcome
      case .changed:
        placement = Placement(hash: w.hash, groups: index.groups)
        found = index.find(key, placement: placement, part.held)
      case .unchanged:
        break
      }
    }
    // W4. (The log positions are checked first: `set` takes the lock without.)
    guard part.logs.areSane else { throw PartitionDamage("log positions out of range") }
    let dest = intoMain ? .main : destination(of: found, w, part)
    if clock == 0 { clock = SystemCall.expiryClockMilliseconds() }
    if found == nil, part.resizer.growIfFull(entries: part.counters.count(.entries), part.held) {
      placement = Placement(hash: w.hash, groups: index.groups)
    }
    let free = try makeRoom(dest, s, found: &found, placement: &placement, now: clock, part)
    let slot = try found?.at ?? allocate(&placement, hash: w.hash, now: clock, part)
    // W5.
    let version = keep ?? part.counters.nextVersion(part.held)
    let offset = write(s.content(version: version), size: w.size, into: dest, free: free, part)
    // W6: an overwrite keeps the old entry's reference bit.
    index.publish(slot, offset: offset, hits: (found?.word ?? 0) & Format.referencedBit, tag: placement.tag, part.held)
    // W7. (A writer killed before them leaves counts that repair recounts.) The old
    // record, no longer named, goes on a free list.
    countStore(adding: key.count &+ value.count, replacing: found, part)
    if let old = found { part.freeLists.release(old.offset, old.header, part.held) }
    return .stored(version: UInt64(version))
  }

  /// W4's room for the record in log `dest`: for main, a free record when one fits
  /// (`FreeLists.take`, after eviction has kept the file's limits and the log's reserve:
  /// eviction may pass free records, so it comes first), else room at the head
  /// (`EvictionPolicy.makeRoom`). `found` and `placement` follow what eviction moved.
  @inline(__always)
  private func makeRoom(
    _ dest: LogID, _ s: Incoming, found: inout BucketIndex.Entry?, placement: inout Placement, now: UInt64,
    _ part: borrowing LockedPartition
  ) throws -> (offset: Int, extent: Int)? {
    let (key, w) = (s.key, s.w)
    let liveDelta = key.count &+ s.value.count &- (found?.header.liveBytes ?? 0)
    var tryFree = dest == .main && part.freeLists.mayHold(w.size)
    while true {
      let size = tryFree ? 0 : w.size
      if try part.policy.makeRoom(dest, size: size, newEntry: found == nil, liveDelta: liveDelta, now: now, part.held) {
        // Eviction may have moved or removed the entry, or merged a group.
        placement = Placement(hash: w.hash, groups: part.index.groups)
        if found != nil { found = part.index.find(key, placement: placement, part.held) }
      }
      guard tryFree else { return nil }
      if let free = try part.freeLists.take(w.size, keyCount: key.count, part.held) { return free }
      tryFree = false
    }
  }

  /// W5: record `c` (of `size` bytes) written into the free record `free` (its leftover
  /// listed in turn), or at log `dest`'s head, which then advances. Returns its offset.
  @inline(__always)
  private func write(
    _ c: RecordFormat.Content, size: Int, into dest: LogID, free: (offset: Int, extent: Int)?,
    _ part: borrowing LockedPartition
  ) -> Int {
    if let f = free {
      part.memory.writeRecord(over: f.offset, extent: f.extent, c, part.held)
      part.freeLists.releaseRest(of: f.offset, extent: f.extent, size: size, part.held)
      return f.offset
    }
    let offset = part.logs.reserve(dest, size, part.held)
    part.memory.writeRecord(at: offset, c, part.held)
    part.logs.commit(dest, size, part.held)
    return offset
  }

  /// `found`, unless it has expired by `clock` (read into it when first needed).
  @inline(__always)
  private func unexpired(_ found: BucketIndex.Entry?, clock: inout UInt64) -> BucketIndex.Entry? {
    guard let e = found, e.header.expiry != 0 else { return found }
    if clock == 0 { clock = SystemCall.expiryClockMilliseconds() }
    return Expiry.isExpired(e.header.expiry, now: clock) ? nil : e
  }

  /// W3b, then W3c: an overwrite that changes the record's size, where the record stands.
  @inline(__always)
  private func resize(
    _ e: BucketIndex.Entry, _ s: Incoming, now: inout UInt64, _ part: borrowing LockedPartition
  ) throws -> NeighbourMove {
    if let stored = try resizeInPlace(e, s, part) { return .stored(stored) }
    return try resizeMovingNeighbours(e, s, now: &now, part)
  }

  /// W3b: `e`'s record rewritten where it stands with a value of another size, with
  /// the intent word naming its slot, when the new record fits in its bytes and those of
  /// dead records after it (`rewriteExtent`; not with log positions out of range, which
  /// the caller reports). Nil when the store must go to a log's head. Not inlined: a
  /// same-size set (W3) stays as short as it was.
  @inline(never)
  private func resizeInPlace(
    _ e: BucketIndex.Entry, _ s: Incoming, _ part: borrowing LockedPartition
  ) throws -> SetOutcome? {
    let (key, value, w) = (s.key, s.value, s.w)
    guard part.logs.areSane, let extent = rewriteExtent(e, w, part) else { return nil }
    // The free records among the bytes taken leave their lists before they are written.
    var at = e.offset &+ e.header.size
    while at < e.offset &+ extent {
      guard let d = part.memory.record(at: at) else { throw PartitionDamage("a record taken in place moved") }
      if d.isListed { try part.freeLists.unlink(at, part.held) }
      at &+= d.size
    }
    let version = s.keep ?? part.counters.nextVersion(part.held)
    Self.marking(e.at, part) { part.index.rewriteRecord(e, extent: extent, s.content(version: version), part.held) }
    part.freeLists.releaseRest(of: e.offset, extent: extent, size: w.size, part.held)
    countStore(adding: key.count &+ value.count, replacing: e, part)
    return .stored(version: UInt64(version))
  }

  /// What W3b and W3c did.
  private enum NeighbourMove {
    case stored(SetOutcome)
    /// Nothing changed: the store goes on as if they had not been tried.
    case unchanged
    /// Eviction made room, or a neighbour moved: the entry is to be found again.
    case changed
  }

  /// W3c: when W3b is refused because live records of other keys follow `e`'s, and the
  /// new record fits once their bytes are taken too (`rewriteRoom` with `movingLive`),
  /// and they hold no more bytes than that record (moving them must not cost more than
  /// appending it), they are moved to their log's head (`moveLiveRecords`) and W3b then
  /// takes their old bytes. The old record the append would leave dead for a lap is not
  /// left. Room for the copies is made as for any append (eviction), once.
  @inline(never)
  private func resizeMovingNeighbours(
    _ entry: BucketIndex.Entry, _ s: Incoming, now: inout UInt64, _ part: borrowing LockedPartition
  ) throws -> NeighbourMove {
    let (key, w) = (s.key, s.w)
    var e = entry
    var evicted = false
    while true {
      guard part.logs.areSane, let room = rewriteRoom(e, w, movingLive: true, part),
        room.moved > 0, room.moved <= w.size
      else { return evicted ? .changed : .unchanged }
      let id = part.logs.id(containing: e.offset)
      if !part.logs.fits(id, room.moved) {
        guard !evicted else { return .changed }
        evicted = true
        if now == 0 { now = SystemCall.expiryClockMilliseconds() }
        _ = try part.policy.makeRoom(id, size: room.moved, newEntry: false, liveDelta: 0, now: now, part.held)
        guard let again = part.index.find(key, placement: Placement(hash: w.hash, groups: part.index.groups), part.held)
        else { return .changed }
        e = again
        continue
      }
      guard moveLiveRecords(after: e, upTo: room.extent, id, part),
        let stored = try resizeInPlace(e, s, part)
      else { return .changed }
      return .stored(stored)
    }
  }

  /// Moves each live record of another key among those after `e`'s, up to `extent` bytes
  /// from its start (as `rewriteRoom` found them), into a free record of main outside
  /// those bytes (`EvictionPolicy.moveToFreeRecord`), else to log `id`'s head, as
  /// eviction moves an entry: a whole copy, then its slot pointed there in one seqlock
  /// write (`BucketIndex.move`, hits and flags kept), so a kill between leaves a slot
  /// naming a whole copy. False when the log has no room for one (nothing is then half
  /// done).
  func moveLiveRecords(
    after e: BucketIndex.Entry, upTo extent: Int, _ id: LogID, _ part: borrowing LockedPartition
  ) -> Bool {
    var at = e.offset &+ e.header.size
    while at < e.offset &+ extent {
      guard let d = part.memory.record(at: at) else { return false }
      if !part.memory.sameKey(e.offset, e.header, at, d),
        let n = part.index.slot(naming: at, hash: part.memory.keyHash(record: at, d), part.held)
      {
        if id == .main,
          part.policy.moveToFreeRecord(
            n, hits: n.word & Format.hitBits, unearned: d.unearned,
            avoiding: e.offset..<(e.offset &+ extent), part.held)
        {
          at &+= d.size
          continue
        }
        guard part.logs.fits(id, d.size) else { return false }
        let to = part.logs.reserve(id, d.size, part.held)
        part.memory.moveRecord(from: at, to: to, size: d.size, unearned: d.unearned, part.held)
        part.logs.commit(id, d.size, part.held)
        part.index.move(n.at, toRecord: to, hits: n.word & Format.hitBits, part.held)
      }
      at &+= d.size
    }
    return true
  }

  /// W3b's room: the bytes from `e`'s record on that its rewrite as a record of
  /// `w.size` bytes may take in place, or nil when the rewrite must go to a log's head.
  /// It may when the file has no cost limit or the value does not grow, and the new
  /// record fits in the old one's bytes plus those of dead records right after it in the
  /// chain (up to `rewriteMerges` of them: one an earlier rewrite of the key left, or any
  /// that no slot names, as the eviction hand judges them), leaving nothing or a dead
  /// record that `MappedMemory.rewriteRecord` can write before its switch: clear of the
  /// flags and lengths of the last dead record it takes.
  @inline(__always)
  func rewriteExtent(
    _ e: BucketIndex.Entry, _ w: PreparedWrite, _ part: borrowing LockedPartition
  ) -> Int? {
    rewriteRoom(e, w, movingLive: false, part)?.extent
  }

  /// `rewriteExtent`'s walk. With `movingLive` (W3c's plan), live records of other keys
  /// count in too, as if moved away; `moved` is their bytes (0 without).
  @inline(__always)
  func rewriteRoom(
    _ e: BucketIndex.Entry, _ w: PreparedWrite, movingLive: Bool, _ part: borrowing LockedPartition
  ) -> (extent: Int, moved: Int)? {
    let h = e.header
    guard Int(w.valueCount) <= h.vlen || part.counters.costLimit == 0 else { return nil }
    var extent = h.size
    var lastDead = -1
    var moved = 0
    // The record itself lies in its log's live range (checked: the file may be damaged).
    let log = part.logs.state(part.logs.id(containing: e.offset))
    guard log.holds(e.offset, count: extent) else { return nil }
    for _ in 0..<Self.rewriteMerges where extent < w.size {
      let next = e.offset &+ extent
      // `next` is the chain's next link when the live range holds it and it is not the
      // head (in a full log the head is the tail, the oldest link, not this one's next);
      // a link ends inside the range (checked: the file may be damaged).
      guard next != log.head.offset, let d = part.memory.record(at: next), log.holds(next, count: d.size) else {
        return nil
      }
      if !d.isListed, !part.memory.sameKey(e.offset, h, next, d),
        part.index.slot(naming: next, hash: part.memory.keyHash(record: next, d), part.held) != nil
      {
        guard movingLive else { return nil }
        moved &+= d.size
      }
      lastDead = extent &+ 1 &+ RecordFormat.lengthBytes(form: d.form)
      extent &+= d.size
    }
    return Self.leavesValidRest(extent: extent, lastDead: lastDead, size: w.size, keyCount: h.klen)
      ? (extent, moved) : nil
  }

  /// Whether a record of `size` bytes written over `extent` bytes leaves nothing, or a
  /// dead record (`RecordFormat.filler`) that starts clear of the flags and lengths of
  /// the last dead record taken (which end at `lastDead`; -1: none taken).
  @inline(__always)
  static func leavesValidRest(extent: Int, lastDead: Int, size: Int, keyCount: Int) -> Bool {
    guard extent >= size else { return false }
    let rest = extent &- size
    return rest == 0 || (size >= lastDead && RecordFormat.filler(size: rest, keyCount: keyCount) != nil)
  }

  /// Dead records a rewrite in place may take after its own (W3b).
  static let rewriteMerges = 4

  /// W7: the partition's counts after a store that added `bytes` live bytes in place of
  /// `old` (nil: a new entry).
  @inline(__always)
  private func countStore(
    adding bytes: Int, replacing old: BucketIndex.Entry?, _ part: borrowing LockedPartition
  ) {
    part.counters.changeLiveBytes(adding: bytes, removing: old?.header.liveBytes ?? 0, part.held)
    if old == nil {
      part.counters.bump(.entries, part.held)
      part.counters.bump(.inserts, part.held)
    }
    part.counters.bump(.sets, part.held)
  }

  /// W3 (and an in-place counter): `BucketIndex.rewriteValue` of `e` with `c`'s value,
  /// checksum and expiry and a new version (or `keep`), with the intent word naming the
  /// slot for its time, so that repair drops the entry if the writer dies with the
  /// record half rewritten, and `leaving` after it; then the set counted. Returns the
  /// version. `midway` runs with the bucket odd (a test hook).
  @inline(__always) @discardableResult
  static func rewrite(
    _ e: BucketIndex.Entry, _ c: RecordFormat.Content, keeping keep: UInt32? = nil, midway: () -> Void = {},
    leaving: UInt64 = Format.intentChange, _ part: borrowing LockedPartition
  ) -> UInt32 {
    var c = c
    c.version = keep ?? part.counters.nextVersion(part.held)
    let version = c.version
    Self.marking(e.at, part, leaving: leaving) { part.index.rewriteValue(e, c, midway: midway, part.held) }
    part.counters.bump(.sets, part.held)
    return version
  }

  /// Runs `body`, which rewrites slot `at`'s record in place, with the intent word naming
  /// the slot (ordered before the bucket turns odd by the seqlock write's release fence),
  /// then sets the intent word to `leaving`: `Format.intentChange` inside a change that
  /// goes on, 0 where the rewrite is the whole change (the hinted overwrite's, the
  /// straight increment's: a version or `sets` count bumped outside it is no damage).
  @inline(__always)
  static func marking(
    _ at: BucketIndex.Slot, _ part: borrowing LockedPartition, leaving: UInt64 = Format.intentChange, _ body: () -> Void
  ) {
    let intent = part.memory.word(.intent)
    intent.store(Format.intentRewriteBase &+ UInt64(Self.slotNumber(at)), .relaxed)
    body()
    intent.store(leaving, .relaxed)
  }

  /// A slot's number in its partition, as the intent word names it.
  @inline(__always)
  static func slotNumber(_ at: BucketIndex.Slot) -> Int { at.place.number &* Format.slotsPerBucket &+ at.slot }

  /// Splits the index tries, for a new key whose two buckets stay full, before it
  /// evicts from them.
  static let allocationSplits = 32

  /// W4's slot for a new key: a free one or one a shallow displacement frees
  /// (`BucketIndex.allocate`); else, while the space below the index is free (the
  /// cache is still filling), a few more groups first; else a deep displacement; else an
  /// eviction from the key's two buckets (`EvictionPolicy.evictForSlot`). `placement`
  /// follows the group count.
  private func allocate(
    _ placement: inout Placement, hash: UInt64, now: UInt64, _ part: borrowing LockedPartition
  ) throws -> BucketIndex.Slot {
    if let s = part.index.allocate(placement, searchLimit: BucketIndex.shallowSearch, part.held) { return s }
    for _ in 0..<Self.allocationSplits {
      guard part.resizer.split(part.held) else { break }
      placement = Placement(hash: hash, groups: part.index.groups)
      if let s = part.index.allocate(placement, searchLimit: BucketIndex.shallowSearch, part.held) { return s }
    }
    if let s = part.index.allocate(placement, searchLimit: BucketIndex.deepSearch, part.held) { return s }
    part.policy.evictForSlot(placement, now: now, part.held)
    guard let s = part.index.allocate(placement, part.held) else {
      throw PartitionDamage("no slot frees up for a new key")
    }
    return s
  }

  /// W4's choice of log: main for an entry already there, a record too large for the
  /// small log, or a new key the ghost remembers (and forgets); small otherwise.
  private func destination(
    of found: BucketIndex.Entry?, _ w: PreparedWrite, _ part: borrowing LockedPartition
  ) -> LogID {
    if let e = found, part.logs.id(containing: e.offset) == .main { return .main }
    if w.size > part.policy.smallBytes / 4 { return .main }
    if found == nil, part.policy.ghost.recall(w.hash, entries: part.counters.count(.entries), part.held) {
      part.policy.noteReuse(part.held)
      part.counters.bump(.ghostHits, part.held)
      growthTrigger.ghostHit(memory)
      return .main
    }
    return .small
  }

  /// The outcome that refuses a conditional store, given the live entry (nil: absent or
  /// expired), or nil when the store goes ahead.
  @inline(__always)
  private func refusal(_ condition: SetCondition, live: BucketIndex.Entry?) -> SetOutcome? {
    switch condition {
    case .always: return nil
    case .ifAbsent: return live == nil ? nil : .exists
    case .ifPresent: return live == nil ? .notFound : nil
    case .ifVersion(let v): return live.map { UInt64($0.header.version) == v } == true ? nil : .conflict
    }
  }

  /// Removes `key`; false when it was not present.
  func remove(
    _ key: UnsafeRawBufferPointer, hash: UInt64, _ part: borrowing LockedPartition
  ) -> Bool {
    guard let e = part.index.find(key, placement: Placement(hash: hash, groups: part.index.groups), part.held) else {
      return false
    }
    part.policy.discard(e, counting: .removals, part.held)
    return true
  }

  /// Copies the entry `e` of partition `from` into partition `to` (growth's move: the
  /// same key, value, expiry and version, into the main log, where an entry that has
  /// lived in the cache belongs), unless `to` holds the key already (a move finished
  /// before a crash). Returns whether it copied.
  func copyEntry(
    _ e: BucketIndex.Entry, hash: UInt64, from: borrowing LockedPartition, to: borrowing LockedPartition
  ) throws -> Bool {
    // Views, not copies: `from`'s bytes cannot change while its lock is held, and the
    // store writes only into `to`.
    let outcome = try from.memory.withKeyAndValue(record: e.offset, e.header, from.held) { k, v in
      let w = PreparedWrite(
        hash: hash, sum: e.header.sum, keyCount: k.count, valueCount: v.count, expiry: e.header.expiry,
        partition: to.number)
      let s = Incoming(key: k, value: v, w: w, keep: e.header.version, intoMain: true)
      return try store(s, condition: .ifAbsent, to)
    }
    return outcome != .exists
  }

  /// Changes the expiry of a live entry, keeping its value and version; false when absent
  /// or expired. A record with an expiry field has it rewritten in place; one without
  /// (given an expiry now) is written again with one, as a set writes it.
  func touch(
    _ key: UnsafeRawBufferPointer, hash: UInt64, expiry: UInt64, now: UInt64,
    _ part: borrowing LockedPartition
  ) throws -> Bool {
    let index = part.index
    guard let e = index.find(key, placement: Placement(hash: hash, groups: index.groups), part.held),
      !Expiry.isExpired(e.header.expiry, now: now)
    else { return false }
    let stamped = Expiry.stamp(expiry, now: now)
    if e.header.hasExpiry {
      Self.marking(e.at, part) { index.setExpiry(e, stamped, part.held) }
      return true
    }
    if stamped == 0 { return true }
    let value = part.memory.withValue(record: e.offset, e.header, part.held) { [UInt8]($0) }
    return try value.withUnsafeBytes { v in
      let w = PreparedWrite(
        hash: hash, sum: e.header.sum, keyCount: key.count, valueCount: v.count, expiry: stamped,
        partition: part.number)
      _ = try store(Incoming(key: key, value: v, w: w, keep: e.header.version), condition: .always, now: now, part)
      return true
    }
  }

  /// Removes every entry of `part`: every slot emptied, both logs discarded, the ghost
  /// forgotten, the geometry advanced (readers read again).
  func removeAll(_ part: borrowing LockedPartition) {
    let groups = part.index.groups
    part.index.clearAll(groups: groups, part.held)
    part.logs.discardAll(.small, part.held)
    part.logs.discardAll(.main, part.held)
    part.counters.set(.entries, 0, part.held)
    part.counters.set(.liveBytes, 0, part.held)
    part.policy.ghost.clear(groups: groups, part.held)
    part.resizer.publish(part.index.geometryRelaxed().advanced, part.held)
  }

  /// Removes the expired entries of `count` slots from slot `start` of `part`'s index
  /// (wrapping). Returns how many it removed and the slot after the range.
  func expireSlots(
    _ part: borrowing LockedPartition, from start: Int, count: Int, now: UInt64
  ) -> (removed: Int, next: Int) {
    let slots = part.index.slotCount
    guard slots > 0 else { return (0, 0) }
    var i = start % slots
    var removed = 0
    for _ in 0..<min(count, slots) {
      let bucket = i / Format.slotsPerBucket
      let at = BucketIndex.Slot(
        place: Place(group: bucket / Format.bucketsPerGroup, bucket: bucket % Format.bucketsPerGroup),
        slot: i % Format.slotsPerBucket)
      if let e = part.index.entry(at: at), Expiry.isExpired(e.header.expiry, now: now) {
        part.policy.discard(e, counting: .expirations, part.held)
        removed += 1
      }
      i = i + 1 == slots ? 0 : i + 1
    }
    return (removed, i)
  }

  /// What an update's closure decides.
  enum UpdateAction {
    /// Leave the entry as it is.
    case keep
    /// Remove the entry (nothing happens when it is absent).
    case remove
    /// Store these bytes with this expiry (absolute ms, 0 = never).
    case store([UInt8], expiry: UInt64)
  }

  enum UpdateOutcome: Equatable {
    case kept
    case removed
    case stored(version: UInt64)
  }

  /// Read-modify-write of one entry: the building block of `increment`/`decrement` and
  /// other updates that must be atomic across processes.
  ///  1. find the key; an expired entry, or one whose checksum fails, counts as absent;
  ///  2. hand the current value bytes (a view into the mapping, valid only during the
  ///     closure: the lock keeps them from changing) and its info to the closure;
  ///  3. apply the closure's answer: keep, remove, or store new bytes through the write
  ///     protocol (`store`), so crash safety is the same as for a set.
  /// The closure runs while the lock is held: it must be short and must not touch the cache.
  func update(
    _ key: UnsafeRawBufferPointer, hash: UInt64, now: UInt64, _ part: borrowing LockedPartition,
    _ body: (_ current: UnsafeRawBufferPointer?, _ info: EntryInfo?) throws -> UpdateAction
  ) throws -> UpdateOutcome {
    var live: BucketIndex.Entry? = nil
    var action: UpdateAction
    let index = part.index
    if let e = index.find(key, placement: Placement(hash: hash, groups: index.groups), part.held),
      !Expiry.isExpired(e.header.expiry, now: now),
      part.memory.valueChecksum(record: e.offset, e.header, hash: hash) == e.header.sum
    {
      live = e
      let expiry = e.header.expiry & Format.expiryMask
      let info = EntryInfo(
        valueCount: e.header.vlen, expiryMilliseconds: expiry == 0 ? nil : expiry,
        version: UInt64(e.header.version), isExpired: false)
      action = try part.memory.withValue(record: e.offset, e.header, part.held) { try body($0, info) }
    } else {
      action = try body(nil, nil)
    }
    switch action {
    case .keep:
      return .kept
    case .remove:
      if let e = live { part.policy.discard(e, counting: .removals, part.held) }
      return .removed
    case .store(let value, let expiry):
      let outcome = try value.withUnsafeBytes { v in
        let w = try prepare(key, v, expiry: expiry, prefetch: false)
        return try store(key, v, w, condition: .always, now: now, part)
      }
      guard case .stored(let version) = outcome else {
        throw PartitionDamage("an unconditional store under the lock did not store")
      }
      return .stored(version: version)
    }
  }
}
