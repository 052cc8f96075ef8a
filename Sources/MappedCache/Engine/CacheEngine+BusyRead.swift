import SystemCalls

/// R7, a read's last resort: what happens when a bucket of the key stayed odd past the
/// bounded wait (`Reader.backoff`) and `Reader.locate` answered "busy". The bucket's
/// writer, named by its partition's lock word, is one of:
///
/// - **dead** (the word names a process whose witness is gone, or is free with the
///   intent word set: its holder died mid-change). Nothing finishes the bucket until a
///   writer takes the lock over and repairs; in a partition that is read but rarely
///   written that could be long, and until then every read of the bucket's keys would
///   miss. So a writable handle takes the word itself, without waiting
///   (`WriteLock.tryAcquireWord`: only a free word or a dead holder's), repairs as a
///   writer would at W1, and reads again. A read-only handle cannot: its read misses.
/// - **stopped** (`T` or `t` in `/proc/PID/stat`: SIGSTOP, a debugger): it may never go
///   on, so the read misses (each read of the bucket pays one bounded wait).
/// - **anything else** (descheduled on a busy machine, or dying: a killed holder keeps
///   its witness until its exit has closed its files): the read waits again, up to
///   `busySettleRounds` bounded waits in all, before it answers "miss".
///
/// Only reads that found a bucket busy get here: the system calls (`F_OFD_GETLK`,
/// reading `/proc`) and the lock stay off every other read.
extension CacheEngine {
  /// Bounded waits a read makes on a busy bucket whose writer is alive and not stopped,
  /// after the first: each as long as `Reader.backoff`'s, so a read that finds a live
  /// writer stalled still answers soon.
  static let busySettleRounds = 4

  /// `Reader.locate`, with R7 when it answers "busy".
  @inline(__always)
  func locate(_ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer)
    -> Reader.Located
  {
    let found = reader.locate(key, hash: hash, into: buffer)
    if case .busy = found { return locateAfterBusy(key, hash: hash, into: buffer) }
    return found
  }

  /// `locate` with its misses counted (an absent key as a miss, a bucket that stayed busy
  /// apart): what a read that answers -1 for both does first.
  @inline(__always)
  func locateCountingMisses(
    _ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer
  ) -> Reader.Located {
    let found = locate(key, hash: hash, into: buffer)
    switch found {
    case .absent: reader.countMiss()
    case .busy: reader.countBusyMiss()
    case .found: break
    }
    return found
  }

  /// A judged read's answer to its caller, counted: on a hit what `served` makes of it (the
  /// value's length), the length a larger buffer needs, or -1 on a miss (a damaged entry
  /// is one; a bucket that stayed busy is counted apart).
  @inline(__always)
  func answer(_ outcome: Reader.Probe, served: (EntryInfo) -> Int) -> Int {
    switch outcome {
    case .hit(let info):
      reader.countHit()
      return served(info)
    case .needs(let n):
      return n
    case .miss, .corrupt:
      reader.countMiss()
      return -1
    case .busy:
      reader.countBusyMiss()
      return -1
    }
  }

  /// R1-R7 for any entry, judged (`Reader.judge`): the read every general read is.
  @inline(__always)
  func probe(
    _ key: UnsafeRawBufferPointer, hash: UInt64, allowExpired: Bool = false,
    into buffer: UnsafeMutableRawBufferPointer
  ) -> Reader.Probe {
    switch locate(key, hash: hash, into: buffer) {
    case .absent: return .miss
    case .busy: return .busy
    case .found(let e, let p):
      return reader.judge(e, partition: p, hash: hash, now: 0, allowExpired: allowExpired, buffer: buffer)
    }
  }

  /// R7: settles the busy bucket's writer and reads again, while that can help.
  @inline(never)
  private func locateAfterBusy(
    _ key: UnsafeRawBufferPointer, hash: UInt64, into buffer: UnsafeMutableRawBufferPointer
  ) -> Reader.Located {
    for _ in 0..<Self.busySettleRounds {
      guard settleBusyWriter(of: partitionNumber(hash)) else { break }
      let found = reader.locate(key, hash: hash, into: buffer)
      if case .busy = found { continue }
      return found
    }
    return .busy
  }

  /// Whether a read that found partition `p` busy should look again: its dead holder's
  /// change is repaired (a writable handle), or its holder is alive and not stopped.
  func settleBusyWriter(of p: Int) -> Bool {
    guard let slot = reader.liveness.liveHolder(p) else { return repairAbandoned(p) }
    let state = SystemCall.processState(Int32(truncatingIfNeeded: attachedProcess(slot: slot).pid))
    return state != UInt8(ascii: "T") && state != UInt8(ascii: "t")
  }

  /// Takes partition `p`'s word if it is free or its holder is dead, and repairs what that
  /// holder left as W1 would (`Partition.needsRepair`). Returns whether a read should look
  /// again: false only for a read-only handle. Growth in flight is left to writers
  /// (`splitInFlight`).
  private func repairAbandoned(_ p: Int) -> Bool {
    guard let lock else { return false }
    // A live writer took the word meanwhile: it repairs first (W1), and the read waits.
    guard let part = lock.tryAcquireWord(p) else { return true }
    defer { lock.releaseWord(p) }
    // Nothing to repair: a writer finished (or repaired) since, or the odd bucket is
    // damage that `verify(repair:)` mends; the read looks again and, still odd, misses.
    guard part.needsRepair(), !splitInFlight(of: p) else { return true }
    repair(part)
    part.memory.word(.intent).store(0, .relaxed)
    return true
  }
}
