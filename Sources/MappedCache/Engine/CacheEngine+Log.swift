import Synchronization

/// The two circular logs. Positions (`head`, `tail`) are byte counts that only grow;
/// a position's file offset is `base + position % size`. Invariants, restored by
/// `check(repair:)` when the file breaks them:
///
///     tail ≤ head,  head − tail ≤ size,  both multiples of 8
///     [tail, head) is a chain of records (entries and pads) that ends exactly at head
///     every slot's `loc` lies in [tail, head) of its log
///
/// Only writers (under the lock) move `head` and `tail`; readers never look at them.
enum LogID {
  case small, main
}

extension CacheEngine {
  struct LogState {
    var base: Int
    var size: Int
    var head: UInt64
    var tail: UInt64
    var used: Int { Int(truncatingIfNeeded: head &- tail) }
    var free: Int { size - used }
    var isEmpty: Bool { head == tail }
    @inline(__always) func offset(_ pos: UInt64) -> Int { base + Int(pos % UInt64(size)) }
    /// Bytes needed to append a record of `n` bytes: a pad first when the record would
    /// cross the end of the log.
    @inline(__always) func need(_ n: Int) -> Int {
      let contiguous = size - Int(head % UInt64(size))
      return contiguous < n ? contiguous + n : n
    }
    var isSane: Bool {
      head >= tail && head &- tail <= UInt64(size) && head & 7 == 0 && tail & 7 == 0
    }
    /// Whether file offset `loc` names a position in [tail, head).
    func holds(_ loc: Int) -> Bool {
      guard loc >= base, loc < base + size, !isEmpty else { return false }
      let tailOff = Int(tail % UInt64(size))
      let distance = (loc - base - tailOff + size) % size
      return distance < used
    }
  }

  func fields(_ id: LogID) -> (head: Int, tail: Int) {
    id == .small ? (Format.H.smallHead, Format.H.smallTail) : (Format.H.mainHead, Format.H.mainTail)
  }

  func logState(_ id: LogID) -> LogState {
    let f = fields(id)
    return LogState(base: id == .small ? layout.smallBase : layout.mainBase,
                    size: id == .small ? layout.smallSize : layout.mainSize,
                    head: load(f.head), tail: load(f.tail))
  }

  func logsAreSane() -> Bool { logState(.small).isSane && logState(.main).isSane }

  func logID(of loc: Int) -> LogID { loc >= layout.mainBase ? .main : .small }

  /// Reserves `size` bytes at the head of log `id` (writing a pad first if needed) and
  /// returns their file offset. The head is not advanced: the caller writes the record,
  /// then calls `commitAppend`. Precondition (checked by callers): `need(size) <= free`.
  func reserveAppend(_ id: LogID, _ size: Int) -> Int {
    var log = logState(id)
    precondition(log.need(size) <= log.free, "log has no room")
    let contiguous = log.size - Int(log.head % UInt64(log.size))
    if contiguous < size {
      memory.writePad(at: log.offset(log.head), size: contiguous)
      log.head &+= UInt64(contiguous)
      memory.word(fields(id).head).pointee.store(log.head, ordering: .releasing)
    }
    return log.offset(log.head)
  }

  func commitAppend(_ id: LogID, _ size: Int) {
    bump(fields(id).head, UInt64(size))
  }

  func advanceTail(_ id: LogID, _ size: Int) {
    bump(fields(id).tail, UInt64(size))
  }
}
