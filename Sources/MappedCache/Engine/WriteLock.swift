import CMappedCacheShim
import Glibc
import Synchronization

/// The write lock: one word in the file that every writer, in every process and on
/// every thread, takes with a compare-and-swap. In `.flock` mode the handle also takes
/// `flock` first, and an in-process mutex before that (a flock held by one thread's
/// descriptor is held by all the threads sharing it, and the second thread's unlock
/// would drop the first's).
///
/// Lock word (32 bits, `Format.H.lockWord`):
///
///     bits 0..9    owner: process-table slot + 1 (0 = free)
///     bits 10..29  owner's generation (low 20 bits of its table entry's generation)
///     bit  31      waiters: someone may sleep on the futex; the releaser must wake
///
/// States: 0 (free) → owned (CAS by an acquirer) → 0 (release, exchange) or → owned by
/// another (CAS by a waiter that proved the owner dead: its witness byte is unlocked,
/// or its slot's generation moved on). The owner's witness is an OFD read lock on byte
/// `witnessBase + slot` of the file, taken at registration and dropped by the kernel
/// when the owner's descriptor closes, that is, when the process dies. A live but slow
/// or stopped owner keeps its witness, so it is never declared dead. A word naming this
/// handle's own token is held by another of its threads, alive by definition (an OFD
/// lock cannot witness for its own descriptor: `F_OFD_GETLK` ignores the caller's own
/// locks).
///
/// A struct of three words, not a class: taking the lock then retains and releases
/// nothing, and copying it costs three loads (as a class, the retain and release cost ~6 %
/// of a set; as a struct holding everything below, its copy with mixed-size fields cost
/// store-forwarding stalls: both measured with `perf` on write-only runs). What only the
/// slow paths need lives out of line in `Context`, freed by the owner
/// (`CacheEngine.deinit` calls `destroy()`).
struct WriteLock: @unchecked Sendable {
  static let witnessBase: Int64 = 1 << 40
  private static let ownerMask: UInt32 = 0x3FF
  private static let waitersBit: UInt32 = 1 << 31
  private static let waitNanoseconds: Int64 = 2_000_000

  /// The slow paths' state: allocated once, so the mutex's address is stable.
  private struct Context {
    let memory: MappedMemory
    let fd: Int32
    let procCount: Int
    let mySlot: Int
    /// `.flock` mode's in-process lock (see above): a plain pthread mutex. Unused in
    /// `.sharedWord` mode, where the word alone excludes threads: each uncontended write
    /// then makes two atomic read-modify-writes (the word's CAS and exchange), not four.
    var threads: pthread_mutex_t
  }

  private let word: UnsafeMutablePointer<Atomic<UInt32>>
  private let context: UnsafeMutablePointer<Context>
  private let myToken: UInt32
  private let usesFlock: Bool

  init(mode: LockMode, memory: MappedMemory, fd: Int32, procCount: Int, slot: Int, generation: UInt64) {
    word = memory.lockWord
    usesFlock = mode == .flock
    myToken = UInt32(slot + 1) | (UInt32(truncatingIfNeeded: generation & 0xFFFFF) << 10)
    context = .allocate(capacity: 1)
    context.initialize(to: Context(memory: memory, fd: fd, procCount: procCount, mySlot: slot, threads: pthread_mutex_t()))
    pthread_mutex_init(threadsMutex, nil)
    releaseIfLeftBySlotsLastOwner()
  }

  /// Invariant behind "a word with this handle's token is held by one of its threads":
  /// from registration on, only this handle's threads put its token in the word. A word
  /// that names this handle's slot already at registration was left by the slot's last
  /// owner, which is dead (registration just found its witness free), or was planted by
  /// damage or a hostile file, possibly with exactly the token this registration drew.
  /// Waiting on it would never end, so it is released here, as a takeover would (the
  /// intent word, if the owner died mid-change, makes the next writer repair). No thread
  /// of this handle can hold the lock yet. A waiter taking the same word over at the
  /// same moment is fine: of the two compare-and-swaps, one wins.
  private func releaseIfLeftBySlotsLastOwner() {
    let w = word.pointee.load(ordering: .acquiring)
    guard w & Self.ownerMask == myToken & Self.ownerMask else { return }
    if word.pointee.compareExchange(expected: w, desired: w & Self.waitersBit, ordering: .acquiringAndReleasing).exchanged {
      context.pointee.memory.word(Format.H.lockTakeovers).pointee.wrappingAdd(1, ordering: .relaxed)
      if w & Self.waitersBit != 0 { wakeOne() }
    }
  }

  private var threadsMutex: UnsafeMutablePointer<pthread_mutex_t> {
    UnsafeMutableRawPointer(context).advanced(by: MemoryLayout<Context>.offset(of: \Context.threads)!)
      .assumingMemoryBound(to: pthread_mutex_t.self)
  }

  /// Frees the context. Called once, by the owner's deinit, when no thread can use the lock.
  func destroy() {
    pthread_mutex_destroy(threadsMutex)
    context.deinitialize(count: 1)
    context.deallocate()
  }

  /// Runs `body` holding the lock. `tookOver` tells whether the previous holder died
  /// holding the lock (the intent record tells whether it died mid-change).
  @inline(__always)
  func withLock<R>(_ body: (_ tookOver: Bool) throws -> R) throws -> R {
    let tookOver = try lock()
    defer { unlock() }
    return try body(tookOver)
  }

  /// Takes the lock (in `.flock` mode: the in-process mutex, the flock, then the word).
  /// Every `lock()` that returns must be paired with `unlock()` on the same thread.
  @inline(__always)
  func lock() throws -> Bool {
    if !usesFlock { return acquireWord() }
    return try acquireWithFlock()
  }

