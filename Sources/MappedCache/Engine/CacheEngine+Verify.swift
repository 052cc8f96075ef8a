import Synchronization

extension CacheEngine {
  /// Checks every invariant of the file; with `repair`, fixes what it finds by dropping
  /// what cannot be trusted (entries are a cache's to lose; the file must stay usable).
  /// Precondition with `repair`: the caller holds the write lock.
  ///
  /// Checked: both logs' head/tail; each log's record chain from tail to head; each
  /// slot's seq (even), record (in its log's live range, a well-formed entry whose hash
  /// matches), checksum (with `checksums`), uniqueness of its record, reachability from
  /// its home slot (no empty slot between); the entry and byte counts.
  func check(repair: Bool, checksums: Bool) -> VerifyReport {
    var r = VerifyReport()
    func problem(_ s: String) { if r.problems.count < 100 { r.problems.append(s) } else if r.problems.count == 100 { r.problems.append("…") } }

    // 1. Logs.
    var logs: [LogID: LogState] = [:]
    for id in [LogID.small, .main] {
      var log = logState(id)
      var chainOK = log.isSane
      if !log.isSane {
        problem("\(id) log: head \(log.head) / tail \(log.tail) out of range")
      } else {
        var pos = log.tail
        var records = 0
        while pos < log.head {
          let loc = log.offset(pos)
          guard let rh = memory.recordHeader(at: loc), UInt64(rh.size) <= log.head &- pos,
                loc + rh.size <= log.base + log.size else {
            problem("\(id) log: bad record at position \(pos)")
            chainOK = false
            break
          }
          pos &+= UInt64(rh.size)
          records += 1
          if records > log.size / 8 { chainOK = false; problem("\(id) log: record chain does not end"); break }
        }
        r.recordsChecked += records
      }
      if !chainOK && repair {
        // Forget the whole log: its slots fail the range check below and are dropped.
        let f = fields(id)
        store(f.head, 0)
        store(f.tail, 0)
        log.head = 0
        log.tail = 0
        r.repaired += 1
      }
      logs[id] = log
    }

    // 2. Slots.
    let n = layout.slotCount
    let shift = memory.word(Format.H.shiftSeq)
    if repair {
      if shift.pointee.load(ordering: .relaxed) & 1 != 0 { shift.pointee.wrappingAdd(1, ordering: .relaxed) }
      shift.pointee.wrappingAdd(1, ordering: .relaxed)
    }
    defer { if repair { shift.pointee.wrappingAdd(1, ordering: .releasing) } }
    var seenLocs = Set<Int>()
    var entries = 0, live = 0
    var misplaced: [Int] = []
    // A slot a dead writer left odd inside a move names a whole copy of its entry either
    // way (`moveSlot`): it is kept, then checked like any other. Only when repairing
    // (under the lock, so the move is a dead writer's). The intent record is reset by
    // the caller after the repair, so a repair killed midway leaves it to the next one.
    let intent = load(Format.H.intent)
    let moved = repair && intent >= Format.intentMoveBase
      ? Int(truncatingIfNeeded: intent &- Format.intentMoveBase) : -1
    for i in 0..<n {
      r.slotsChecked += 1
      let seq = memory.slot(i, Format.S.seq)
      if seq.pointee.load(ordering: .relaxed) & 1 != 0 {
        if i == moved {
          problem("slot \(i): left mid-move (odd seq), entry kept")
          seq.pointee.wrappingAdd(1, ordering: .releasing)
          r.repaired += 1
        } else {
          problem("slot \(i): left mid-write (odd seq)")
          if repair {
            seq.pointee.wrappingAdd(1, ordering: .relaxed)
            writeSlot(i, hash: 0, loc: 0, meta: 0)
            r.repaired += 1
          }
          continue
        }
      }
      let h = slotHash(i)
      if h == 0 { continue }
      let loc = slotLoc(i)
      var why: String? = nil
      let inline = slotMeta(i) & Format.inlineBit != 0
      if let rh = memory.recordHeader(at: loc), rh.kind == (inline ? Format.kindHeaderOnly : Format.kindEntry) {
        let log = logs[logID(of: loc)]!
        if !log.holds(loc) || !log.holds(loc + rh.size - 8) {
          why = "record outside its log's live range"
        } else if rh.hash != h {
          why = "record belongs to another hash"
        } else if seenLocs.contains(loc) {
          why = "record shared with an earlier slot"
        } else {
          switch checkValue(slot: i, loc: loc, rh, inline: inline, checksums: checksums) {
          case .failure(let problem):
            why = problem.reason
          case .success(let bytes):
            seenLocs.insert(loc)
            entries += 1
            live += bytes
          }
        }
      } else {
        why = "record offset \(loc) is not a valid entry"
      }
      if let why {
        problem("slot \(i): \(why)")
        if repair {
          writeSlot(i, hash: 0, loc: 0, meta: 0)
          r.repaired += 1
        }
      }
    }
    // Reachability, after every repair above: no empty slot between an entry's home and it.
    func unreachable() -> [Int] {
      var out: [Int] = []
      r.maxProbe = 0
      r.meanProbe = 0
      for i in 0..<n where slotHash(i) != 0 {
        var j = memory.home(slotHash(i)), distance = 0
        while j != i && slotHash(j) != 0 && distance < n { j = memory.next(j); distance += 1 }
        if j != i { out.append(i) }
        r.maxProbe = max(r.maxProbe, distance)
        r.meanProbe += Double(distance)
      }
      return out
    }
    misplaced = unreachable()
    if !misplaced.isEmpty {
      problem("\(misplaced.count) entries unreachable from their home slot")
      // Move each into the first empty slot of its run, closing the hole it leaves by
      // backward shift (as a removal does), until every entry is reachable.
      var passes = 0
      while repair && !misplaced.isEmpty && passes < 64 {
        passes += 1
        for i in misplaced where slotHash(i) != 0 {
          var j = memory.home(slotHash(i))
          while slotHash(j) != 0 && j != i { j = memory.next(j) }
          guard j != i else { continue }
          copySlot(from: i, to: j)
          shiftClear(i)
          r.repaired += 1
        }
        misplaced = unreachable()
      }
    }
    if entries > 0 { r.meanProbe /= Double(entries) }
    r.entries = entries
    r.liveBytes = live
    if loadCount(Format.H.entries) != entries || loadCount(Format.H.liveBytes) != live {
      // Counts lag the slots by one write when a writer died between the two.
      if load(Format.H.intent) == 0 {
        problem("counts say \(load(Format.H.entries)) entries / \(load(Format.H.liveBytes)) bytes, slots hold \(entries) / \(live)")
      }
      if repair {
        store(Format.H.entries, UInt64(entries))
        store(Format.H.liveBytes, UInt64(live))
        r.repaired += 1
      }
    }
    return r
  }

