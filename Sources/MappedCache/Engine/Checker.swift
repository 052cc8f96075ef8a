/// Checking and repair. `inspect` checks every invariant of the file without changing
/// anything (lock-free, or under the lock for an exact answer); `repair` does the same
/// checks under the lock and fixes what they find by dropping what cannot be trusted
/// (entries are a cache's to lose; the file must stay usable). Both run the same steps,
/// in this order, each named for what it checks:
///
///  0. `checkShift`: the shift sequence is even (readers wait on every miss while odd);
///  1. `checkLogs`: each log's head and tail, and its record chain from tail to head
///     (repair forgets a broken log: its slots then fail step 2 and are dropped);
///  2. `checkSlots`: each slot's seq (even, or odd inside a move, whose entry is kept),
///     its record (in its log's live range, a well-formed entry whose hash matches),
///     its value's checksum (with `checksums`), and that no two slots share a record
///     (repair empties the slots that fail);
///  3. `checkReachability`: every entry reachable from its home slot, with no empty slot
///     between (repair moves each misplaced one to the first empty slot of its run);
///  4. `checkCounts`: the header's entry and byte counts against the slots (repair
///     stores the true ones).
struct Checker {
  let index: SlotIndex
  let logs: RecordLogs
  let counters: TableCounters

  /// Problems kept in a report: a damaged file could otherwise list millions.
  static let maxProblems = 100
  /// Passes of moving misplaced entries before repair stops (each pass fixes every entry
  /// whose run has an empty slot; more are needed only when moves open new gaps).
  static let reachabilityPasses = 64

  /// Checks without changing anything.
  func inspect(checksums: Bool) -> VerifyReport {
    var r = VerifyReport()
    checkShift(&r)
    let logStates = checkLogs(&r).states
    _ = checkSlots(&r, logs: logStates, movedSlot: nil, checksums: checksums)
    _ = checkReachability(&r)
    checkCounts(&r)
    return r
  }

  /// Checks and repairs. The intent record is left as it is: the caller resets it after
  /// the repair, so a repair killed midway leaves it to the next one.
  func repair(checksums: Bool, _ held: borrowing WriteLock.Held) -> VerifyReport {
    var r = VerifyReport()
    // 1.
    var (logStates, broken) = checkLogs(&r)
    for id in broken {
      logs.reset(id, held)
      logStates[id] = logs.state(id)
      r.repaired += 1
    }
    // 2–3: slots change, so readers must re-check their misses meanwhile.
    if checkShift(&r) { r.repaired += 1 }  // `shifting` leaves it even
    index.shifting(held) {
      // A slot a dead writer left odd inside a move names a whole copy of its entry
      // either way (`SlotIndex.move`): it is kept, then checked like any other.
      let intent = counters.value(.intent)
      let moved = intent >= Format.intentMoveBase ? Int(truncatingIfNeeded: intent &- Format.intentMoveBase) : nil
      let slots = checkSlots(&r, logs: logStates, movedSlot: moved, checksums: checksums)
      // A moved slot that also failed its checks is only emptied (below): making it even
      // first would show readers, for a moment, an entry repair has rejected.
      for i in slots.finishMove where !slots.drop.contains(i) {
        index.finishSequence(i, held)
        r.repaired += 1
      }
      for i in slots.drop {
        index.clearLeftMidWrite(i, held)
        r.repaired += 1
      }
      var misplaced = checkReachability(&r)
      var passes = 0
      while !misplaced.isEmpty && passes < Self.reachabilityPasses {
        passes += 1
        r.repaired += moveToReachable(misplaced, held)
        var again = VerifyReport()
        misplaced = checkReachability(&again)
        (r.maxProbe, r.meanProbe) = (again.maxProbe, again.meanProbe)
      }
    }
    // 4.
    if checkCounts(&r) {
      counters.set(.entries, UInt64(r.entries), held)
      counters.set(.liveBytes, UInt64(r.liveBytes), held)
      r.repaired += 1
    }
    return r
  }

