/// A partition's two circular logs of records: `small` (a tenth of the data space, new
/// entries) and `main` (survivors; its tail is the eviction hand), from the end of small
/// to the main log's *limit*, which moves down as the index grows into its space and up
/// as the index gives space back (`IndexResizer`).
///
/// A position is a partition offset and a lap count, in one word (`LogPosition`). The
/// live records are `[tail, head)` when head and tail are in the same lap, and
/// `[tail, lastWrap) ∪ [base, head)` when the head is one lap ahead. When a record would
/// pass the limit, the head writes a one-byte wrap marker, notes where (`lastWrap`, main
/// only: small's is found by walking) and goes on at the base, one lap on; the tail,
/// reaching the marker, does the same. Invariants, restored by repair (`Checker`):
///
///     head.lap − tail.lap ∈ {0, 1};  equal laps: tail ≤ head;  else head ≤ tail
///     base ≤ offsets < limit (the small log's limit is its end)
///     [tail, head) is a chain of records and wrap markers ending exactly at head
///     the main log's limit ≤ the index's low end; its pending limit, if set, below it
///
/// Each change of a position (`commit`, the head's wrap in `reserve`, `advanceTail`) is
/// one store of one word: a writer killed between two leaves a consistent pair. Only
/// writers (under the lock) move them; readers never look at them.
enum LogID: CaseIterable {
  case small, main
}

/// A log position: `lap << 32 | offset`.
struct LogPosition: Equatable {
  var raw: UInt64
  @inline(__always) init(raw: UInt64) { self.raw = raw }
  @inline(__always) init(lap: UInt32, offset: Int) {
    raw = UInt64(lap) << 32 | UInt64(UInt32(truncatingIfNeeded: offset))
  }
  @inline(__always) var lap: UInt32 { UInt32(truncatingIfNeeded: raw >> 32) }
  @inline(__always) var offset: Int { Int(truncatingIfNeeded: raw & 0xFFFF_FFFF) }
}

/// One log's bounds and positions, as read from the partition.
struct LogState {
  var base: Int
  /// Where the head wraps.
  var limit: Int
  var head: LogPosition
  var tail: LogPosition
  /// Where the head last wrapped (main only; for small, `limit`, a bound).
  var lastWrap: Int

  /// The head is one lap ahead of the tail.
  @inline(__always) var wrapped: Bool { head.lap != tail.lap }
  @inline(__always) var isEmpty: Bool { head == tail }
  /// Bytes between tail and head (live records, dead ones and wrap markers, and the
  /// unused end of the tail's lap when wrapped).
  var used: Int {
    wrapped ? (lastWrap - tail.offset) + (head.offset - base) : head.offset - tail.offset
  }
  /// Whether `n` bytes can be appended now (a wrap marker first when they would pass the
  /// limit): the bytes ahead of the head before the tail, or before the limit and then
  /// from the base to the tail. One byte before the limit always stays free, so a wrap
  /// marker fits.
  @inline(__always) func fits(_ n: Int) -> Bool {
    if wrapped { return tail.offset &- head.offset >= n && head.offset &+ n < limit }
    if head.offset &+ n < limit { return true }
    return tail.offset &- base >= n
  }
  /// Bytes free in the log (what eviction must make room in), counting both ends.
  var free: Int { (limit - base) - used - (wrapped ? limit - lastWrap : 0) }
  var isSane: Bool {
    guard head.offset >= base, tail.offset >= base, head.offset < limit else { return false }
    if head.lap == tail.lap { return tail.offset <= head.offset }
    return head.lap == tail.lap &+ 1 && head.offset <= tail.offset && tail.offset <= lastWrap && lastWrap <= limit
  }
  /// Whether the `count` bytes from `offset` lie in the live range, in one of its parts.
  func holds(_ offset: Int, count: Int) -> Bool {
    if wrapped {
      return (offset >= tail.offset && offset < lastWrap && count <= lastWrap &- offset)
        || (offset >= base && offset < head.offset && count <= head.offset &- offset)
    }
    return offset >= tail.offset && offset < head.offset && count <= head.offset &- offset
  }
  /// Bytes from the tail to `offset`, which lies in the live range: how soon the tail
  /// reaches it.
  func distanceFromTail(_ offset: Int) -> Int {
    if wrapped && offset < tail.offset { return (lastWrap &- tail.offset) &+ (offset &- base) }
    return offset &- tail.offset
  }

  /// Whether `offset` lies in the live range (it may still be a dead record or the middle
  /// of one: the record chain says which).
  func holds(_ offset: Int) -> Bool { holds(offset, count: 1) }
}

