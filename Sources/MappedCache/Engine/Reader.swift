import Synchronization
import SystemCalls

/// The lock-free read side: no lock, no system call (but the bounded wait's slow end),
/// no allocation. Every read follows the read protocol (DESIGN.md, section 3):
///
/// R1. route the key to its partition; load its geometry word (acquire);
/// R2. the key's two places and tag (`Placement`);
/// R3. the seqlock read of the first bucket (`BucketIndex.seqlockRead`): `seq` (acquire;
///     odd: wait, bounded, `backoff`), the tags, for each equal one the record's checked
///     header, the key compared, the value copied out; acquire fence; `seq` again;
/// R4. not found: R3 for the second bucket;
/// R5. the geometry word again: changed means the index was reorganised meanwhile, and
///     the read starts again at R1; a miss stands only if the move sequence, loaded at
///     R2, was even and is unchanged (no displacement moved entries meanwhile), else the
///     read starts again;
/// R6. only then judge the copy: expiry, checksum (opt-in), the hit bit.
///
/// A class, not a struct: the engine holds one per handle, and a read passes it by
/// reference. As a struct (with its `Liveness`, some 240 bytes) each read copied it onto
/// the stack before calling out of line.
final class Reader {
  let memory: MappedMemory
  let counters: HandleCounters
  /// Check each value's checksum on read (`OpenPolicy.verifyChecksumsOnRead`).
  let checksumOnRead: Bool
  /// Whether the mapping is writable (only then are hit bits set).
  let writable: Bool
  /// Writable, and reading without checksums: the common handle. Stored, not computed:
  /// every read asks.
  let isPlain: Bool

  /// Asked when a bucket stays odd past the spins: is its writer dead?
  let liveness: Liveness

  init(memory: MappedMemory, counters: HandleCounters, checksumOnRead: Bool, writable: Bool, liveness: Liveness) {
    self.memory = memory
    self.counters = counters
    self.checksumOnRead = checksumOnRead
    self.writable = writable
    isPlain = writable && !checksumOnRead
    self.liveness = liveness
  }

  enum Probe {
    case hit(EntryInfo)
    case miss
    /// The value is larger than the buffer offered: call again with this many bytes.
    case needs(Int)
    /// Found, but its checksum does not match: counted as a miss, reported to verify.
    case corrupt
    /// A bucket stayed mid-write past the bounded wait and R7: answered as a miss, and
    /// counted apart (`busyMisses`).
    case busy
  }

  /// What R1-R5 found: the key's entry (its value copied when it fit), nothing, or a
  /// bucket that stayed mid-write.
  enum Located {
    case found(BucketIndex.Entry, partition: Int)
    case absent
    case busy
  }

  // MARK: The bounded wait

  /// How long a reader waits on one bucket that a writer is changing (or that a stopped
  /// or dead writer left odd) before answering "miss". Bounded: never a hang.
  ///
  /// First 2,048 pauses (tens of microseconds: a running writer finishes a bucket in far
  /// less). Then the reader asks whether any live writer can finish it (`Liveness`: the
  /// partition lock's holder is alive, by its witness, as a waiting writer asks): a dead
  /// writer never finishes the bucket, nor does anyone when the lock is free (damage),
  /// and it stays odd until a write repairs it, so the reader looks once more and
  /// answers "busy" (R7, `CacheEngine+BusyRead`, then repairs it from a writable
  /// handle). A live writer descheduled mid-write (an oversubscribed CPU) needs the
  /// reader to give up its CPU: then `sched_yield`s and short sleeps
  /// (`readYields`, `readSleepMicroseconds`), a few milliseconds a wait, before "busy" (R7 waits again while the
  /// writer is not stopped). Only this slow path makes system calls.
  static let readSpins = 2048
  static let readYields = 64
  static let readSleeps = 20
  static let readSleepMicroseconds: UInt32 = 50
  /// Reads of one key started again because the index was reorganised or entries moved
  /// meanwhile (R5), before the read answers "busy": each restart saw a writer make
  /// progress (a split or merge takes microseconds). A move still under way is not a
  /// restart but a wait (`backoff`).
  static let restartLimit = 1024