  private func problem(_ r: inout VerifyReport, _ s: String) {
    if r.problems.count < Self.maxProblems {
      r.problems.append(s)
    } else if r.problems.count == Self.maxProblems {
      r.problems.append("…")
    }
  }

  /// Whether the shift sequence is odd. Under the lock nobody is shifting, so odd means
  /// damage (or a dead remover, whose repair this is): every reader's miss would wait on
  /// it. Without the lock a removal may be under way; `verify` then checks again under it.
  @discardableResult
  private func checkShift(_ r: inout VerifyReport) -> Bool {
    guard index.isShifting else { return false }
    problem(&r, "the shift sequence is odd (a removal left unfinished)")
    return true
  }

  /// Step 1: each log's positions and record chain. Returns every log's state and the
  /// logs whose chain is broken.
  private func checkLogs(_ r: inout VerifyReport) -> (states: [LogID: LogState], broken: [LogID]) {
    var states: [LogID: LogState] = [:]
    var broken: [LogID] = []
    for id in [LogID.small, .main] {
      let log = logs.state(id)
      states[id] = log
      guard log.isSane else {
        problem(&r, "\(id) log: head \(log.head) / tail \(log.tail) out of range")
        broken.append(id)
        continue
      }
      var pos = log.tail
      var records = 0
      while pos < log.head {
        let loc = log.offset(pos)
        guard let rh = index.memory.recordHeader(at: loc), UInt64(rh.size) <= log.head &- pos,
          loc + rh.size <= log.base + log.size
        else {
          problem(&r, "\(id) log: bad record at position \(pos)")
          broken.append(id)
          break
        }
        pos &+= UInt64(rh.size)
        records += 1
        if records > log.size / 8 {
          problem(&r, "\(id) log: record chain does not end")
          broken.append(id)
          break
        }
      }
      r.recordsChecked += records
    }
    return (states, broken)
  }

  /// Step 2: every slot. Counts the entries that pass into `r`; returns the slots to drop
  /// and the moved slot whose odd sequence to finish.
  private func checkSlots(
    _ r: inout VerifyReport, logs states: [LogID: LogState], movedSlot: Int?,
    checksums: Bool
  ) -> (drop: [Int], finishMove: [Int]) {
    var drop: [Int] = []
    var finishMove: [Int] = []
    var seenLocs = Set<Int>()
    for i in 0..<index.slotCount {
      r.slotsChecked += 1
      if index.isMidWrite(i) {
        if i == movedSlot {
          problem(&r, "slot \(i): left mid-move (odd seq), entry kept")
          finishMove.append(i)
        } else {
          problem(&r, "slot \(i): left mid-write (odd seq)")
          drop.append(i)
          continue
        }
      }
      let h = index.hash(at: i)
      if h == 0 { continue }
      switch checkEntry(slot: i, hash: h, logs: states, seen: seenLocs, checksums: checksums) {
      case .success(let (loc, bytes)):
        seenLocs.insert(loc)
        r.entries += 1
        r.liveBytes += bytes
      case .failure(let why):
        problem(&r, "slot \(i): \(why.reason)")
        drop.append(i)
      }
    }
    return (drop, finishMove)
  }

  /// Whether slot `i`'s entry is whole and its own: its record's offset and key+value bytes, or why not.
  private func checkEntry(
    slot i: Int, hash h: UInt64, logs states: [LogID: LogState], seen: Set<Int>,
    checksums: Bool
  ) -> Result<(Int, Int), LayoutProblem> {
    let loc = index.loc(at: i)
    let inline = index.meta(at: i) & Format.inlineBit != 0
    guard let rh = index.memory.recordHeader(at: loc), rh.kind == (inline ? Format.kindHeaderOnly : Format.kindEntry)
    else { return .failure(LayoutProblem("record offset \(loc) is not a valid entry")) }
    let log = states[logs.id(containing: loc)]!
    if !log.holds(loc) || !log.holds(loc + rh.size - 8) {
      return .failure(LayoutProblem("record outside its log's live range"))
    }
    if rh.hash != h { return .failure(LayoutProblem("record belongs to another hash")) }
    if seen.contains(loc) { return .failure(LayoutProblem("record shared with an earlier slot")) }
    return checkValue(slot: i, loc: loc, rh, inline: inline, checksums: checksums).map { (loc, $0) }
  }

