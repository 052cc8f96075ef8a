import Foundation
import Glibc
import SystemCalls

/// The write locks: one word per partition that every writer of that partition, in
/// every process and on every thread, takes with a compare-and-swap. In `.flock` mode the
/// handle also takes `flock` first (one for the file), and an in-process lock before that
/// (a flock held by one thread's descriptor is held by all the threads sharing it, and
/// the second thread's unlock would drop the first's).
///
/// Lock word (32 bits, `Format.PartitionOffset.lockWord` of its partition; the bit layout is
/// `Format.Lock`):
///
///     bits 0..9    owner: process-table slot + 1 (0 = free)
///     bits 10..29  owner's generation (low 20 bits of its table entry's generation)
///     bit  31      waiters: someone may sleep on the futex; the releaser must wake
///
/// (In a file whose process table has over 1,000 entries the owner takes bits 0..13
/// and the generation's low 16 bits bits 14..29: `Format.Lock`.)
///
/// States: 0 (free) → owned (CAS by an acquirer) → 0 (release, exchange) or → owned by
/// another (CAS by a waiter that proved the owner dead: its witness byte is unlocked,
/// or its slot's generation moved on). The owner's witness is an OFD read lock on byte
/// `witnessBase + slot` of the file, taken at registration and dropped by the kernel
/// when the owner's descriptor closes, that is, when the process dies. A live but slow
/// or stopped owner keeps its witness, so it is never declared dead. A word naming this
/// handle's own token is held by another of its threads, or by a thread of its process
/// using another handle on the file (they share one registration and token:
/// `ProcessRegistrations`), alive by definition (an OFD lock cannot witness for its own
/// descriptor: `F_OFD_GETLK` ignores the caller's own locks).
///
/// Holding a partition's lock is proved by `Held`, a token only this file makes, which
/// names the partition: every function that changes a partition's memory takes one, so
/// calling it without the lock does not compile. The acquirers hand it out inside a
/// `LockedPartition`, the partition whose word they took together with the proof, from
/// which the writers reach the partition's layers: a change cannot name a partition
/// other than the one locked. A writer holds one partition's lock at a time (growth,
/// two: section 10 of DESIGN.md).
///
/// A struct of a few words, not a class: taking the lock then retains and releases
/// nothing (as a class, the retain and release were a visible share of a set under
/// `perf`). What only the slow paths need lives in `Context`, reached without reference
/// counting and kept alive by the lock's owner (`CacheEngine`).
struct WriteLock: @unchecked Sendable {
  static let witnessBase: Int64 = 1 << 40
  /// Pauses a waiter spins before it checks the holder's witness and sleeps: some
  /// microseconds. A running holder is done well within that, and a futex sleep and
  /// wake-up costs more (far fewer pauses made a set's tail latency under two writing
  /// processes much worse: docs/history/bench-history.md).
  static let acquireSpins = 512
  /// Most pauses between two looks at a held word: waits double from one pause to this.
  /// With many processes setting Zipf keys on as many cores, this made more sets than
  /// looking after every pause (a quarter of it: no change); two processes on two
  /// cores, the same (docs/history/bench-history.md).
  static let maxPausesPerLook = 64
  /// Longest futex sleep: a holder that dies cannot wake its waiters, so they wake at
  /// least this often to check its witness, and notice its death within milliseconds.
  static let waitNanoseconds: Int64 = 2_000_000

  /// Proof that the caller holds partition `partition`'s write lock. Only this file
  /// makes one (inside the `LockedPartition` an acquirer returns) and it cannot be copied
  /// or stored, so a function that takes one (`borrowing`) can only run inside a hold of
  /// the lock.
  struct Held: ~Copyable {
    let partition: Int
    fileprivate init(partition: Int) { self.partition = partition }
    /// Nothing to do; declared so that a witness is destroyed by a call the compiler
    /// inlines to nothing. Without one it is destroyed through its type's metadata, an
    /// indirect call that also keeps every value holding it in memory.
    deinit {}
  }