  /// One wait step on a busy bucket of partition `partition`; false once the reader
  /// should give up.
  @inline(__always)
  func backoff(_ attempts: inout Int, partition: Int) -> Bool {
    attempts += 1
    if attempts <= Self.readSpins {
      spinPause()
      return true
    }
    return backoffSlowly(&attempts, partition: partition)
  }

  /// `backoff` past its spins: off the read path's straight line.
  @inline(never)
  func backoffSlowly(_ attempts: inout Int, partition: Int) -> Bool {
    if attempts == Self.readSpins + 1 && liveness.noWriterCanFinish(partition) {
      // One more look (a writer that took over may have repaired the bucket by now),
      // and the next call gives up.
      attempts = Self.readSpins + Self.readYields + Self.readSleeps
      return true
    }
    if attempts <= Self.readSpins + Self.readYields {
      SystemCall.yield()
    } else if attempts <= Self.readSpins + Self.readYields + Self.readSleeps {
      SystemCall.sleep(microseconds: Self.readSleepMicroseconds)
    } else {
      return false
    }
    return true
  }

  // MARK: The probe

  /// R3 for one bucket: the entry holding `key`, with its value copied when it fits
  /// `buffer`; nil when the bucket holds no such entry; `busy` when the bucket stayed
  /// odd past the bounded wait.
  @inline(__always)
  private func readBucket(
    _ index: BucketIndex, _ place: Place, tag: UInt16, _ key: UnsafeRawBufferPointer,
    into buffer: UnsafeMutableRawBufferPointer, waits: inout Int
  ) -> (entry: BucketIndex.Entry?, busy: Bool) {
    while true {
      switch index.seqlockRead(place, { index.lookup(place, tag: tag, key: key, copyInto: buffer) }) {
      case .stable(let e):
        return (e, false)
      case .changed:
        continue
      case .busy:
        if !backoff(&waits, partition: index.part.index) { return (nil, true) }
      }
    }
  }

  /// R1-R5: where `key` (of hash `hash`) is, its value copied into `buffer` when it fits.
  /// R5's miss stands only where the key cannot be elsewhere:
  /// - not in the partition growth is filling this one from (`splitSource`): that one
  ///   is read, then this one again (growth copies an entry here before it clears it
  ///   there, so a key that left the source between the two reads is found here);
  /// - not in a partition this handle has not seen yet: when the file's partition count
  ///   has grown past the handle's, the handle adopts it and routes the key again.
  @inline(__always)
  func locate(_ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer) -> Located {
    var waits = 0
    for _ in 0..<Self.restartLimit {
      let p = IndexGeometry.partition(hash, count: memory.partitionCount)
      let found = locate(key, hash: hash, in: p, into: buffer, waits: &waits)
      guard case .absent = found else { return found }
      let source = memory.partition(p).word(.splitSource).load(.acquiring)
      if source != 0, let s = Int(exactly: source - 1), s != p, s < memory.partitionCount {
        let there = locate(key, hash: hash, in: s, into: buffer, waits: &waits)
        guard case .absent = there else { return there }
        let again = locate(key, hash: hash, in: p, into: buffer, waits: &waits)
        guard case .absent = again else { return again }
      }
      if !memory.refreshRouting() { return .absent }
    }
    return .busy
  }

