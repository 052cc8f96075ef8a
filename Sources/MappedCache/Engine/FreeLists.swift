/// The main log's free lists: dead records of 32 bytes or more, anywhere in the log's
/// chain, kept by size so that a record bound for main can take one rather than wait for
/// the tail to free the bytes a lap later. A record dies in the middle of the log when an
/// overwrite moves its key elsewhere, a rewrite in place shrinks it (W3b's leftover), or
/// a removal, an expiry or a slot's eviction empties its slot; its bytes would otherwise
/// stay dead until the tail passes them.
///
/// A free record is an ordinary dead record with the listed flag, a one-byte key and a
/// value that starts with its links (`MappedMemory.writeFreeRecord`): the previous and
/// next record of its list, as partition offsets (0: none). List `c` holds the records of
/// `32 × 2^c` to `32 × 2^(c+1) − 1` bytes (the last, 4 KiB and more); its head is in the
/// partition's line 4 (`Format.PartitionOffset.freeHeads`). Only writers, under the lock, read or
/// change the lists; readers never look at them (a slot never names a free record).
///
/// Invariants (`Checker` checks them and repair rebuilds the lists from the flags):
///
///     every listed record lies in main's chain, on the list of its size, once;
///     a node's links agree with its neighbours' (prev.next = node = next.prev),
///       and a list's first node is its head.
///
/// Every link read from the file is checked before it is followed (`node`): a record
/// there, listed, inside main's live range, linked back. Anything else is damage: the
/// throwing operations report it (the writer repairs, and repair rebuilds the lists), the
/// others (`release`) leave the record dead and unlisted. A writer killed between two of
/// their stores leaves the intent word set: repair rebuilds every list from the flags.
/// A record is listed only after every slot that named it was rewritten, and unlisted
/// (`unlink`) before anything overwrites it or the tail passes it.
struct FreeLists {
  let part: PartitionMemory
  let logs: RecordLogs

  static let classCount = 8
  /// The smallest record listed: smaller dead records wait for the tail.
  static let minBytes = 32
  /// Nodes `take` looks at in the list of the size it needs (first fit).
  static let searchLimit = 8
  /// Free records after a released one that `release` merges into it.
  static let mergeLimit = 4

  /// The list of records of `size` bytes (at least `minBytes`).
  @inline(__always)
  static func sizeClass(_ size: Int) -> Int {
    min(classCount - 1, Int.bitWidth - 1 - (max(size, minBytes) >> 5).leadingZeroBitCount)
  }

  // MARK: Heads

  @inline(__always)
  func head(_ c: Int) -> Int {
    Int(truncatingIfNeeded: part.word(.freeHeads(c >> 1)).load(.relaxed) &>> UInt64(32 * (c & 1)) & 0xFFFF_FFFF)
  }

  private func setHead(_ c: Int, _ offset: Int, _ held: borrowing WriteLock.Held) {
    let word = part.word(.freeHeads(c >> 1))
    let shift = UInt64(32 * (c & 1))  // 0 or 32: `&<<` needs no over-shift check
    let old = word.load(.relaxed) & ~(0xFFFF_FFFF &<< shift)
    word.store(old | UInt64(UInt32(truncatingIfNeeded: offset)) &<< shift, .relaxed)
  }

  /// Whether any list holds a record that may fit `size` bytes (its own class or above).
  @inline(__always)
  func mayHold(_ size: Int) -> Bool {
    let c = Self.sizeClass(size)
    for pair in (c >> 1)..<(Self.classCount >> 1) {
      var w = part.word(.freeHeads(pair)).load(.relaxed)
      if pair == c >> 1 && c & 1 == 1 { w &= 0xFFFF_FFFF_0000_0000 }
      if w != 0 { return true }
    }
    return false
  }

  /// Empties every list (the main log was reset or discarded: its records are gone).
  func clear(_ held: borrowing WriteLock.Held) {
    for pair in 0..<(Self.classCount >> 1) { part.word(.freeHeads(pair)).store(0, .relaxed) }
  }

  // MARK: Nodes