struct RecordLogs {
  let part: PartitionMemory
  let smallBase: Int
  let mainBase: Int
  /// The largest record (`Layout.maxRecord`).
  let maxRecord: Int
  /// Where the small log ends: the main log's base (a word less for every value that
  /// holds the logs: `IndexResizer`, `EvictionPolicy`).
  @inline(__always) var smallEnd: Int { mainBase }

  @inline(__always)
  init(part: PartitionMemory) {
    self.part = part
    smallBase = part.limits.smallBase
    mainBase = part.limits.mainBase
    maxRecord = part.limits.maxRecord
  }

  private func words(_ id: LogID) -> (head: PartitionWord, tail: PartitionWord) {
    id == .small ? (.smallHead, .smallTail) : (.mainHead, .mainTail)
  }

  /// The main log's limit (where its head wraps), as stored.
  var mainLimit: Int { Int(truncatingIfNeeded: part.word(.mainLimit).load(.relaxed) & 0xFFFF_FFFF) }
  /// The limit the main log's head wraps at from now on, when the index waits for space
  /// (0: none).
  var pendingLimit: Int { Int(truncatingIfNeeded: part.word(.mainPendingLimit).load(.relaxed) & 0xFFFF_FFFF) }

  func state(_ id: LogID) -> LogState {
    let w = words(id)
    let head = LogPosition(raw: part.word(w.head).load(.relaxed))
    let tail = LogPosition(raw: part.word(w.tail).load(.relaxed))
    if id == .small {
      return LogState(base: smallBase, limit: smallEnd, head: head, tail: tail, lastWrap: smallEnd - 1)
    }
    let lastWrap = Int(truncatingIfNeeded: part.word(.mainLastWrap).load(.relaxed) & 0xFFFF_FFFF)
    return LogState(base: mainBase, limit: mainLimit, head: head, tail: tail, lastWrap: lastWrap)
  }

  /// Whether both logs' positions satisfy the first two invariant lines, and the pending
  /// limit is 0 or inside the main log (a damaged one sends the writer to repair).
  var areSane: Bool {
    let limit = mainLimit
    let pending = pendingLimit
    return state(.small).isSane && state(.main).isSane && limit > mainBase && limit <= part.limits.bytes
      && (pending == 0 || (pending > mainBase && pending < limit))
  }

  /// The log holding partition offset `offset` (an offset in the data space).
  @inline(__always) func id(containing offset: Int) -> LogID { offset < smallEnd ? .small : .main }

  /// Room for a record of `size` bytes in log `id` now: where the head wraps, the
  /// pending limit counts for main when the head is before it.
  @inline(__always)
  func fits(_ id: LogID, _ size: Int) -> Bool { effectiveState(id).fits(size) }

  /// The state with the limit the head will wrap at: for main, the pending limit when
  /// the index waits for the space above it and the head has not passed it (the head
  /// then stops short of it until the tail's lap ends, and wraps there).
  func effectiveState(_ id: LogID) -> LogState {
    var s = state(id)
    if id == .main {
      let pending = pendingLimit
      if pending > mainBase && pending < s.limit && s.head.offset < pending { s.limit = pending }
    }
    return s
  }

  /// Reserves `size` bytes at the head of log `id` (writing a wrap marker and moving the
  /// head to the base first if the record would pass the limit) and returns their
  /// offset. The head is not advanced past them: the caller writes the record, then
  /// calls `commit`, so the record is whole before the log claims it. Precondition
  /// (checked by eviction): `fits(id, size)`.
  func reserve(_ id: LogID, _ size: Int, _ held: borrowing WriteLock.Held) -> Int {
    let s = effectiveState(id)
    precondition(s.fits(size), "log has no room")
    if s.wrapped || s.head.offset &+ size < s.limit { return s.head.offset }
    // Wrap: the marker, then (main) where it is, then the head in one store.
    part.writeWrapMarker(at: s.head.offset, held)
    if id == .main { part.word(.mainLastWrap).store(UInt64(s.head.offset), .relaxed) }
    part.word(words(id).head).store(LogPosition(lap: s.head.lap &+ 1, offset: s.base).raw, .relaxed)
    return s.base
  }

  /// Advances log `id`'s head past a record of `size` bytes written at the reserved offset.
  func commit(_ id: LogID, _ size: Int, _ held: borrowing WriteLock.Held) {
    let head = part.word(words(id).head)
    let h = LogPosition(raw: head.load(.relaxed))
    head.store(LogPosition(lap: h.lap, offset: h.offset &+ size).raw, .relaxed)
  }