  /// The slow paths' state, owned by `CacheEngine` for the lock's whole life.
  final class Context {
    let memory: MappedMemory
    let fd: Int32
    let mySlot: Int
    /// `.flock` mode's in-process lock (see above). Unused in `.sharedWord` mode, where the
    /// word alone excludes threads: each uncontended write then makes two atomic
    /// read-modify-writes (the word's CAS and exchange), not four.
    let threads = NSLock()

    init(memory: MappedMemory, fd: Int32, slot: Int) {
      self.memory = memory
      self.fd = fd
      mySlot = slot
    }
  }

  private let memory: MappedMemory
  private unowned(unsafe) let context: Context
  private let myToken: UInt32
  private let usesFlock: Bool

  /// Precondition: `context` outlives the lock (its owner keeps both), and
  /// `releaseWordsLeftBySlotsLastOwner` ran when the registration was made.
  init(mode: LockMode, context: Context, generation: UInt64) {
    memory = context.memory
    usesFlock = mode == .flock
    myToken = Self.token(slot: context.mySlot, generation: generation, in: context.memory)
    self.context = context
  }

  /// The lock-word value naming process-table slot `slot` at `generation` in `memory`'s file.
  static func token(slot: Int, generation: UInt64, in memory: MappedMemory) -> UInt32 {
    memory.lockBits.token(slot: slot, generation: generation)
  }

  /// Invariant behind "a word with this process's token is held by one of its threads":
  /// from registration on, only the threads of the handles sharing the registration (one
  /// process's, `ProcessRegistrations`) put its token in the word. A word that names the
  /// slot already when it is registered was left by the slot's last owner, which is dead
  /// (registration just found its witness free), or was planted by damage or a hostile
  /// file, possibly with exactly the token this registration drew. Waiting on it would
  /// never end, so it is released here, as a takeover would (the intent word, if the
  /// owner died mid-change, makes the next writer repair). Called once per registration,
  /// before any handle has it, so no thread of this process can hold the lock yet. A
  /// waiter taking the same word over at the same moment is fine: of the two
  /// compare-and-swaps, one wins.
  static func releaseWordsLeftBySlotsLastOwner(slot: Int, memory: MappedMemory) {
    let owner = memory.lockBits.ownerMask
    for p in 0..<memory.partitionCount {
      let word = memory.partition(p).lockWord
      let w = word.load(.acquiring)
      guard w & owner == UInt32(slot + 1) else { continue }
      if word.compareExchange(expected: w, desired: w & Format.Lock.waitersBit, .acquiringAndReleasing) {
        memory.header(.lockTakeovers).add(1, .relaxed)
        if w & Format.Lock.waitersBit != 0 { word.futexWake(1) }
      }
    }
  }

  /// Runs `body` holding partition `partition`'s lock.
  @inline(__always)
  func withLock<R>(_ partition: Int, _ body: (_ part: borrowing LockedPartition) throws -> R) throws -> R {
    let part = try acquire(partition)
    defer { release(partition) }
    return try body(part)
  }

  /// Takes partition `partition`'s lock and hands out the partition with its witness (in `.flock` mode: the
  /// in-process lock, the flock, then the word). Every `acquire` must be followed by
  /// `release` of the same partition on the same thread, as `withLock` and
  /// `CacheEngine.withWriteLock` (whose set path stays free of closure calls this way)
  /// do; nothing else calls it.
  @inline(__always)
  func acquire(_ partition: Int) throws -> LockedPartition {
    let part = memory.partition(partition)
    if usesFlock { _ = try acquireWithFlock(part.lockWord) } else { _ = acquireWord(part.lockWord) }
    return LockedPartition(part, file: memory)
  }

