import SystemCalls

/// Read-mostly helpers for operators' tools (`CacheFile`, the `mapped-cache` command):
/// figures that `statistics()` does not carry.
extension CacheEngine {
  /// Shape of the index, read without the lock (each slot's hash word is one atomic
  /// load, so the figures are a consistent-enough snapshot for a report, not an audit;
  /// `verify` gives exact ones under the lock).
  struct TableShape {
    var occupied = 0
    /// Sum and maximum, over occupied slots, of the distance from the key's home slot.
    var totalProbe = 0
    var maxProbe = 0
    /// Longest run of consecutive occupied slots (a lookup miss scans at most this far).
    var longestRun = 0
  }

  func tableShape() -> TableShape {
    let n = layout.slotCount
    var t = TableShape()
    var run = 0
    var leadingRun = -1  // length of the run that starts at slot 0, joined to the one that wraps
    for i in 0..<n {
      let h = index.hash(at: i)
      if h == 0 {
        if leadingRun < 0 { leadingRun = run }
        t.longestRun = max(t.longestRun, run)
        run = 0
        continue
      }
      run += 1
      t.occupied += 1
      let d = index.distanceFromHome(i, hash: h)
      t.totalProbe += d
      t.maxProbe = max(t.maxProbe, d)
    }
    // A run that reaches the last slot continues at slot 0.
    t.longestRun = max(t.longestRun, leadingRun < 0 ? run : min(n, run + leadingRun))
    return t
  }

  /// The background sweeper's next slot (`removeExpired(maxSlots:)` advances it).
  var sweeperSlot: Int { Int(truncatingIfNeeded: counters.value(.sweepHand) % UInt64(layout.slotCount)) }

  /// One process-table entry whose owner is alive (its witness byte is locked).
  struct AttachedProcess {
    var slot: Int
    var pid: Int
    var openedMs: UInt64
  }

  /// Processes that have the file open for writing now. This handle's own entry is not
  /// listed (a process cannot see its own lock through its own descriptor).
  func attachedProcesses() -> [AttachedProcess] {
    var out: [AttachedProcess] = []
    for i in 0..<layout.procCount where i != registration?.slot {
      guard Sys.byteIsLocked(file.fd, at: WriteLock.witnessBase + Int64(i)) else { continue }
      out.append(attachedProcess(slot: i))
    }
    return out
  }

  /// What process-table entry `slot` says of its owner (the caller checked it is alive).
  private func attachedProcess(slot: Int) -> AttachedProcess {
    AttachedProcess(
      slot: slot,
      pid: Int(truncatingIfNeeded: memory.procWord(slot, Format.P.pid).load(.relaxed) & 0x7FFF_FFFF),
      openedMs: memory.procWord(slot, Format.P.openedMs).load(.relaxed))
  }

  /// The live process whose token is in the lock word now, if any: a diagnostic (a
  /// stopped or stuck holder keeps every writer waiting, and is never taken over while
  /// alive). Nil when the word is free, names this handle (its own threads), or names a
  /// holder that is gone, which the next writer takes over.
  func writeLockHolder() -> AttachedProcess? {
    let word = memory.lockWord.load(.acquiring)
    let slot = Int(word & Format.Lock.ownerMask) - 1
    guard slot >= 0, slot < layout.procCount, slot != registration?.slot else { return nil }
    guard !Liveness(memory: memory, fd: file.fd, asker: .none).holderIsDead(word) else { return nil }
    return attachedProcess(slot: slot)
  }

  // MARK: Tier words (`SharedCache+Tiers`)

  /// The header words reserved for tiers (`Format.H.tierWords`): plain shared words with
  /// acquire/release ordering, outside every lock. Indices are checked by the caller.
  func tierWord(_ i: Int) -> UInt64 { memory.header(.tier(i)).load(.acquiring) }

  func storeTierWord(_ i: Int, _ value: UInt64) throws(CacheError) {
    guard writable else { throw .readOnly(path: path) }
    memory.header(.tier(i)).store(value, .releasing)
  }

  func compareExchangeTierWord(_ i: Int, expected: UInt64, desired: UInt64) throws(CacheError) -> Bool {
    guard writable else { throw .readOnly(path: path) }
    return memory.header(.tier(i)).compareExchange(expected: expected, desired: desired, .acquiringAndReleasing)
  }
}
