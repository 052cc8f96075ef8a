/// The two circular logs that hold records: `small` (≈10 % of the log space, new
/// entries) and `main` (survivors; its tail is the eviction hand). Positions (`head`,
/// `tail`) are byte counts that only grow; a position's file offset is
/// `base + position % size`. Invariants, restored by repair (`Checker`) when the file
/// breaks them:
///
///     tail ≤ head,  head − tail ≤ size,  both multiples of 8
///     [tail, head) is a chain of records (entries and pads) that ends exactly at head
///     every slot's `loc` lies in [tail, head) of its log
///
/// Only writers (under the lock) move `head` and `tail`; readers never look at them.
enum LogID {
  case small, main
}

/// One log's bounds and positions, as read from the header.
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

struct RecordLogs {
  let memory: MappedMemory
  let smallSize: Int
  let mainSize: Int
  /// Bytes kept free in main for second chances (`Layout.mainReserve`).
  let mainReserve: Int

  init(memory: MappedMemory, layout: Layout) {
    self.memory = memory
    smallSize = layout.smallSize
    mainSize = layout.mainSize
    mainReserve = layout.mainReserve
  }

  private func words(_ id: LogID) -> (head: HeaderWord, tail: HeaderWord) {
    id == .small ? (.smallHead, .smallTail) : (.mainHead, .mainTail)
  }

  func state(_ id: LogID) -> LogState {
    let w = words(id)
    return LogState(
      base: id == .small ? memory.smallBase : memory.mainBase,
      size: id == .small ? smallSize : mainSize,
      head: memory.header(w.head).load(.relaxed), tail: memory.header(w.tail).load(.relaxed))
  }

  /// Whether both logs' positions satisfy the first invariant line above.
  var areSane: Bool { state(.small).isSane && state(.main).isSane }

  /// The log holding file offset `loc` (an offset already checked to lie in a log).
  func id(containing loc: Int) -> LogID { loc >= memory.mainBase ? .main : .small }

  /// Reserves `size` bytes at the head of log `id` (writing a pad first if the record
  /// would wrap) and returns their file offset. The head is not advanced: the caller
  /// writes the record, then calls `commit`, so the record is whole before the log
  /// claims it. Precondition (checked by eviction): `need(size) <= free`.
  func reserve(_ id: LogID, _ size: Int, _ held: borrowing WriteLock.Held) -> Int {
    var log = state(id)
    precondition(log.need(size) <= log.free, "log has no room")
    let contiguous = log.size - Int(log.head % UInt64(log.size))
    if contiguous < size {
      memory.writePad(at: log.offset(log.head), size: contiguous, held)
      log.head &+= UInt64(contiguous)
      memory.header(words(id).head).store(log.head, .releasing)
    }
    return log.offset(log.head)
  }

  /// Advances log `id`'s head past a record of `size` bytes written at the reserved offset.
  func commit(_ id: LogID, _ size: Int, _ held: borrowing WriteLock.Held) {
    let head = memory.header(words(id).head)
    head.store(head.load(.relaxed) &+ UInt64(size), .relaxed)
  }

  /// Advances log `id`'s tail past its oldest record (`size` bytes).
  func advanceTail(_ id: LogID, _ size: Int, _ held: borrowing WriteLock.Held) {
    let tail = memory.header(words(id).tail)
    tail.store(tail.load(.relaxed) &+ UInt64(size), .relaxed)
  }

  /// Drops every record of log `id` (tail moved to head): after `removeAll`.
  func discardAll(_ id: LogID, _ held: borrowing WriteLock.Held) {
    let w = words(id)
    memory.header(w.tail).store(memory.header(w.head).load(.relaxed), .relaxed)
  }

  /// Forgets log `id` entirely (head and tail 0): repair of a broken record chain.
  func reset(_ id: LogID, _ held: borrowing WriteLock.Held) {
    let w = words(id)
    memory.header(w.head).store(0, .relaxed)
    memory.header(w.tail).store(0, .relaxed)
  }
}