  /// R1-R5 in partition `p`.
  @inline(__always)
  private func locate(
    _ key: UnsafeRawBufferPointer, hash: UInt64, in p: Int, into buffer: UnsafeMutableRawBufferPointer,
    waits: inout Int
  ) -> Located {
    let index = BucketIndex(part: memory.partition(p))
    // Restarts count only changes seen (the index reorganised, entries moved): a move
    // still under way is waited for by `backoff`, whose bound is longer and gives up
    // the CPU, so that a descheduled mover can finish.
    var restarts = 0
    while restarts < Self.restartLimit {
      // R1.
      let geometry = index.geometry()
      guard index.part.isValidGroupCount(geometry.groups) else { return .absent }
      // R2.
      let pl = Placement(hash: hash, groups: geometry.groups)
      index.part.prefetchBuckets(of: pl)
      let moves = index.moveSequence()
      // R3, R4.
      var (found, busy) = readBucket(index, pl.first, tag: pl.tag, key, into: buffer, waits: &waits)
      if found == nil && pl.second != pl.first {
        let second = readBucket(index, pl.second, tag: pl.tag, key, into: buffer, waits: &waits)
        found = second.entry
        busy = busy || second.busy
      }
      // R5 (after R3's acquire fences).
      guard index.geometryRelaxed() == geometry else {
        restarts += 1
        continue
      }
      if let found { return .found(found, partition: p) }
      if busy { return .busy }
      // A miss stands when no displacement moved entries while the buckets were read.
      if moves & 1 != 0 {
        if !backoff(&waits, partition: p) { return .busy }
      } else if index.part.word(.moves).load(.relaxed) == moves {
        return .absent
      } else {
        restarts += 1
      }
    }
    return .busy
  }

  // MARK: The common read

  /// What `quickCopy` found.
  enum Quick {
    /// Found, not expiring, its value (of this many bytes) copied whole: a hit.
    case hit(Int)
    /// Both buckets read stable without it, nothing moved meanwhile: a miss.
    case miss
    /// Anything else (a bucket mid-write, the index reorganised, an entry with an expiry,
    /// a value larger than the buffer, a handle that checks checksums or cannot set hit
    /// bits): the general read (`probe`) answers.
    case slow
  }

  /// R1-R6 for the read nearly every call is, in fewer instructions than `probe`: no
  /// waiting, no retry, nothing judged but the hit bit. The same protocol, step for step
  /// (so the same argument that a copy is whole); what it does not handle it leaves to
  /// `probe` with nothing changed. Why it pays: a read is two dependent cache misses
  /// (bucket, record), and the fewer its instructions, the more of the next read's
  /// misses the CPU overlaps with this one's.
  ///
  /// Straight-line for the common hit: the key's entry named by the first slot whose tag
  /// matches, in its first bucket or, when none there does, its second, a short record
  /// (`PartitionMemory.shortEntry`) whose value fits `buffer`. Anything else (a bucket
  /// mid-write, a colliding tag, a miss, a record with an expiry or in a longer form)
  /// goes on in `quickCopyRest`, out of line: with no loop here, the hit keeps its state
  /// in registers.
  ///
  /// `route`: what a batch's step B1 computed for the key: its partition, taken while the
  /// file's partition count is the one B1 saw, and its first place and tag, while its
  /// partition's group count is the one B1 saw (R1's acquire load is made either way, and
  /// R5 judges the read as always). Its second place a batch computes only where the
  /// first bucket has no slot with the key's tag (`Placement.second`, the same function
  /// of the hash: most keys are in their first bucket). A single read computes both at
  /// once, and prefetches its second bucket's line while the first's miss is under way
  /// (the first's load follows at once: a prefetch of it gains nothing, and a duplicate
  /// of the first is harmless, cheaper than comparing the places); a batch prefetched its
  /// first buckets at B1, and at B2 its records whole or its second buckets.
  @inline(__always)
  func quickCopy(
    _ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer, route: Route? = nil
  ) -> Quick {
    guard isPlain, let out = buffer.baseAddress else { return .slow }
    let keyCount = key.count  // once: `count` tests the key's start for nil each time
    let routing = memory.route
    let count = routing.count
    let routed = route.map { $0.partitionCount == count } ?? false
    let p = routed ? route.unsafelyUnwrapped.partition : routing.partition(hash)
    let part = memory.partition(p)
    let index = BucketIndex(part: part)
    // R1.
    let geometry = index.geometry()
    guard part.isValidGroupCount(geometry.groups) else { return .slow }
    // R2 (`quickCopy`'s doc says why each way).
    let batch = route != nil
    var bucket: PartitionMemory.Bucket
    let tag: UInt16
    var second = Place(group: 0, bucket: 0)
    if batch {
      let r = route.unsafelyUnwrapped
      let routedPlaces = routed && r.groups == geometry.groups
      bucket = routedPlaces ? r.first : part.bucketView(Placement.first(hash: hash, groups: geometry.groups))
      tag = routedPlaces ? r.tag : IndexGeometry.tag(hash)
    } else {
      let pl = Placement(hash: hash, groups: geometry.groups)
      (tag, second) = (pl.tag, pl.second)
      part.prefetchBucket(second, write: false)
      bucket = part.bucketView(pl.first)
    }
    // R3 for the first slot with the key's tag, in its first bucket, else (R4) in its
    // second: a hit needs only the bucket it is found in read stable, and the tags of a
    // bucket without the key's rarely match it.
    var s1 = bucket.seq.load(.acquiring)
    var m = bucket.tagMatches(tag)
    if m == 0 {
      bucket = part.bucketView(batch ? Placement.second(hash: hash, groups: geometry.groups) : second)
      s1 = bucket.seq.load(.acquiring)
      m = bucket.tagMatches(tag)
    }
    if s1 & 1 == 0 && m != 0 {
      let entry = bucket.entryWord(m.trailingZeroBitCount)
      let word = entry.load(.relaxed)
      let offset = Int(truncatingIfNeeded: word & Format.offsetMask)
      if !batch { part.prefetchRecordTail(at: offset) }
      if let h = part.shortEntry(at: offset, keyCount: keyCount, room: buffer.count),
        part.keyEquals(record: offset, h, key)
      {
        part.copyValue(record: offset, h, to: out)
        atomicMemoryFence(ordering: .acquiring)
        // R3's `seq` again, then R5 (the move sequence matters only to a miss).
        if bucket.seq.load(.relaxed) == s1 && index.geometryRelaxed() == geometry {
          // R6 (`BucketIndex.markHit` on the slot's word).
          if word & Format.hotBit == 0 { entry.bitwiseOr(BucketIndex.hitBit(word), .relaxed) }
          return .hit(h.vlen)
        }
      }
    }
    return quickCopyRest(key, hash: hash, into: buffer, routed: (p, count), geometry, prefetchTail: !batch)
  }