  @inline(__always)
  func unlock() {
    let prev = word.pointee.exchange(0, ordering: .releasing)
    if prev & Self.waitersBit != 0 { wakeOne() }
    if usesFlock { releaseFlock() }
  }

  @inline(never)
  private func wakeOne() {
    _ = mc_futex_wake(context.pointee.memory.lockWordAddress, 1)
  }

  @inline(never)
  private func acquireWithFlock() throws -> Bool {
    pthread_mutex_lock(threadsMutex)
    do { try Sys.flock(context.pointee.fd, LOCK_EX) } catch {
      pthread_mutex_unlock(threadsMutex)
      throw CacheError.system(error)
    }
    // The mode is per handle, not per file: take the word too, so that handles in
    // `.sharedWord` mode (which never look at the flock) are excluded as well.
    return acquireWord()
  }

  @inline(never)
  private func releaseFlock() {
    _ = try? Sys.flock(context.pointee.fd, LOCK_UN)
    pthread_mutex_unlock(threadsMutex)
  }

  /// The word's uncontended path, inlined into every write: one compare-and-swap.
  @inline(__always)
  private func acquireWord() -> Bool {
    if word.pointee.compareExchange(expected: 0, desired: myToken, ordering: .acquiring).exchanged {
      return false
    }
    return acquireContendedWord()
  }

  @inline(never)
  private func acquireContendedWord() -> Bool {
    let memory = context.pointee.memory
    var spins = 0
    var waited = false
    while true {
      let cur = word.pointee.load(ordering: .relaxed)
      if cur & Self.ownerMask == 0 {
        // Having slept, keep the waiters bit: others may still sleep behind us.
        let want = myToken | (waited ? Self.waitersBit : cur & Self.waitersBit)
        if word.pointee.compareExchange(expected: cur, desired: want, ordering: .acquiring).exchanged {
          return false
        }
        continue
      }
      // 512 pauses, ~13 µs here: a running holder is done well within that, and a
      // futex sleep and wake-up costs more (64 pauses doubled the p99.9 of a set under
      // two writing processes; DESIGN.md section 5).
      if spins < 512 {
        spins += 1
        spinPause()
        continue
      }
      if holderIsDead(cur) {
        let want = myToken | (cur & Self.waitersBit)
        if word.pointee.compareExchange(expected: cur, desired: want, ordering: .acquiring).exchanged {
          memory.word(Format.H.lockTakeovers).pointee.wrappingAdd(1, ordering: .relaxed)
          return true
        }
        continue
      }
      let sleeping = cur | Self.waitersBit
      if cur != sleeping,
         !word.pointee.compareExchange(expected: cur, desired: sleeping, ordering: .relaxed).exchanged {
        continue
      }
      waited = true
      // Wake at least every 2 ms to re-check the owner's witness: a holder that dies
      // cannot wake us, and its death must be noticed within milliseconds.
      _ = mc_futex_wait(memory.lockWordAddress, sleeping, Self.waitNanoseconds)
    }
  }

  /// A handle's own place in the lock word: its process-table slot and its token. A
  /// read-only handle has none, so every holder it sees is another process.
  struct Asker {
    let slot: Int
    let token: UInt32
    static let none = Asker(slot: -1, token: 0)
  }

  var asker: Asker { Asker(slot: context.pointee.mySlot, token: myToken) }

  /// Whether the process named in a lock word is gone. Errs towards "alive".
  private func holderIsDead(_ word: UInt32) -> Bool {
    Self.holderIsDead(word, memory: context.pointee.memory, fd: context.pointee.fd,
                      procCount: context.pointee.procCount, asker: asker)
  }

  /// Whether the last holder died mid-change and nobody has repaired yet: the word names
  /// a process that is gone, or it is free while the intent record is still set (a
  /// holder clears the record before it releases the word; a process that registers
  /// into a dead holder's table entry releases the word it left). Asked by a reader
  /// whose slot stays odd (`CacheEngine.backoff`): a dead writer never finishes it.
  static func lastHolderDiedMidChange(memory: MappedMemory, fd: Int32, procCount: Int, asker: Asker) -> Bool {
    let cur = memory.lockWord.pointee.load(ordering: .relaxed)
    if cur & ownerMask == 0 { return memory.word(Format.H.intent).pointee.load(ordering: .relaxed) != 0 }
    return holderIsDead(cur, memory: memory, fd: fd, procCount: procCount, asker: asker)
  }

  /// Whether the process named in lock word `word` is gone: its witness byte is
  /// unlocked, or its process-table slot has moved to another generation. Errs towards
  /// "alive".
  private static func holderIsDead(_ word: UInt32, memory: MappedMemory, fd: Int32, procCount: Int,
                                   asker: Asker) -> Bool {
    let slot = Int(word & ownerMask) - 1
    guard slot >= 0, slot < procCount else { return true }
    // The asker's slot: another of its threads holds it (alive), unless the word is
    // left from the slot's previous owner (another generation: dead).
    if slot == asker.slot { return word & ~waitersBit != asker.token }
    let gen = (word >> 10) & 0xFFFFF
    let generation = memory.procWord(slot, Format.P.generation).pointee.load(ordering: .acquiring)
    if gen != UInt32(truncatingIfNeeded: generation & 0xFFFFF) { return true }
    return !Sys.byteIsLocked(fd, at: witnessBase + Int64(slot))
  }
}

@inline(__always)
func spinPause() { mc_cpu_relax() }