  /// The free record at `offset`, checked: a record, listed, of a free record's shape,
  /// whole inside main's live range.
  func node(_ offset: Int) throws(PartitionDamage) -> RecordFormat.Header {
    guard let h = part.record(at: offset), h.isListed, h.klen == 1, h.vlen >= 8,
      logs.id(containing: offset) == .main, logs.state(.main).holds(offset, count: h.size)
    else { throw PartitionDamage("a free list names \(offset), which is not a free record") }
    return h
  }

  /// The checked neighbours of the free record at `offset` (header `h`): what `unlink`
  /// will write, found consistent before anything is written.
  private func neighbours(
    _ offset: Int, _ h: RecordFormat.Header
  ) throws(PartitionDamage) -> (prev: (Int, RecordFormat.Header)?, next: (Int, RecordFormat.Header)?) {
    let links = part.freeLinks(record: offset, h)
    var prev: (Int, RecordFormat.Header)? = nil
    var next: (Int, RecordFormat.Header)? = nil
    if links.prev != 0 {
      let p = try node(links.prev)
      guard part.freeLinks(record: links.prev, p).next == offset else {
        throw PartitionDamage("free record \(offset) is not its previous one's next")
      }
      prev = (links.prev, p)
    } else if head(Self.sizeClass(h.size)) != offset {
      throw PartitionDamage("free record \(offset) has no previous one and is not its list's head")
    }
    if links.next != 0 {
      let n = try node(links.next)
      guard part.freeLinks(record: links.next, n).prev == offset else {
        throw PartitionDamage("free record \(offset) is not its next one's previous")
      }
      next = (links.next, n)
    }
    return (prev, next)
  }

  /// Takes the free record at `offset` off its list and clears its flag: an ordinary dead
  /// record again, for the caller to overwrite or the tail to pass. Its header is read
  /// again and checked (`node`): a caller's flag alone proves nothing in a damaged file.
  func unlink(_ offset: Int, _ held: borrowing WriteLock.Held) throws(PartitionDamage) {
    let h = try node(offset)
    let (prev, next) = try neighbours(offset, h)
    let nextOffset = next?.0 ?? 0
    if let (p, ph) = prev {
      part.storeFreeLinks(record: p, ph, next: nextOffset, held)
    } else {
      setHead(Self.sizeClass(h.size), nextOffset, held)
    }
    if let (n, nh) = next { part.storeFreeLinks(record: n, nh, prev: prev?.0 ?? 0, held) }
    part.unlistRecord(at: offset, h, held)
  }

  /// Lists the `size` bytes at `offset` (dead records of main's chain) as one free record
  /// at the head of its list. False, changing nothing, when the list's head is not a
  /// free record (damage, left for the next throwing operation to report).
  @discardableResult
  private func push(_ offset: Int, size: Int, _ held: borrowing WriteLock.Held) -> Bool {
    let c = Self.sizeClass(size)
    let first = head(c)
    var firstHeader: RecordFormat.Header? = nil
    if first != 0 {
      guard let h = try? node(first), part.freeLinks(record: first, h).prev == 0 else { return false }
      firstHeader = h
    }
    part.writeFreeRecord(at: offset, size: size, prev: 0, next: first, held)
    if let h = firstHeader { part.storeFreeLinks(record: first, h, prev: offset, held) }
    setHead(c, offset, held)
    return true
  }

  // MARK: Giving out and taking back

  /// A free record for a record of `size` bytes whose key has `keyCount` bytes, taken off
  /// its list: its offset and bytes, which leave nothing or room for a dead record of the
  /// key (`MappedMemory.writeRecord(over:)`). First fit among `searchLimit` records of
  /// the size's own list, then the first record of each larger list that fits. None lying
  /// past the main log's pending limit (space the index waits for), inside `avoiding`,
  /// or fewer than `distance` bytes ahead of the tail.
  func take(
    _ size: Int, keyCount: Int, avoiding: Range<Int> = 0..<0, distance: Int = 0, _ held: borrowing WriteLock.Held
  ) throws(PartitionDamage) -> (offset: Int, extent: Int)? {
    let pending = logs.pendingLimit
    let main = logs.state(.main)
    let own = Self.sizeClass(size)
    for c in own..<Self.classCount {
      var at = head(c)
      var looked = 0
      while at != 0 && looked < (c == own ? Self.searchLimit : 2) {
        let h = try node(at)
        let rest = h.size &- size
        if rest >= 0 && (rest == 0 || RecordFormat.filler(size: rest, keyCount: keyCount) != nil)
          && (pending == 0 || at &+ h.size <= pending) && !avoiding.overlaps(at..<(at &+ h.size))
          && (distance == 0 || main.distanceFromTail(at) >= distance)
        {
          try unlink(at, held)
          return (at, h.size)
        }
        at = part.freeLinks(record: at, h).next
        looked &+= 1
      }
    }
    return nil
  }