  /// The token the common set's compare-and-swap stores (`tryAcquireUncontended`): this
  /// lock's, or 0 in `.flock` mode, where every write goes through `acquire`.
  var uncontendedToken: UInt32 { usesFlock ? 0 : myToken }

  /// Partition `part` of `file`, locked, if its word is free now: the common set's one
  /// compare-and-swap, with the token of a lock in `.sharedWord` mode
  /// (`uncontendedToken`), the same as `acquire`'s first. Nil when the word is held or
  /// names a dead holder: the set then goes through `acquire`. Released by
  /// `releaseUncontended` (or `release`).
  @inline(__always)
  static func tryAcquireUncontended(_ part: PartitionMemory, token: UInt32, file: MappedMemory) -> LockedPartition? {
    guard takeFree(part.lockWord, token: token) else { return nil }
    return LockedPartition(part, file: file)
  }

  /// Every acquisition's first try: `word` from 0 (free, no waiters) to `token`.
  @inline(__always)
  private static func takeFree(_ word: SharedWord32, token: UInt32) -> Bool {
    word.compareExchange(expected: 0, desired: token, .acquiring)
  }

  /// `release` in `.sharedWord` mode, from the word alone: the common set's.
  @inline(__always)
  static func releaseUncontended(_ part: consuming LockedPartition) { release(word: part.memory.lockWord) }

  /// The word's release (every release's): exchange with 0, and wake one sleeper if the
  /// waiters bit was set.
  @inline(__always)
  private static func release(word: SharedWord32) {
    if word.exchange(0, .releasing) & Format.Lock.waitersBit != 0 { wakeWaiter(word) }
  }

  @inline(never)
  private static func wakeWaiter(_ word: SharedWord32) { word.futexWake(1) }

  /// Releases partition `partition`'s lock, which `acquire` took.
  @inline(__always)
  func release(_ partition: Int) {
    Self.release(word: memory.partition(partition).lockWord)
    if usesFlock { releaseFlock() }
  }

  // MARK: Two partitions at once (growth)

  /// Takes partition `partition`'s word alone (no flock, in either mode: the word
  /// excludes every writer), for growth, which holds a split's source and new partition
  /// together, always the lower-numbered first. Released by `releaseWord`.
  func acquireWord(_ partition: Int) -> LockedPartition {
    let part = memory.partition(partition)
    _ = acquireWord(part.lockWord)
    return LockedPartition(part, file: memory)
  }

  /// Takes partition `partition`'s word if it is free now (or its holder is dead), for
  /// a writer that holds a higher-numbered partition and must not wait for a lower one.
  /// Free is what `acquireContendedWord` takes as free: no owner, whatever the other
  /// bits (a waiters bit, or damage in the generation's). Taking only a zero word, a
  /// writer that finishes a dead grower's split would find such a source word never
  /// free, and retry forever.
  func tryAcquireWord(_ partition: Int) -> LockedPartition? {
    let part = memory.partition(partition)
    let word = part.lockWord
    let cur = word.load(.relaxed)
    guard
      cur & memory.lockBits.ownerMask == 0
        || Liveness(memory: context.memory, fd: context.fd, asker: asker).holderIsDead(cur),
      claim(word, from: cur)
    else { return nil }
    return LockedPartition(part, file: memory)
  }

  /// Takes `word` from `cur`, a value just read that names no owner or a dead one: one
  /// compare-and-swap, which fails if the word changed since. The waiters bit is kept
  /// (others may sleep on the word); taking a dead owner's word is a takeover, counted.
  private func claim(_ word: SharedWord32, from cur: UInt32) -> Bool {
    guard word.compareExchange(expected: cur, desired: myToken | (cur & Format.Lock.waitersBit), .acquiring) else {
      return false
    }
    if cur & memory.lockBits.ownerMask != 0 { context.memory.header(.lockTakeovers).add(1, .relaxed) }
    return true
  }

  /// Releases a word `acquireWord` or `tryAcquireWord` took.
  func releaseWord(_ partition: Int) { Self.release(word: memory.partition(partition).lockWord) }