  /// `quickCopy` past its straight line, in partition `routed.partition` of the
  /// `routed.count` R1 routed by: R2's places again, from `hash` and R1's
  /// `geometry` (handed over instead, they stayed alive through the straight line and
  /// were spilled there), the move sequence, then R3-R6 over both of the key's places
  /// (the first read again), judged as `quickCopy`'s doc says. R5 compares the geometry
  /// word with R1's after the reads, as a read that loaded the move sequence right after
  /// R1 would.
  @inline(never)
  func quickCopyRest(
    _ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer,
    routed: (partition: Int, count: Int), _ geometry: Geometry, prefetchTail tail: Bool
  ) -> Quick {
    let (p, count) = routed
    let words = KeyHash.shortWords(of: key)
    let index = BucketIndex(part: memory.partition(p))
    let pl = Placement(hash: hash, groups: geometry.groups)
    let moves = index.moveSequence()
    // R3, R4, as one loop: the bucket's read inlined once, not twice, leaves the
    // registers to one copy (twice, the read spilled more of its state).
    var place = pl.first
    var found: QuickFind
    while true {
      found = index.quickRead(place, tag: pl.tag, key, into: buffer, prefetchTail: tail, words: words)
      if !found.isAbsent || place == pl.second { break }
      place = pl.second
    }
    // R5.
    guard index.geometryRelaxed() == geometry else { return .slow }
    if found.isAbsent {
      // A miss stands as `locate`'s does: nothing moved, no growth under way here, and
      // no growth this handle has not seen (else `probe` looks further).
      let settled =
        moves & 1 == 0 && index.part.word(.moves).load(.relaxed) == moves
        && index.part.word(.splitSource).load(.relaxed) == 0 && memory.liveRouting() == count
      return settled ? .miss : .slow
    }
    // R6: an entry with an expiry, or too large for the buffer, is `probe`'s to judge.
    guard found.isCopied else { return .slow }
    if found.word & Format.hotBit == 0 { index.markHit(found.slot, word: found.word) }
    return .hit(found.count)
  }

