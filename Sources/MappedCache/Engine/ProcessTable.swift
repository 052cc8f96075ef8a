import Synchronization
import SystemCalls

/// A process's place in the file's process table: its statistics block and its lock
/// witness. Registration claims a free entry (no live witness) and bumps the entry's
/// generation, folding the previous owner's counters into the retired totals.
///
/// Entry words (`Format.P`): generation (bumped at each registration, release), pid and
/// open time (for `mapped-cache`), and the owner's hit, miss and busy-miss counters
/// (written only by the owner, relaxed; summed by `statistics()`).
enum ProcessTable {
  struct Registration {
    var slot: Int
    var generation: UInt64
  }

  /// Registrants that both took the same witness byte back off for this long (plus a
  /// slot-dependent jitter) before trying the next entries again.
  static let backoffMicroseconds: UInt32 = 50
  static let attempts = 3

  static func register(memory: MappedMemory, fd: Int32) throws(CacheError) -> Registration {
    for attempt in 0..<attempts {
      for i in 0..<memory.procCount {
        let byte = WriteLock.witnessBase + Int64(i)
        if Sys.byteIsLocked(fd, at: byte) { continue }
        let locked: Bool
        do { locked = try Sys.lockByte(fd, at: byte) } catch { throw .system(error) }
        guard locked else { continue }
        // Two registrants can both take a shared lock on the byte; whoever sees the
        // other's lock backs off, so at most one keeps the entry.
        if Sys.byteIsLocked(fd, at: byte) {
          Sys.unlockByte(fd, at: byte)
          if attempt > 0 { Sys.sleep(microseconds: backoffMicroseconds + UInt32(i % 50)) }
          continue
        }
        return claim(i, memory: memory)
      }
    }
    throw .tooManyProcesses(limit: memory.procCount)
  }

  /// Takes entry `i`, whose witness byte this process now holds.
  private static func claim(_ i: Int, memory: MappedMemory) -> Registration {
    let gen = memory.procWord(i, Format.P.generation)
    let old = gen.load(.relaxed)
    let retire: [(Int, HeaderWord)] = [
      (Format.P.hits, .retiredHits), (Format.P.misses, .retiredMisses),
      (Format.P.busy, .retiredBusy),
    ]
    for (field, retired) in retire {
      memory.header(retired).add(memory.procWord(i, field).exchange(0, .relaxed), .relaxed)
    }
    memory.procWord(i, Format.P.pid).store(UInt64(Sys.processID()), .relaxed)
    memory.procWord(i, Format.P.openedMs).store(Sys.wallClockMilliseconds(), .relaxed)
    gen.store(old &+ 1, .releasing)
    return Registration(slot: i, generation: old &+ 1)
  }

  /// The handle's own counters, in its entry.
  static func counters(of registration: Registration, memory: MappedMemory) -> HandleCounters {
    HandleCounters(
      hits: memory.procWord(registration.slot, Format.P.hits),
      misses: memory.procWord(registration.slot, Format.P.misses),
      busy: memory.procWord(registration.slot, Format.P.busy))
  }
}
