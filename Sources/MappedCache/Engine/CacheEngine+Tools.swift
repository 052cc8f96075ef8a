import SystemCalls

/// Read-mostly helpers for operators' tools (`CacheFile`, the `mapped-cache` command):
/// figures that `statistics()` does not carry.
extension CacheEngine {
  /// Shape of the index, read without the locks (each tag is one atomic load, so the
  /// figures are a consistent-enough snapshot for a report, not an audit; `verify` gives
  /// exact ones under the locks).
  struct TableShape {
    var slots = 0
    var occupied = 0
    /// Occupied slots whose entry sits in its key's second place (its first was full).
    var inSecondPlace = 0
    var groups = 0
  }

  func tableShape() -> TableShape {
    var t = TableShape()
    for p in 0..<currentPartitionCount {
      let part = partition(p)
      let groups = part.index.geometryRelaxed().groups
      guard part.memory.isValidGroupCount(groups) else { continue }
      t.groups += groups
      t.slots += groups * Format.slotsPerGroup
      part.index.forEachSlot(groups: groups) { at in
        guard let e = part.index.entry(at: at) else { return }
        t.occupied += 1
        if part.index.placement(of: e, groups: groups).placement.first != at.place { t.inSecondPlace += 1 }
      }
    }
    return t
  }

  /// The background sweeper's next slot in partition 0 (`removeExpired(maxSlots:)`
  /// advances each partition's hand).
  var sweeperSlot: Int { Int(truncatingIfNeeded: partition(0).counters.value(.sweepHand) & 0xFFFF_FFFF) }

  /// One process-table entry whose owner is alive (its witness byte is locked).
  struct AttachedProcess {
    var slot: Int
    var pid: Int
    var openedMs: UInt64
  }

  /// Processes that have the file open for writing now. This handle's own entry is not
  /// listed (a process cannot see its own lock through its own descriptor). Entries never
  /// registered (generation 0) are passed over without a system call: most of a large
  /// table.
  func attachedProcesses() -> [AttachedProcess] {
    var out: [AttachedProcess] = []
    for i in 0..<layout.procCount where i != registration?.slot {
      guard memory.procWord(i, Format.ProcessEntryOffset.generation).load(.acquiring) != 0,
        SystemCall.byteIsLocked(file.fd, at: WriteLock.witnessBase + Int64(i))
      else { continue }
      out.append(attachedProcess(slot: i))
    }
    return out
  }

  /// What process-table entry `slot` says of its owner (the caller checked it is alive).
  func attachedProcess(slot: Int) -> AttachedProcess {
    AttachedProcess(
      slot: slot,
      pid: Int(truncatingIfNeeded: memory.procWord(slot, Format.ProcessEntryOffset.pid).load(.relaxed) & 0x7FFF_FFFF),
      openedMs: memory.procWord(slot, Format.ProcessEntryOffset.openedMs).load(.relaxed))
  }

  /// A live process whose token is in a partition's lock word now, if any: a diagnostic
  /// (a stopped or stuck holder keeps that partition's writers waiting, and is never
  /// taken over while alive). Nil when every word is free, names this handle (its own
  /// threads), or names a holder that is gone, which the next writer takes over.
  func writeLockHolder() -> AttachedProcess? {
    for p in 0..<currentPartitionCount {
      if let holder = writeLockHolder(partition: p) { return holder }
    }
    return nil
  }

  /// `writeLockHolder()` for partition `p`'s lock alone.
  func writeLockHolder(partition p: Int) -> AttachedProcess? {
    guard let slot = Liveness(memory: memory, fd: file.fd, asker: .none).liveHolder(p), slot != registration?.slot
    else { return nil }
    return attachedProcess(slot: slot)
  }

  // MARK: Tier words (`SharedCache+Tiers`)

  /// The header words reserved for tiers (`Format.HeaderOffset.tierWords`): plain shared words with
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