  /// The key+value bytes of slot `i`'s entry, or why its value does not match its record.
  /// (An inline entry's record is its header alone, and the value may have been rewritten
  /// in place since, so only the key's length is compared; the key must hash to the
  /// slot's hash, which the caller has matched with the record's.)
  private func checkValue(slot i: Int, loc: Int, _ rh: MappedMemory.RecordHeader, inline: Bool,
                          checksums: Bool) -> Result<Int, LayoutProblem> {
    if inline {
      guard let l = memory.inlineLengths(i), l.klen == rh.klen else {
        return .failure(LayoutProblem("inline lengths disagree with the record"))
      }
      let bytes = memory.inlineBytes(i, klen: l.klen, vlen: l.vlen)
      if KeyHash.key(bytes.key) != rh.hash { return .failure(LayoutProblem("inline key does not hash to the slot's hash")) }
      if checksums, KeyHash.checksum(bytes.value, hash: rh.hash) != memory.inlineSum(i) {
        return .failure(LayoutProblem("value checksum mismatch"))
      }
      return .success(l.klen + l.vlen)
    }
    if checksums, KeyHash.checksum(memory.recordBytes(loc, rh).value, hash: rh.hash) != rh.sum {
      return .failure(LayoutProblem("value checksum mismatch"))
    }
    return .success(rh.klen + rh.vlen)
  }

  /// `check`, consistent and able to repair. It first checks without the lock (writers
  /// go on; a whole check of a 64 MiB cache takes about 0.1 s), and takes the lock for a
  /// second, exact pass (and the repair) only if that found something: a write landing
  /// mid-scan can look like damage, so only a problem seen under the lock is reported.
  func verify(repair: Bool) throws -> VerifyReport {
    guard lock != nil else {
      // A repair is a write: a read-only handle refuses it rather than skip it silently.
      if repair { throw CacheError.readOnly(path: path) }
      return check(repair: false, checksums: true)
    }
    // A healthy cache is confirmed without blocking anyone, even when asked to repair:
    // the lock (held for a whole pass) is taken only for a file that needs it.
    let unlocked = check(repair: false, checksums: true)
    if unlocked.ok { return unlocked }
    return try lock!.withLock { _ in
      let r = check(repair: repair, checksums: true)
      if repair { store(Format.H.intent, 0) }
      return r
    }
  }
}
