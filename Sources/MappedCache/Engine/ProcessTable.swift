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

  /// Claims a free entry for this process, looking from a place drawn from its PID so
  /// that processes starting together mostly look at different entries first.
  static func register(memory: MappedMemory, fd: Int32) throws(CacheError) -> Registration {
    let start = Int(SystemCall.processID()) % memory.procCount
    for attempt in 0..<attempts {
      for k in 0..<memory.procCount {
        let i = (start + k) % memory.procCount
        let byte = WriteLock.witnessBase + Int64(i)
        if SystemCall.byteIsLocked(fd, at: byte) { continue }
        let locked: Bool
        do { locked = try SystemCall.lockByte(fd, at: byte) } catch { throw .system(error) }
        guard locked else { continue }
        // Two registrants can both take a shared lock on the byte; whoever sees the
        // other's lock backs off, so at most one keeps the entry.
        if SystemCall.byteIsLocked(fd, at: byte) {
          SystemCall.unlockByte(fd, at: byte)
          if attempt > 0 { SystemCall.sleep(microseconds: backoffMicroseconds + UInt32(i % 50)) }
          continue
        }
        return claim(i, memory: memory)
      }
    }
    throw .tooManyProcesses(limit: memory.procCount)
  }

  /// Takes entry `i`, whose witness byte this process now holds.
  private static func claim(_ i: Int, memory: MappedMemory) -> Registration {
    let gen = memory.procWord(i, Format.ProcessEntryOffset.generation)
    let old = gen.load(.relaxed)
    let retire: [(Int, HeaderWord)] = [
      (Format.ProcessEntryOffset.hits, .retiredHits), (Format.ProcessEntryOffset.misses, .retiredMisses),
      (Format.ProcessEntryOffset.busy, .retiredBusy),
    ]
    for (field, retired) in retire {
      memory.header(retired).add(memory.procWord(i, field).exchange(0, .relaxed), .relaxed)
    }
    memory.procWord(i, Format.ProcessEntryOffset.pid).store(UInt64(SystemCall.processID()), .relaxed)
    memory.procWord(i, Format.ProcessEntryOffset.openedMs).store(SystemCall.wallClockMilliseconds(), .relaxed)
    gen.store(old &+ 1, .releasing)
    return Registration(slot: i, generation: old &+ 1)
  }

  /// The handle's own counters, in its entry.
  static func counters(of registration: Registration, memory: MappedMemory) -> HandleCounters {
    HandleCounters(
      hits: memory.procWord(registration.slot, Format.ProcessEntryOffset.hits),
      misses: memory.procWord(registration.slot, Format.ProcessEntryOffset.misses),
      busy: memory.procWord(registration.slot, Format.ProcessEntryOffset.busy))
  }
}

/// One registration per file and process: every writable handle a process opens on one
/// file (one inode, whatever the path) shares the first one's process-table entry, its
/// token and its counters, so a process takes one entry however many handles it opens.
///
/// The entry's witness byte is locked through a duplicate of the registering handle's
/// descriptor (`Shared`), closed when the last handle sharing the entry is gone, whichever
/// closes first: the entry stays alive exactly as long as some handle of the process
/// uses it, and the kernel still drops it when the process dies. A child of fork() finds
/// its parent's registrations (another PID) and registers afresh on first open; a file
/// replaced at the path is another inode, so another registration.
enum ProcessRegistrations {
  /// A registration and the descriptor that holds its witness.
  final class Shared: Sendable {
    let registration: ProcessTable.Registration
    let processID: Int32
    private let witnessFD: Int32

    fileprivate init(_ registration: ProcessTable.Registration, witnessFD: Int32) {
      self.registration = registration
      processID = SystemCall.processID()
      self.witnessFD = witnessFD
    }

    deinit { SystemCall.close(witnessFD) }
  }

  private struct FileID: Hashable {
    var device: UInt64
    var inode: UInt64
  }

  private struct Entry {
    weak var shared: Shared?
  }

  private static let table = SeenMutex([FileID: Entry]())

  /// This process's registration in `file`'s process table: the one its other handles on
  /// the file share, or a new one. A new one first releases the lock words the entry's
  /// previous owner left (`WriteLock.releaseWordsLeftBySlotsLastOwner`), before any
  /// handle of this process can hold one.
  static func register(file: MappedFile, memory: MappedMemory) throws(CacheError) -> Shared {
    let id = FileID(device: file.device, inode: file.inode)
    let pid = SystemCall.processID()
    return try table.withLock { (entries: inout [FileID: Entry]) throws(CacheError) -> Shared in
      if let shared = entries[id]?.shared, shared.processID == pid { return shared }
      let witness: Int32
      do throws(SystemError) { witness = try SystemCall.duplicate(file.fd) } catch { throw .system(error) }
      let registration: ProcessTable.Registration
      do throws(CacheError) {
        registration = try ProcessTable.register(memory: memory, fd: witness)
      } catch {
        SystemCall.close(witness)
        throw error
      }
      WriteLock.releaseWordsLeftBySlotsLastOwner(slot: registration.slot, memory: memory)
      let shared = Shared(registration, witnessFD: witness)
      entries = entries.filter { $0.value.shared != nil }
      entries[id] = Entry(shared: shared)
      return shared
    }
  }
}
