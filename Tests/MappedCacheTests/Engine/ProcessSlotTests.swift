import Foundation
import Glibc
import SystemCalls
import TestSupport
import Testing

@testable import MappedCache

/// The process table at fleet scale: the handles one process opens on one file share one
/// entry (refcounted: the witness lasts until the last of them closes), a file replaced
/// at the path is another registration, the lock word's owner field widens past 1,000
/// entries, the default table holds a fleet of 4,096, and 1,000 processes (small C
/// programs over the ABI, Tests/CABI/fleet.c) open one file at once with the defaults.
@Suite struct ProcessSlotTests {
  /// Whether another open file description holds entry `slot`'s witness of the file at
  /// `path` (asked through a descriptor of its own, as another process would).
  static func witnessHeld(_ path: String, slot: Int) -> Bool {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    defer { close(fd) }
    return fd >= 0 && SystemCall.byteIsLocked(fd, at: WriteLock.witnessBase + Int64(slot))
  }

  /// Waits up to 5 s for `condition`: a child another test spawns holds copies of this
  /// process's descriptors (and so their locks) until it execs.
  static func eventually(_ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(5)
    while !condition() {
      if Date() > deadline { return false }
      usleep(2000)
    }
    return true
  }

  /// With a table of one entry, 300 handles on the path and one through a hard link all
  /// write; threads writing through four of them at once exclude each other (one token,
  /// one lock word); another registration (as another process would make) is refused
  /// with an error that names the option sizing the table.
  @Test func handlesOfOneProcessShareOneEntry() throws {
    let path = TestFiles.tempPath("slot-share")
    let link = path + ".link"
    defer {
      TestFiles.cleanup(path)
      unlink(link)
    }
    var o = CacheOptions(capacity: 1 << 20)
    o.maxProcesses = 1
    let first = try SharedCache<Int>(path: path, capacity: 1 << 20, options: o)
    try #require(Glibc.link(path, link) == 0)
    let handles = try (0..<300).map { _ in try SharedCache<Int>(path: path) } + [try SharedCache<Int>(path: link)]
    let registration = try #require(first.engine.registration)
    for (i, h) in handles.enumerated() {
      #expect(h.engine.registration?.slot == registration.slot)
      #expect(h.engine.registration?.generation == registration.generation)
      try h.setObject(i, forKey: "h\(i)")
    }
    #expect(try (0..<handles.count).allSatisfy { try first.object(forKey: "h\($0)") == $0 })
    let perThread = 2000
    DispatchQueue.concurrentPerform(iterations: 4) { t in
      for _ in 0..<perThread { _ = try? handles[t * 70].increment(forKey: "n") }
    }
    #expect(try first.object(forKey: "n") == 4 * perThread)
    #expect(first.statistics.lockTakeovers == 0)

    let fd = open(path, O_RDWR | O_CLOEXEC)
    defer { close(fd) }
    #expect(throws: CacheError.tooManyProcesses(limit: 1)) {
      _ = try ProcessTable.register(memory: first.engine.memory, fd: fd)
    }
    let message = CacheError.tooManyProcesses(limit: 1).description
    #expect(message.contains("maxProcesses") && message.contains("max_processes"), "\(message)")
    #expect(try first.verify().ok)
  }

  /// A thread of this process holding every partition's lock through one handle is a
  /// live holder to a thread writing through another handle (the same token): the writer
  /// waits, far past its 2 ms looks at the holder, never takes the lock over, and writes
  /// once the holder lets go.
  @Test func aLockHeldThroughOneHandleIsWaitedForThroughAnother() throws {
    let path = TestFiles.tempPath("slot-held")
    defer { TestFiles.cleanup(path) }
    let holder = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    let writer = try SharedCache<[UInt8]>(path: path)
    #expect(writer.engine.registration?.slot == holder.engine.registration?.slot)
    let wrote = CoreFlag()
    try holder.engine._holdWriteLock(oddKey: nil) {
      Thread.detachNewThread {
        _ = try? writer.setObject([9], forKey: "late")
        wrote.set()
      }
      usleep(200_000)
      #expect(!wrote.value, "a write went through while another handle of the process held the lock")
    }
    #expect(Self.eventually { wrote.value })
    #expect(try holder.object(forKey: "late") == [9])
    #expect(holder.statistics.lockTakeovers == 0)
    #expect(try holder.verify().ok)
  }

  /// The entry's witness outlives the handle that registered it while another handle
  /// shares it, and goes with the last one; the next handle then registers afresh.
  @Test func theEntryLivesUntilItsLastHandleCloses() throws {
    let path = TestFiles.tempPath("slot-last")
    defer { TestFiles.cleanup(path) }
    var a: SharedCache<[UInt8]>? = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    var b: SharedCache<[UInt8]>? = try SharedCache<[UInt8]>(path: path)
    let registration = try #require(a?.engine.registration)
    #expect(Self.witnessHeld(path, slot: registration.slot))
    a = nil
    #expect(Self.witnessHeld(path, slot: registration.slot), "closing the registering handle dropped the witness")
    try b?.setObject([1], forKey: "k")
    b = nil
    #expect(Self.eventually { !Self.witnessHeld(path, slot: registration.slot) }, "the last close kept the witness")
    let c = try SharedCache<[UInt8]>(path: path)
    #expect(c.engine.registration.map { $0.generation > registration.generation } == true)
    #expect(try c.object(forKey: "k") == [1])
  }

  /// A file replaced at the path (a new inode) gets a registration of its own: the
  /// handle on it is witnessed in its own table, whose one entry it then holds.
  @Test func aFileReplacedAtThePathIsAnotherRegistration() throws {
    let path = TestFiles.tempPath("slot-replaced")
    let other = TestFiles.tempPath("slot-replacement")
    defer { TestFiles.cleanup(path, other) }
    var o = CacheOptions(capacity: 1 << 20)
    o.maxProcesses = 1
    let old = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, options: o)
    _ = try SharedCache<[UInt8]>(path: other, capacity: 1 << 20, options: o)
    try #require(rename(other, path) == 0)
    let new = try SharedCache<[UInt8]>(path: path)
    #expect(new.engine.file.inode != old.engine.file.inode)
    let slot = try #require(new.engine.registration?.slot)
    #expect(Self.witnessHeld(path, slot: slot))
    try new.setObject([2], forKey: "new")
    try old.setObject([1], forKey: "old")
    #expect(try new.object(forKey: "old") == nil && (try old.object(forKey: "new")) == nil)
    #expect(try new.verify().ok && (try old.verify().ok))
  }

  /// Up to 1,000 entries the owner field is 10 bits (every file made before), past that
  /// 14; in a table of 8,192 a word naming slot 5,000 (or 6,000) is read as that slot: dead while
  /// its witness is free, alive while held, and a writer takes a dead one's word over.
  @Test func wideLockWordsNameSlotsPastAThousand() throws {
    let narrow = Format.Lock(procCount: 1000)
    #expect(narrow.ownerMask == 0x3FF && narrow.generationShift == 10 && narrow.generationMask == 0xF_FFFF)
    let wide = Format.Lock(procCount: 1001)
    #expect(wide.ownerMask == 0x3FFF && wide.generationShift == 14 && wide.generationMask == 0xFFFF)
    #expect(wide.token(slot: 5000, generation: 0x1_2345) == 5001 | 0x2345 << 14)

    let path = TestFiles.tempPath("slot-wide")
    defer { TestFiles.cleanup(path) }
    var o = CacheOptions(capacity: 4 << 20)
    o.maxProcesses = 8192
    o.partitionCount = 1
    let cache = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20, options: o)
    let memory = cache.engine.memory
    #expect(memory.procCount == 8192 && memory.lockBits.ownerMask == 0x3FFF)
    // A slot past 1,023, not this handle's own.
    let slot = cache.engine.registration?.slot == 5000 ? 6000 : 5000
    memory.procWord(slot, Format.ProcessEntryOffset.generation).store(7, .releasing)
    let token = memory.lockBits.token(slot: slot, generation: 7)
    let liveness = Liveness(memory: memory, fd: cache.engine.file.fd, asker: .none)
    #expect(liveness.holderIsDead(token), "no witness: dead")
    let fd = open(path, O_RDWR | O_CLOEXEC)
    defer { close(fd) }
    #expect(try SystemCall.lockByte(fd, at: WriteLock.witnessBase + Int64(slot)))
    #expect(!liveness.holderIsDead(token), "its witness is held: alive")
    #expect(liveness.holderIsDead(memory.lockBits.token(slot: slot, generation: 8)), "another generation: dead")
    SystemCall.unlockByte(fd, at: WriteLock.witnessBase + Int64(slot))
    // A dead owner's word, planted: the next set takes it over.
    memory.partition(0).lockWord.store(token, .releasing)
    let before = cache.statistics.lockTakeovers
    try cache.setObject([1], forKey: "k")
    #expect(cache.statistics.lockTakeovers == before + 1)
    #expect(memory.partition(0).lockWord.load(.acquiring) == 0)
    #expect(try cache.object(forKey: "k") == [1] && (try cache.verify().ok))
  }

  /// The default table holds 8,192 processes from 32 MiB up (256 below), a table opens
  /// again at any size up to 16,383, and a larger one is refused before a file exists.
  @Test func theDefaultTableHoldsTheLargestFleets() throws {
    #expect(try Layout(options: CacheOptions()).procCount == 8192)
    #expect(try Layout(options: CacheOptions(capacity: 32 << 20)).procCount == 8192)
    #expect(try Layout(options: CacheOptions(capacity: 16 << 20)).procCount == 256)
    let path = TestFiles.tempPath("slot-largest")
    defer { TestFiles.cleanup(path) }
    var o = CacheOptions(capacity: 8 << 20)
    o.maxProcesses = 16384
    #expect(throws: CacheError.invalidArgument("maxProcesses 16384 must be between 1 and 16383")) {
      _ = try SharedCache<[UInt8]>(path: path, capacity: 8 << 20, options: o)
    }
    #expect(access(path, F_OK) != 0, "a refused creation left a file")
    o.maxProcesses = 16383
    _ = try SharedCache<[UInt8]>(path: path, capacity: 8 << 20, options: o)
    let again = try SharedCache<[UInt8]>(path: path)
    #expect(again.engine.layout.procCount == 16383)
    try again.setObject([1], forKey: "k")
    #expect(try again.verify().ok)
  }

  /// `mapped-cache create --max-processes` sizes the table, and `migrate` resizes it;
  /// out of range is a usage error.
  @Test func theToolSizesTheTable() throws {
    let path = TestFiles.tempPath("slot-cli")
    defer { TestFiles.cleanup(path, path + ".2") }
    let tool = TestFiles.binary("mapped-cache")
    #expect(try ChildProcess.run(tool, ["create", path, "--max-processes", "2000"]).status == 0)
    #expect(try CacheFile(path: path, readOnly: true).info.processSlots == 2000)
    #expect(try ChildProcess.run(tool, ["migrate", path, path + ".2", "--max-processes", "300"]).status == 0)
    #expect(try CacheFile(path: path + ".2", readOnly: true).info.processSlots == 300)
    let bad = try ChildProcess.run(tool, ["create", path + ".3", "--max-processes", "16384"])
    #expect(bad.status == 64 && bad.stderr.contains("--max-processes must be a whole number from 1 to 16383"))
  }

  /// 1,000 processes at once, each opening the default-option file twice, writing and
  /// reading back, all holding their handles until every one has written; then 300
  /// children forked from a parent that holds a handle, each using it and one of its
  /// own. Every key is then there and the file verifies clean.
  @Test func aThousandProcessesOpenOneFileAtOnceWithTheDefaults() throws {
    let program = try CABITests.buildProgram("fleet")
    defer { unlink(program) }
    for (mode, count) in [("spawn", 1000), ("prefork", 300)] {
      let path = TestFiles.tempPath("slot-fleet-\(mode)")
      defer { TestFiles.cleanup(path) }
      let r = try ChildProcess.run(program, [mode, path, "\(count)"], timeout: 300)
      #expect(!r.signaled && r.status == 0, "\(mode): \(r.stdout) \(r.stderr.prefix(2000))")
      #expect(r.stdout.contains("fleet: \(count) processes, 0 failed, 0 problems"), "\(mode): \(r.stdout)")
    }
  }
}