  @inline(never)
  private func acquireWithFlock(_ word: SharedWord32) throws -> Bool {
    context.threads.lock()
    do { try SystemCall.flock(context.fd, LOCK_EX) } catch {
      context.threads.unlock()
      throw CacheError.system(error)
    }
    // The mode is per handle, not per file: take the word too, so that handles in
    // `.sharedWord` mode (which never look at the flock) are excluded as well.
    return acquireWord(word)
  }

  @inline(never)
  private func releaseFlock() {
    _ = try? SystemCall.flock(context.fd, LOCK_UN)
    context.threads.unlock()
  }

  /// The word's uncontended path, inlined into every write: one compare-and-swap.
  @inline(__always)
  private func acquireWord(_ word: SharedWord32) -> Bool {
    if Self.takeFree(word, token: myToken) { return false }
    return acquireContendedWord(word)
  }

  /// Spins, then checks the holder's witness and sleeps on the futex, until the word is
  /// free (false) or its holder is proved dead and the word taken over (true).
  @inline(never)
  private func acquireContendedWord(_ word: SharedWord32) -> Bool {
    var spins = 0
    var pauses = 1
    var waited = false
    let owner = memory.lockBits.ownerMask
    while true {
      let cur = word.load(.relaxed)
      if cur & owner == 0 {
        // Having slept, keep the waiters bit: others may still sleep behind us.
        let want = myToken | (waited ? Format.Lock.waitersBit : cur & Format.Lock.waitersBit)
        if word.compareExchange(expected: cur, desired: want, .acquiring) { return false }
        continue
      }
      if spins < Self.acquireSpins {
        // Each look pulls in the word's line, which the holder writes several times a
        // change (intent, counters, release), so every waiter's look makes the holder's
        // next write wait for the line: with many waiters on a hot partition, looking
        // less often the longer the word stays held shortens each hold.
        for _ in 0..<pauses { spinPause() }
        spins += pauses
        pauses = min(pauses &* 2, Self.maxPausesPerLook)
        continue
      }
      if Liveness(memory: context.memory, fd: context.fd, asker: asker).holderIsDead(cur) {
        if claim(word, from: cur) { return true }
        continue
      }
      let sleeping = cur | Format.Lock.waitersBit
      if cur != sleeping, !word.compareExchange(expected: cur, desired: sleeping, .relaxed) { continue }
      waited = true
      word.futexWait(expected: sleeping, nanoseconds: Self.waitNanoseconds)
    }
  }

  /// A handle's own place in the lock word: its process-table slot and its token. A
  /// read-only handle has none, so every holder it sees is another process.
  struct Asker {
    let slot: Int
    let token: UInt32
    static let none = Asker(slot: -1, token: 0)
  }

  var asker: Asker { Asker(slot: context.mySlot, token: myToken) }
}

/// Whether the process named in the lock word is alive: the question a waiting writer
/// asks before it takes the lock over, and a reader asks of a slot that stays odd.
/// Errs towards "alive": a check that cannot be made never declares anyone dead.
struct Liveness {
  let memory: MappedMemory
  let fd: Int32
  let asker: WriteLock.Asker

  /// Whether no live writer can finish what a reader is waiting for (a bucket of
  /// partition `partition` that stays odd): its lock word names a process that is gone,
  /// or it is free. Writers change buckets only while they hold the word, so a free word
  /// means the odd word was left by a holder that died mid-change (its intent word is
  /// then still set: a holder clears it before it releases the word, and a process that
  /// registers into a dead holder's table entry releases the words it left), or by damage.
  /// Asked by a reader whose wait has passed its spins (`Reader.backoff`), which then
  /// looks once more (a writer may have just finished) and answers "busy"; R7
  /// (`CacheEngine+BusyRead`) then asks `liveHolder`.
  func noWriterCanFinish(_ partition: Int) -> Bool { liveHolder(partition) == nil }