  /// What is at log `id`'s tail: nothing (empty), a wrap marker, or a record.
  enum TailItem {
    case empty
    case wrap
    case record(offset: Int, RecordFormat.Header)
    /// Bytes that are neither: the chain is broken (damage).
    case broken
  }

  func tailItem(_ id: LogID) -> TailItem {
    let s = state(id)
    if s.isEmpty { return .empty }
    let t = s.tail.offset
    // The end of the tail's lap: the marker, or (an implicit wrap) nothing before the limit.
    if s.wrapped && t == s.lastWrap && id == .main { return .wrap }
    if part.isWrapMarker(at: t) { return s.wrapped ? .wrap : .broken }
    guard let h = part.record(at: t) else { return .broken }
    let end = s.wrapped ? (id == .main ? s.lastWrap : s.limit) : s.head.offset
    guard h.size <= end &- t else { return .broken }
    return .record(offset: t, h)
  }

  /// Advances log `id`'s tail past its oldest record (`size` bytes), or, with `size` nil,
  /// past the wrap marker at its tail to the base, one lap on.
  func advanceTail(_ id: LogID, by size: Int?, _ held: borrowing WriteLock.Held) {
    let tail = part.word(words(id).tail)
    let t = LogPosition(raw: tail.load(.relaxed))
    let next =
      size.map { LogPosition(lap: t.lap, offset: t.offset &+ $0) }
      ?? LogPosition(lap: t.lap &+ 1, offset: id == .small ? smallBase : mainBase)
    tail.store(next.raw, .relaxed)
  }

  /// Drops every record of log `id` (tail moved to head): after `removeAll`.
  func discardAll(_ id: LogID, _ held: borrowing WriteLock.Held) {
    let w = words(id)
    part.word(w.tail).store(part.word(w.head).load(.relaxed), .relaxed)
    if id == .main { FreeLists(part: part, logs: self).clear(held) }
  }

  /// Forgets log `id` entirely (both positions at its base, lap 0): repair of a broken
  /// chain, or of positions out of range.
  func reset(_ id: LogID, _ held: borrowing WriteLock.Held) {
    let w = words(id)
    let start = LogPosition(lap: 0, offset: id == .small ? smallBase : mainBase).raw
    part.word(w.head).store(start, .relaxed)
    part.word(w.tail).store(start, .relaxed)
    if id == .main {
      part.word(.mainLastWrap).store(0, .relaxed)
      FreeLists(part: part, logs: self).clear(held)
    }
  }

  // MARK: The main log's limit

  /// Whether no live record of main lies at or past `offset` (the index may then take the
  /// space from `offset` up).
  func mainIsFreeFrom(_ offset: Int) -> Bool {
    let s = state(.main)
    if s.isEmpty { return true }
    // The head must stay below the new limit (a wrap marker goes at the head).
    if s.wrapped { return s.lastWrap <= offset && s.head.offset < offset }
    return s.head.offset < offset
  }

  /// Lowers the main log's limit to `offset`. Precondition: `mainIsFreeFrom(offset)`.
  func lowerMainLimit(to offset: Int, _ held: borrowing WriteLock.Held) {
    precondition(offset > mainBase && offset <= mainLimit, "limit out of range")
    part.word(.mainLimit).store(UInt64(offset), .relaxed)
    if pendingLimit >= offset || pendingLimit == 0 { clearPendingLimit(held) }
    // An empty log lapped at the old limit may have its head beyond the new one.
    let s = state(.main)
    if s.isEmpty && s.head.offset >= offset { reset(.main, held) }
  }

  /// Raises the main log's limit to `offset` (space the index gave back).
  func raiseMainLimit(to offset: Int, _ held: borrowing WriteLock.Held) {
    precondition(offset >= mainLimit && offset <= part.limits.bytes, "limit out of range")
    part.word(.mainLimit).store(UInt64(offset), .relaxed)
  }

  /// Sets the main log's limit whatever it was (repair, with the main log reset after).
  func resetMainLimit(to offset: Int, _ held: borrowing WriteLock.Held) {
    part.word(.mainLimit).store(UInt64(offset), .relaxed)
  }

  /// Asks the main log's head to wrap at `offset` from now on, so that the space above
  /// it empties within a lap.
  func setPendingLimit(_ offset: Int, _ held: borrowing WriteLock.Held) {
    part.word(.mainPendingLimit).store(UInt64(offset), .relaxed)
  }

  func clearPendingLimit(_ held: borrowing WriteLock.Held) {
    part.word(.mainPendingLimit).store(0, .relaxed)
  }
}