  /// Lists the dead record at `offset` (header `h`, which no slot names any more: an
  /// overwrite moved its key, a removal or an eviction emptied its slot, or a rewrite in
  /// place left it), merged with the free records right after it (up to `mergeLimit`).
  /// Nothing happens for a record of the small log, one under `minBytes`, one outside
  /// main's live range, or when a list looks damaged.
  func release(_ offset: Int, _ h: RecordFormat.Header, _ held: borrowing WriteLock.Held) {
    guard logs.id(containing: offset) == .main else { return }
    let main = logs.state(.main)
    guard main.holds(offset, count: h.size) else { return }
    var start = offset
    var size = h.size
    // The free record just before it, named by its footer (checked: the footer may be
    // any bytes of a live record's value, or a stale one; a record is merged only when
    // it is free, ends exactly here, and its list links back to it). Not before the
    // tail's record: in a full log the head meets the tail there, and the record before
    // is the chain's last, not this one's predecessor.
    if offset != main.tail.offset, let s = part.freeFooter(endingAt: offset), s < offset, s >= logs.mainBase,
      let a = part.record(at: s),
      a.isListed, s &+ a.size == offset, main.holds(s, count: a.size),
      part.freeRecordShape(size: a.size &+ size) != nil, (try? unlink(s, held)) != nil
    {
      start = s
      size &+= a.size
    }
    guard size >= Self.minBytes else { return }
    for _ in 0..<Self.mergeLimit {
      let next = start &+ size
      guard next != main.head.offset, let d = part.record(at: next), d.isListed, main.holds(next, count: d.size),
        part.freeRecordShape(size: size &+ d.size) != nil, (try? unlink(next, held)) != nil
      else { break }
      size &+= d.size
    }
    if part.freeRecordShape(size: size) != nil { push(start, size: size, held) }
  }

  /// Lists what a write of `size` bytes over the free record at `offset` (`extent` bytes)
  /// left after it, when that is `minBytes` or more.
  func releaseRest(of offset: Int, extent: Int, size: Int, _ held: borrowing WriteLock.Held) {
    let rest = offset &+ size
    guard extent &- size >= Self.minBytes, let h = part.record(at: rest) else { return }
    release(rest, h, held)
  }

  /// Repair: every list emptied, then every listed record of main's chain (`starts`: each
  /// record's start and bytes) listed again, in the order of the chain's offsets.
  func rebuild(from starts: [Int: Int], _ held: borrowing WriteLock.Held) {
    clear(held)
    for start in starts.keys.sorted() {
      guard let h = part.record(at: start), h.isListed else { continue }
      if part.freeRecordShape(size: h.size) == nil || !push(start, size: h.size, held) {
        part.unlistRecord(at: start, h, held)
      }
    }
  }

  /// The problems of the lists against main's chain (`starts`), for `verify`, and the
  /// bytes they hold.
  func inspect(chain starts: [Int: Int]) -> (problems: [String], bytes: Int) {
    var problems: [String] = []
    var seen = Set<Int>()
    var bytes = 0
    for c in 0..<Self.classCount {
      var at = head(c)
      var prev = 0
      while at != 0 {
        guard starts[at] != nil, !seen.contains(at), let h = try? node(at) else {
          problems.append("free list \(c): \(at) is not a free record of the main log's chain, or is listed twice")
          break
        }
        let links = part.freeLinks(record: at, h)
        if Self.sizeClass(h.size) != c || links.prev != prev {
          problems.append("free list \(c): the record at \(at) is on the wrong list or misses its link back")
          break
        }
        seen.insert(at)
        bytes &+= h.size
        prev = at
        at = links.next
      }
    }
    let listed = starts.keys.filter { part.record(at: $0)?.isListed == true }.count
    if listed != seen.count {
      problems.append("\(listed) records are flagged free, \(seen.count) are on the free lists")
    }
    return (problems, bytes)
  }
}