  /// The process-table slot of the live process whose token is in partition
  /// `partition`'s lock word, or nil when the word is free or names a process that is
  /// gone (`noWriterCanFinish`). A slot from the word is returned only once
  /// `holderIsDead` has bounds-checked it.
  func liveHolder(_ partition: Int) -> Int? {
    let cur = memory.partition(partition).lockWord.load(.relaxed)
    let owner = memory.lockBits.ownerMask
    guard cur & owner != 0, !holderIsDead(cur) else { return nil }
    return Int(cur & owner) - 1
  }

  /// Whether the process named in lock word `word` is gone: its witness byte is
  /// unlocked, or its process-table slot has moved to another generation.
  func holderIsDead(_ word: UInt32) -> Bool {
    let slot = Int(word & memory.lockBits.ownerMask) - 1
    guard slot >= 0, slot < memory.procCount else { return true }
    // The asker's slot: another of its threads holds it (alive), unless the word is
    // left from the slot's previous owner (another generation: dead).
    if slot == asker.slot { return word & ~Format.Lock.waitersBit != asker.token }
    let generation = memory.procWord(slot, Format.ProcessEntryOffset.generation).load(.acquiring)
    if WriteLock.token(slot: slot, generation: generation, in: memory) != word & ~Format.Lock.waitersBit { return true }
    return !SystemCall.byteIsLocked(fd, at: WriteLock.witnessBase + Int64(slot))
  }
}

@inline(__always)
func spinPause() { SystemCall.cpuRelax() }

/// A partition with its write lock held: the lock's witness (`held`) and the partition
/// whose word was taken, in one value, as a transaction is in LMDB. Only the acquirers
/// of `WriteLock` make one, and it cannot be copied or stored, so a function that takes
/// one (`borrowing`) runs inside a hold of that partition's lock, and the layers it
/// reaches through it (`index`, `logs`, `policy`, ...) are that partition's. Handed out
/// by `CacheEngine.withWriteLock(partition:)`; the read side goes through `Partition`
/// and needs none.
struct LockedPartition: ~Copyable {
  /// The partition's layers, for what reads them alone (`Checker`, the hints).
  let partition: Partition
  /// The witness the layers' mutating functions take.
  let held: WriteLock.Held

  @inline(__always)
  fileprivate init(_ memory: PartitionMemory, file: MappedMemory) {
    partition = Partition(memory, file: file)
    held = WriteLock.Held(partition: memory.index)
  }

  /// Nothing to do (the lock is released by name, `WriteLock.release`); declared for
  /// the reason `WriteLock.Held` declares one: destroyed through its type's metadata,
  /// the value stayed in memory on the straight set's way.
  deinit {}

  /// The same hold as a new value, for a caller that hands it to a function out of line
  /// on a rare way: a value borrowed by such a call is kept in memory from the lock on,
  /// a cost to the common way too; this one is made only where it is handed on.
  @inline(__always)
  consuming func handedOn() -> LockedPartition { LockedPartition(partition) }

  @inline(__always)
  private init(_ partition: Partition) {
    self.partition = partition
    held = WriteLock.Held(partition: partition.number)
  }

  @inline(__always) var memory: PartitionMemory { partition.memory }
  @inline(__always) var index: BucketIndex { partition.index }
  @inline(__always) var logs: RecordLogs { partition.logs }
  @inline(__always) var freeLists: FreeLists { partition.freeLists }
  @inline(__always) var counters: PartitionCounters { partition.counters }
  @inline(__always) var resizer: IndexResizer { partition.resizer }
  @inline(__always) var policy: EvictionPolicy { partition.policy }
  @inline(__always) var number: Int { partition.number }

  /// `Partition.needsRepair`.
  @inline(__always)
  func needsRepair(checkingLogs: Bool = true) -> Bool { partition.needsRepair(checkingLogs: checkingLogs) }
}