  /// The key+value bytes of slot `i`'s entry, or why its value does not match its record.
  /// (An inline entry's record is its header alone, and the value may have been rewritten
  /// in place since, so only the key's length is compared; the key must hash to the
  /// slot's hash, which the caller has matched with the record's.)
  private func checkValue(
    slot i: Int, loc: Int, _ rh: MappedMemory.RecordHeader, inline: Bool,
    checksums: Bool
  ) -> Result<Int, LayoutProblem> {
    if inline {
      guard let l = index.memory.inlineLengths(i), l.klen == rh.klen else {
        return .failure(LayoutProblem("inline lengths disagree with the record"))
      }
      let bytes = index.memory.inlineBytes(i, klen: l.klen, vlen: l.vlen)
      if KeyHash.key(bytes.key) != rh.hash {
        return .failure(LayoutProblem("inline key does not hash to the slot's hash"))
      }
      if checksums, KeyHash.checksum(bytes.value, hash: rh.hash) != index.memory.inlineSum(i) {
        return .failure(LayoutProblem("value checksum mismatch"))
      }
      return .success(l.klen + l.vlen)
    }
    if checksums, KeyHash.checksum(index.memory.recordBytes(loc, rh).value, hash: rh.hash) != rh.sum {
      return .failure(LayoutProblem("value checksum mismatch"))
    }
    return .success(rh.klen + rh.vlen)
  }

  /// Step 3: entries that an empty slot separates from their home (a lookup would miss
  /// them). Also measures the probe distances into `r`.
  private func checkReachability(_ r: inout VerifyReport) -> [Int] {
    let n = index.slotCount
    var out: [Int] = []
    var total = 0
    var count = 0
    r.maxProbe = 0
    for i in 0..<n where index.hash(at: i) != 0 {
      var j = index.home(index.hash(at: i))
      var distance = 0
      while j != i && index.hash(at: j) != 0 && distance < n {
        j = index.next(j)
        distance += 1
      }
      if j != i { out.append(i) }
      r.maxProbe = max(r.maxProbe, distance)
      total += distance
      count += 1
    }
    r.meanProbe = count == 0 ? 0 : Double(total) / Double(count)
    if !out.isEmpty { problem(&r, "\(out.count) entries unreachable from their home slot") }
    return out
  }

  /// Moves each misplaced entry into the first empty slot of its run, closing the hole it
  /// leaves by backward shift (as a removal does). Returns how many it moved.
  private func moveToReachable(_ misplaced: [Int], _ held: borrowing WriteLock.Held) -> Int {
    var moved = 0
    for i in misplaced where index.hash(at: i) != 0 {
      var j = index.home(index.hash(at: i))
      while index.hash(at: j) != 0 && j != i { j = index.next(j) }
      guard j != i else { continue }
      index.copy(from: i, to: j, held)
      index.shiftClear(i, held)
      moved += 1
    }
    return moved
  }

  /// Step 4: whether the header's counts disagree with what step 2 counted. Counts lag
  /// the slots by one write when a writer died between the two (the intent record is
  /// then set), which is not reported as a problem.
  @discardableResult
  private func checkCounts(_ r: inout VerifyReport) -> Bool {
    let entries = counters.value(.entries)
    let live = counters.value(.liveBytes)
    guard counters.count(.entries) != r.entries || counters.count(.liveBytes) != r.liveBytes else { return false }
    if counters.value(.intent) == 0 {
      problem(&r, "counts say \(entries) entries / \(live) bytes, slots hold \(r.entries) / \(r.liveBytes)")
    }
    return true
  }
}