  /// Where a batch's step B1 found a key to be: its partition among `partitionCount`,
  /// and its first place and tag among that partition's `groups` (`partition` -1: the
  /// geometry word was out of range). Only a hint: `quickCopy` uses it while both counts
  /// still hold. Not the second place: B2 and `quickCopy` compute it (from the hash and
  /// `groups`) for the keys not in their first bucket alone.
  struct Route {
    var partitionCount: Int
    var partition: Int
    var groups: Int
    /// The first place's bucket, by its address: B2 and B3 use its words without
    /// computing it again.
    var first: PartitionMemory.Bucket
    var tag: UInt16

    /// The route of a key whose partition's geometry word was out of range: B2 and B3
    /// pass it by (`partition` -1).
    static func unrouted(in part: PartitionMemory) -> Route {
      Route(partitionCount: 0, partition: -1, groups: 0, first: part.bucketView(Place(group: 0, bucket: 0)), tag: 0)
    }
  }

  /// What `BucketIndex.quickRead` saw in one bucket.
  struct QuickFind {
    /// 0: not there (read stable); 1: found and copied; 2: anything else.
    var state: UInt8
    var slot: BucketIndex.Slot
    var word: UInt32
    var count: Int
    @inline(__always) var isAbsent: Bool { state == 0 }
    @inline(__always) var isCopied: Bool { state == 1 }
    @inline(__always) static func other(_ place: Place) -> QuickFind {
      QuickFind(state: 2, slot: .init(place: place, slot: 0), word: 0, count: 0)
    }
  }

  /// R6 for a whole copy of this key's entry.
  @inline(__always)
  func judge(
    _ e: BucketIndex.Entry, partition p: Int, hash: UInt64, now: UInt64, allowExpired: Bool,
    buffer: UnsafeMutableRawBufferPointer
  ) -> Probe {
    let h = e.header
    let expiry = h.expiry & Format.expiryMask
    // The clock is read only for entries that can expire (`now` 0: not read yet).
    let expired = expiry != 0 && Expiry.isExpired(h.expiry, now: now != 0 ? now : SystemCall.expiryClockMilliseconds())
    if expired && !allowExpired { return .miss }
    if h.vlen > buffer.count { return .needs(h.vlen) }
    if checksumOnRead,
      KeyHash.checksum(UnsafeRawBufferPointer(start: buffer.baseAddress, count: h.vlen), hash: hash) != h.sum
    {
      return .corrupt
    }
    if e.word & Format.hotBit == 0 && writable { BucketIndex(part: memory.partition(p)).markHit(e.at, word: e.word) }
    return .hit(
      EntryInfo(
        valueCount: h.vlen, expiryMilliseconds: expiry == 0 ? nil : expiry,
        version: UInt64(h.version), isExpired: expired))
  }

  // MARK: Counters

  /// Hit and miss counters are bumped with a plain load and store, not an atomic
  /// read-modify-write: on x86 a locked instruction is a full barrier, which would stop
  /// the CPU from overlapping one read's cache miss with the next read's. The price:
  /// threads sharing one handle may lose an occasional increment (counters are
  /// statistics, never used for decisions). Each handle has its own counter words.
  @inline(__always) func countHit() { counters.hits.increment() }
  @inline(__always) func countMiss() { counters.misses.increment() }

  /// A miss that gave up on a busy bucket: counted as a miss and as a busy one.
  func countBusyMiss() {
    countMiss()
    counters.busy.increment()
  }

  // MARK: Scans

  /// One entry seen by `forEachEntry`.
  struct ScannedEntry {
    var key: [UInt8]
    var value: [UInt8]?
    var info: EntryInfo
    var inMainLog: Bool
  }

  /// Tries per bucket before a scan passes a bucket that keeps changing.
  static let scanTries = 64

