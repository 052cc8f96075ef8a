import CacheTools
import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// A writer stopped (SIGSTOP) or killed (SIGKILL) while it holds the write lock, with
/// one slot left mid-write (odd seq), as a writer stopped inside its publish step would.
/// The holder is `mc-test-helper hold-lock`, which takes the lock through the
/// `_holdWriteLock` test hook.
@Suite(.serialized) struct ReliabilityLockTests {
  /// A 1 MiB cache holding `k-odd` and `k-other`, and a `hold-lock` child holding its
  /// write lock with `k-odd`'s slot left mid-write (or, with `midMove`, mid-move).
  struct Held {
    let path: String
    let ready: String
    let holder: ChildProcess

    /// Ends the holder if it still runs (continuing it first, if stopped); removes the files.
    func cleanup() {
      if holder.isRunning {
        kill(holder.pid, SIGCONT)
        kill(holder.pid, SIGKILL)
      }
      TestFiles.cleanup(path)
      unlink(ready)
    }
  }

  func holdLock(_ tag: String, options: CacheOptions = CacheOptions(capacity: 1 << 20), midMove: Bool = false) throws
    -> Held
  {
    let path = TestFiles.tempPath(tag)
    let ready = path + ".ready"
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20, options: options)
    try c.setObject(Array("odd-value".utf8), forKey: "k-odd")
    try c.setObject(Array("other-value".utf8), forKey: "k-other")
    let held = Held(
      path: path, ready: ready,
      holder: try ChildProcess(
        RelSupport.helper, ["hold-lock", path, "60", ready, "k-odd"] + (midMove ? ["move"] : [])))
    guard RelSupport.waitForFile(ready, timeout: 30) else {
      held.cleanup()
      throw CacheError.invalidArgument("the holder never took the lock")
    }
    return held
  }

  /// Readers in other processes keep reading while the holder is stopped: other keys
  /// hit, the key whose slot is odd misses after bounded retries (never a hang). A
  /// writer waits for as long as the holder is stopped, and proceeds after SIGCONT.
  @Test func stoppedLockHolderBlocksWritersNotReaders() throws {
    let held = try holdLock("sigstop")
    defer { held.cleanup() }
    let (path, ready, holder) = (held.path, held.ready, held.holder)
    #expect(kill(holder.pid, SIGSTOP) == 0)
    #expect(
      try CacheFile(path: path, readOnly: true).writeLockHolder?.pid == Int(holder.pid),
      "the stopped holder is named as the lock's holder")

    let other = try ChildProcess.run(RelSupport.helper, ["read-loop", path, "k-other", "2000"], timeout: 60)
    let of = RelSupport.fields(other.stdout)
    #expect(other.status == 0 && !other.signaled)
    #expect(of["hits"] == "2000", "reads of an untouched key while the writer is stopped: \(other.stdout)")
    let odd = try ChildProcess.run(RelSupport.helper, ["read-loop", path, "k-odd", "50"], timeout: 60)
    let df = RelSupport.fields(odd.stdout)
    #expect(odd.status == 0 && !odd.signaled, "a reader of the odd slot hung or crashed")
    #expect(df["misses"] == "50", "reads of the slot left mid-write: \(odd.stdout)")
    #expect(try SharedCache<[UInt8]>(path: path, capacity: 1 << 20).statistics.busyMisses >= 50)
    print(
      "sigstop: reader of untouched key \(other.stdout.trimmingCharacters(in: .newlines)); reader of odd slot \(odd.stdout.trimmingCharacters(in: .newlines))"
    )

    let writer = try ChildProcess(RelSupport.helper, ["set-timed", path, "k-new"])
    usleep(1_000_000)
    #expect(writer.isRunning, "a writer got the lock while its holder was stopped")
    let resumed = RelSupport.monotonicNanoseconds()
    #expect(kill(holder.pid, SIGCONT) == 0)
    unlink(ready)  // the holder releases once it sees this
    let w = writer.finish(timeout: 30)
    #expect(w.ok, "the waiting writer did not finish after SIGCONT: \(w)")
    if let done = RelSupport.fields(w.stdout)["done"].flatMap(UInt64.init), done > resumed {
      print("sigstop: writer finished \((done - resumed) / 1_000_000) ms after SIGCONT")
    }
    let h = holder.finish(timeout: 30)
    #expect(h.ok && h.stdout.contains("released"))
    #expect(try CacheFile(path: path, readOnly: true).writeLockHolder == nil, "the lock is free again")

    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    #expect(try c.object(forKey: "k-odd") == Array("odd-value".utf8), "the stopped writer's slot after it resumed")
    #expect(try c.object(forKey: "k-new") == Array("written".utf8))
    #expect(try c.verify().ok)
  }

  /// `ProcessControl.stopOutsideWriteLock`, which the drills that stop a near cache's
  /// holder use: a process in the write lock is never left stopped (continued after each
  /// try, nil after the last); one outside it is stopped at the first try; one that is
  /// gone is reported as not stopped (nil).
  @Test func drillsStopAProcessOnlyOutsideTheWriteLock() throws {
    let held = try holdLock("stop-outside")
    defer { held.cleanup() }
    let file = try CacheFile(path: held.path, readOnly: true)
    #expect(ProcessControl.stopOutsideWriteLock(held.holder.pid, of: file, attempts: 3) == nil)
    #expect(ProcessControl.state(held.holder.pid) != "T", "the lock's holder was left stopped")
    #expect(file.writeLockHolder?.pid == Int(held.holder.pid))

    let other = try ChildProcess("/bin/sleep", ["30"])
    defer {
      kill(other.pid, SIGCONT)
      kill(other.pid, SIGKILL)
      other.finish(timeout: 10)
    }
    #expect(ProcessControl.stopOutsideWriteLock(other.pid, of: file) == 0)
    #expect(ProcessControl.state(other.pid) == "T")

    // A process that is gone is not reported stopped.
    let gone = try ChildProcess("/bin/true", [])
    gone.finish(timeout: 10)
    #expect(ProcessControl.stopOutsideWriteLock(gone.pid, of: file) == nil)
    // The state as R7 reads it (`SystemCall.processState`): this process has one (its main
    // thread's: running or sleeping), a gone one has none.
    #expect(ProcessControl.state(getpid()).map { "RS".contains($0) } == true)
    #expect(ProcessControl.state(gone.pid) == nil)
  }

  /// A holder SIGKILLed while holding the lock (slot left odd): the waiting writer takes
  /// over within milliseconds (measured, not asserted), repairs, and stores.
  @Test func killedLockHolderIsTakenOver() throws {
    var takeovers: [Double] = []
    for round in 0..<3 {
      let held = try holdLock("sigkill")
      defer { held.cleanup() }
      let (path, holder) = (held.path, held.holder)
      let writer = try ChildProcess(RelSupport.helper, ["set-timed", path, "k-after"])
      usleep(400_000)  // let the writer start and wait on the lock
      #expect(writer.isRunning, "round \(round): the writer did not wait for a live holder")
      let killedAt = RelSupport.monotonicNanoseconds()
      #expect(kill(holder.pid, SIGKILL) == 0)
      let w = writer.finish(timeout: 30)
      #expect(w.ok, "round \(round): the writer never took over: \(w)")
      if let done = RelSupport.fields(w.stdout)["done"].flatMap(UInt64.init), done > killedAt {
        takeovers.append(Double(done - killedAt) / 1e6)
      }
      holder.finish(timeout: 10)

      let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
      let s = c.statistics
      #expect(s.lockTakeovers >= 1)
      #expect(s.recoveries >= 1, "the intent record of the dead holder was not repaired")
      #expect(try c.object(forKey: "k-after") == Array("written".utf8))
      #expect(try c.object(forKey: "k-other") == Array("other-value".utf8))
      // The bucket the holder left mid-write is checked entry by entry: the slot it held
      // names a whole record, so the entry is kept.
      #expect(try c.object(forKey: "k-odd") == Array("odd-value".utf8))
      #expect(try c.verify().ok)
      try c.setObject([1], forKey: "at-once")
    }
    let sorted = takeovers.sorted()
    print(
      "sigkill: takeover after the holder's death, ms: \(sorted.map { String(format: "%.1f", $0) }) (includes the child's exit and our wait)"
    )
  }

  /// A holder SIGKILLed with a bucket left odd, and no writer coming. A read-only reader
  /// of that bucket sees from the lock's witness that its writer is dead and answers
  /// "miss" at once (no hang, no sleeps): it cannot repair. A writable reader repairs the
  /// partition itself (R7: it takes the dead holder's word without waiting) and reads the
  /// entry, so the dead writer's bucket does not stay unreadable until the next write.
  /// Readers of other keys hit throughout. The time per read is printed, not asserted.
  @Test func deadHoldersOddSlotIsRepairedByAWritableReader() throws {
    let held = try holdLock("sigkill-odd")
    defer { held.cleanup() }
    let (path, holder) = (held.path, held.holder)
    #expect(kill(holder.pid, SIGKILL) == 0)
    holder.finish(timeout: 10)
    // The word still names the dead holder, but only a live holder is reported.
    #expect(try CacheFile(path: path, readOnly: true).writeLockHolder == nil)

    let odd = try ChildProcess.run(RelSupport.helper, ["read-loop", path, "k-odd", "200", "ro"], timeout: 60)
    let df = RelSupport.fields(odd.stdout)
    #expect(odd.status == 0 && !odd.signaled, "a read-only reader of the dead writer's slot hung or crashed")
    #expect(df["misses"] == "200", "read-only reads of the slot a dead writer left odd: \(odd.stdout)")
    let other = try ChildProcess.run(RelSupport.helper, ["read-loop", path, "k-other", "200", "ro"], timeout: 60)
    #expect(RelSupport.fields(other.stdout)["hits"] == "200", "\(other.stdout)")
    let c = try SharedCache<[UInt8]>(path: path, capacity: 1 << 20)
    let before = c.statistics
    // (A read-only handle counts its busy misses privately: they are not in the file.)
    #expect(before.recoveries == 0, "nothing repaired before a writable handle read")

    let fixed = try ChildProcess.run(RelSupport.helper, ["read-loop", path, "k-odd", "200"], timeout: 60)
    let ff = RelSupport.fields(fixed.stdout)
    #expect(fixed.status == 0 && !fixed.signaled, "a writable reader of the dead writer's slot hung or crashed")
    #expect(ff["hits"] == "200", "the first read repairs, and every read finds the whole entry: \(fixed.stdout)")
    let after = c.statistics
    #expect(after.busyMisses == before.busyMisses, "a writable reader answered a busy miss")
    #expect(after.recoveries == 1, "the reader repaired the dead holder's change once")
    #expect(after.lockTakeovers >= 1)
    print(
      "sigkill, no writer after: read-only reader of the odd slot \(odd.stdout.trimmingCharacters(in: .newlines)); writable reader \(fixed.stdout.trimmingCharacters(in: .newlines))"
    )

    #expect(try c.object(forKey: "k-odd") == Array("odd-value".utf8))
    #expect(try c.object(forKey: "k-other") == Array("other-value".utf8))
    try c.setObject([1], forKey: "k-after")
    #expect(try c.object(forKey: "k-after") == [1])
    #expect(c.statistics.recoveries == 1, "the write after found nothing left to repair")
    #expect(try c.verify().ok)
  }

  /// A holder SIGKILLed inside an eviction step's move (the entry's record copied to the
  /// main log's head, the slot odd with its new location stored): repair keeps the entry,
  /// since either location names a whole copy. A dead writer loses only the entry it was
  /// writing, and a move writes none. Stopped there, the holder leaves readers missing
  /// the key (bounded), and they find it again once it is killed and repaired.
  @Test func killedMidMoveKeepsTheEntry() throws {
    for partitioned in [false, true] {
      let o = CoreOptions.make(partitioned: partitioned, capacity: 1 << 20)
      let held = try holdLock("sigkill-move", options: o, midMove: true)
      defer { held.cleanup() }
      let holder = held.holder
      let c = try SharedCache<[UInt8]>(path: held.path, capacity: 1 << 20)
      let before = c.statistics
      #expect(try c.object(forKey: "k-odd") == nil, "the slot being moved reads as busy, then a miss")
      #expect(kill(holder.pid, SIGKILL) == 0)
      holder.finish(timeout: 10)

      try c.setObject(Array("written".utf8), forKey: "k-after")  // takes over and repairs
      let s = c.statistics
      #expect(s.lockTakeovers - before.lockTakeovers == 1)
      #expect(s.recoveries - before.recoveries == 1, "the intent record of the dead holder was not repaired")
      #expect(
        try c.object(forKey: "k-odd") == Array("odd-value".utf8), "partitioned \(partitioned): the moved entry was lost"
      )
      #expect(try c.object(forKey: "k-other") == Array("other-value".utf8))
      #expect(try c.object(forKey: "k-after") == Array("written".utf8))
      #expect(s.entries == 3)
      let report = try c.verify()
      #expect(report.ok, "\(report.problems)")
    }
  }
}
