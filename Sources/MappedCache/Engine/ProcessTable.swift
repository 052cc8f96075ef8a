import Glibc
import Synchronization

/// A process's place in the file's process table: its statistics block and its
/// lock witness. Registration claims a free entry (no live witness) and bumps the
/// entry's generation, folding the previous owner's counters into the retired totals.
enum ProcessTable {
  struct Registration { var slot: Int; var generation: UInt64 }

  static func register(memory: MappedMemory, fd: Int32, procCount: Int) throws(CacheError) -> Registration {
    for attempt in 0..<3 {
      for i in 0..<procCount {
        let byte = WriteLock.witnessBase + Int64(i)
        if Sys.byteIsLocked(fd, at: byte) { continue }
        let locked: Bool
        do { locked = try Sys.lockByte(fd, at: byte) } catch { throw .system(error) }
        guard locked else { continue }
        // Two registrants can both take a shared lock on the byte; whoever sees the
        // other's lock backs off, so at most one keeps the entry.
        if Sys.byteIsLocked(fd, at: byte) {
          Sys.unlockByte(fd, at: byte)
          if attempt > 0 { usleep(UInt32(50 + i % 50)) }
          continue
        }
        let gen = memory.procWord(i, Format.P.generation)
        let old = gen.pointee.load(ordering: .relaxed)
        for (field, retired) in [(Format.P.hits, Format.H.retiredHits), (Format.P.misses, Format.H.retiredMisses),
                                 (Format.P.busy, Format.H.retiredBusy)] {
          let n = memory.procWord(i, field).pointee.exchange(0, ordering: .relaxed)
          memory.word(retired).pointee.wrappingAdd(n, ordering: .relaxed)
        }
        memory.procWord(i, Format.P.pid).pointee.store(UInt64(getpid()), ordering: .relaxed)
        memory.procWord(i, Format.P.openedMs).pointee.store(Sys.wallClockMilliseconds(), ordering: .relaxed)
        gen.pointee.store(old &+ 1, ordering: .releasing)
        return Registration(slot: i, generation: old &+ 1)
      }
    }
    throw .tooManyProcesses(limit: procCount)
  }
}