  /// Visits live entries without any lock (each bucket read under its seqlock, each entry
  /// copied whole). Entries written or moved during the scan may be missed or seen
  /// twice; writers are never blocked. Return false from `body` to stop.
  func forEachEntry(values: Bool, includeExpired: Bool = false, _ body: (ScannedEntry) throws -> Bool) rethrows {
    let now = SystemCall.expiryClockMilliseconds()
    memory.refreshRouting()
    for p in 0..<memory.partitionCount {
      let index = BucketIndex(part: memory.partition(p))
      var g = 0
      while true {
        let geometry = index.geometry()
        guard index.part.isValidGroupCount(geometry.groups), g < geometry.groups else { break }
        for b in 0..<Format.bucketsPerGroup {
          let found = scanBucket(index, Place(group: g, bucket: b), geometry: geometry, values: values, now: now)
          for entry in found where includeExpired || !entry.info.isExpired {
            if try !body(entry) { return }
          }
        }
        g += 1
      }
    }
  }

  /// The whole entries of one bucket, each copied under the bucket's seqlock with the
  /// geometry unchanged, each key hashing to its slot's tag and each value matching its
  /// checksum (a damaged entry is skipped, never handed out).
  private func scanBucket(
    _ index: BucketIndex, _ place: Place, geometry: Geometry, values: Bool, now: UInt64
  ) -> [ScannedEntry] {
    let smallEnd = index.part.limits.mainBase
    for attempt in 0..<Self.scanTries {
      let read = index.seqlockRead(place) { () -> [(ScannedEntry, UInt16, UInt16)] in
        var out: [(ScannedEntry, UInt16, UInt16)] = []
        for slot in 0..<Format.slotsPerBucket {
          let tag = index.part.tag(place, slot)
          guard tag != 0, let e = index.entry(at: BucketIndex.Slot(place: place, slot: slot)) else { continue }
          let h = e.header
          let bytes = index.part.copyBytes(record: e.offset, h, value: true)
          let expiry = h.expiry & Format.expiryMask
          let info = EntryInfo(
            valueCount: h.vlen, expiryMilliseconds: expiry == 0 ? nil : expiry, version: UInt64(h.version),
            isExpired: Expiry.isExpired(h.expiry, now: now))
          out.append(
            (
              ScannedEntry(key: bytes.key, value: bytes.value, info: info, inMainLog: e.offset >= smallEnd), tag,
              h.sum
            ))
        }
        return out
      }
      guard case .stable(let copies) = read, index.geometryRelaxed() == geometry else {
        if attempt > 0 { spinPause() }
        continue
      }
      return copies.compactMap { (entry, tag, sum) in
        let hash = entry.key.withUnsafeBytes { KeyHash.key($0) }
        guard IndexGeometry.tag(hash) == tag,
          entry.value.map({ v in v.withUnsafeBytes { KeyHash.checksum($0, hash: hash) } == sum }) ?? true
        else { return nil }
        var e = entry
        if !values { e.value = nil }
        return e
      }
    }
    return []
  }
}

// MARK: The common read's bucket

/// Inlined by force (`@_transparent`, which a class's method cannot take): called out of
/// line, as `@inline(__always)` left it, the read spilled its state around two calls.
extension BucketIndex {
  /// R3 for `Reader.quickCopy`: the one seqlock read of a bucket (`BucketIndex.seqlockRead`
  /// around `lookup`, as every read), without the wait: a busy or changed bucket is
  /// `probe`'s.
  @_transparent
  fileprivate func quickRead(
    _ place: Place, tag: UInt16, _ key: UnsafeRawBufferPointer, into buffer: UnsafeMutableRawBufferPointer,
    prefetchTail: Bool, words: (UInt64, UInt64)?
  ) -> Reader.QuickFind {
    let read = seqlockRead(place) {
      lookup(place, tag: tag, key: key, copyInto: buffer, prefetchTail: prefetchTail, words: words)
    }
    switch read {
    case .stable(nil):
      return Reader.QuickFind(state: 0, slot: .init(place: place, slot: 0), word: 0, count: 0)
    case .stable(let e?):
      // Copied (by `lookup`) when it fit; an entry with an expiry is `probe`'s to judge.
      let copied = e.header.expiry == 0 && e.header.vlen <= buffer.count
      return Reader.QuickFind(state: copied ? 1 : 2, slot: e.at, word: e.word, count: e.header.vlen)
    case .changed, .busy:
      return .other(place)
    }
  }
}
