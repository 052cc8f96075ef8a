import CMappedCacheShim
import Glibc

// Each libc call the package makes is wrapped once in this module (apple/swift-system's
// habit), whichever module needs it: the engine, the Redis tier, the tools, the stress
// tool and the tests' support. EINTR is retried in one helper (`retrying`), a failure
// becomes a `SystemError` with a typed `Errno` and the operation that failed, and each
// doc comment names the C function. The only other place that calls the C library is
// the shim (Sources/CMappedCacheShim), for the calls Swift cannot make directly; it is
// called from here too. The files by concern: this one (files, mappings, locks, the
// caller's identity, clocks), `Syscalls+Sockets.swift`, `Syscalls+Processes.swift`
// (processes, signals, the host), `Syscalls+IO.swift` (descriptors, directories,
// terminals), `Clock.swift` (the monotonic clocks the Redis tier and the tools time with).

/// Calls `body` again while it fails with `EINTR`: the one place a call interrupted by a
/// signal is retried. For calls that return -1 and set `errno` on failure.
@inline(__always)
func retrying<R: FixedWidthInteger & SignedInteger>(_ body: () -> R) -> R {
  while true {
    let r = body()
    if r != -1 || Glibc.errno != EINTR { return r }
  }
}

/// `retrying` for calls that return the error number itself (0: success) instead of
/// setting `errno`, as `posix_fallocate` does.
@inline(__always)
func retryingReturnedError(_ body: () -> Int32) -> Int32 {
  while true {
    let r = body()
    if r != EINTR { return r }
  }
}

private func cFstat(_ fd: Int32, _ st: inout stat) -> Int32 { fstat(fd, &st) }
private func cStat(_ p: String, _ st: inout stat) -> Int32 { stat(p, &st) }
private func cFlock(_ fd: Int32, _ op: Int32) -> Int32 { flock(fd, op) }

/// The system calls of the package, one wrapper each (see the top of this file).
@usableFromInline
package enum SystemCall {
  /// The corresponding C function is `open` (always with `O_CLOEXEC | O_NOFOLLOW`).
  package static func open(_ path: String, flags: Int32, mode: mode_t) throws(SystemError) -> Int32 {
    let fd = retrying { Glibc.open(path, flags | O_CLOEXEC | O_NOFOLLOW, mode) }
    if fd < 0 { throw SystemError(errno: Glibc.errno, operation: "open \(path)") }
    return fd
  }

  /// The corresponding C function is `close`. Errors are ignored: the descriptor is gone either way.
  package static func close(_ fd: Int32) { _ = Glibc.close(fd) }

  /// The corresponding C function is `fstat`.
  package static func fstat(_ fd: Int32) throws(SystemError) -> stat {
    var st = stat()
    if retrying({ cFstat(fd, &st) }) != 0 {
      throw SystemError(errno: Glibc.errno, operation: "fstat")
    }
    return st
  }

  /// The corresponding C function is `stat`; `nil` when the path does not exist.
  package static func statIfPresent(_ path: String) -> stat? {
    var st = stat()
    return retrying({ cStat(path, &st) }) == 0 ? st : nil
  }

  /// The corresponding C function is `lstat`; `nil` when the path does not exist.
  package static func lstatIfPresent(_ path: String) -> stat? {
    var st = stat()
    return retrying({ Glibc.lstat(path, &st) }) == 0 ? st : nil
  }

  /// Reserves the file's blocks so a later store into the mapping cannot hit a hole
  /// on a full disk (which would raise SIGBUS). The corresponding C function is `posix_fallocate`.
  package static func fallocate(_ fd: Int32, size: Int) throws(SystemError) {
    let r = retryingReturnedError { posix_fallocate(fd, 0, off_t(size)) }
    if r != 0 { throw SystemError(errno: r, operation: "posix_fallocate \(size) bytes") }
  }

  /// Allocates whatever blocks of the first `size` bytes are still holes, changing no
  /// byte: for a cache file that lost its reservation (copied sparse, restored from an
  /// archive), which writers would otherwise fill page by page until a full disk
  /// raises SIGBUS. Unlike `posix_fallocate` it never falls back to writing zeros,
  /// which could race with other processes' stores; a file system without it answers
  /// `EOPNOTSUPP`. The corresponding C function is `fallocate` (mode 0, through the shim).
  package static func allocateHoles(_ fd: Int32, size: Int) throws(SystemError) {
    let r = mc_fallocate(fd, Int64(size))
    if r != 0 { throw SystemError(errno: -r, operation: "fallocate \(size) bytes") }
  }

  /// The corresponding C function is `ftruncate`.
  package static func ftruncate(_ fd: Int32, size: Int) throws(SystemError) {
    if retrying({ Glibc.ftruncate(fd, off_t(size)) }) != 0 {
      throw SystemError(errno: Glibc.errno, operation: "ftruncate")
    }
  }

  /// The corresponding C function is `pwrite`; writes all of `bytes` or throws.
  package static func pwrite(_ fd: Int32, _ bytes: [UInt8], at offset: Int) throws(SystemError) {
    var done = 0
    while done < bytes.count {
      let n = retrying {
        bytes.withUnsafeBytes { buf in Glibc.pwrite(fd, buf.baseAddress! + done, buf.count - done, off_t(offset + done))
        }
      }
      if n < 0 { throw SystemError(errno: Glibc.errno, operation: "pwrite") }
      done += n
    }
  }

  /// The corresponding C function is `pread`; returns fewer bytes at end of file.
  package static func pread(_ fd: Int32, count: Int, at offset: Int) throws(SystemError) -> [UInt8] {
    var out = [UInt8](repeating: 0, count: count)
    var done = 0
    while done < count {
      let n = retrying {
        out.withUnsafeMutableBytes { buf in Glibc.pread(fd, buf.baseAddress! + done, count - done, off_t(offset + done))
        }
      }
      if n < 0 { throw SystemError(errno: Glibc.errno, operation: "pread") }
      if n == 0 { break }
      done += n
    }
    out.removeLast(count - done)
    return out
  }

  /// The corresponding C function is `mmap` (`MAP_SHARED`).
  package static func mmap(_ fd: Int32, size: Int, writable: Bool) throws(SystemError) -> UnsafeMutableRawPointer {
    let prot = writable ? (PROT_READ | PROT_WRITE) : PROT_READ
    guard let p = Glibc.mmap(nil, size, prot, MAP_SHARED, fd, 0), p != MAP_FAILED else {
      throw SystemError(errno: Glibc.errno, operation: "mmap \(size) bytes")
    }
    return p
  }

  /// Asks for transparent huge pages on a mapping (`MADV_HUGEPAGE`): with 2 MiB pages a
  /// table of gigabytes needs a few thousand TLB entries instead of a million, so a read
  /// of a large cache pays its cache miss without a page walk on top. A hint: on a
  /// file system or kernel that cannot (EINVAL, or `shmem_enabled` "never"), nothing
  /// changes, and the mapping works as before. Returns whether the kernel accepted it.
  /// The corresponding C function is `madvise` with `MADV_HUGEPAGE`.
  @discardableResult
  package static func adviseHugePages(_ p: UnsafeMutableRawPointer, size: Int) -> Bool {
    Glibc.madvise(p, size, Int32(MADV_HUGEPAGE)) == 0
  }

  /// The corresponding C function is `munmap`.
  package static func munmap(_ p: UnsafeMutableRawPointer, size: Int) { _ = Glibc.munmap(p, size) }

  /// The corresponding C function is `flock`.
  package static func flock(_ fd: Int32, _ op: Int32) throws(SystemError) {
    if retrying({ cFlock(fd, op) }) != 0 {
      throw SystemError(errno: Glibc.errno, operation: "flock")
    }
  }

  /// Non-blocking `flock`: false when another description holds a conflicting lock.
  /// The corresponding C function is `flock` with `LOCK_NB`.
  package static func tryFlock(_ fd: Int32, _ op: Int32) throws(SystemError) -> Bool {
    if retrying({ cFlock(fd, op | LOCK_NB) }) == 0 { return true }
    if Errno.current == .wouldBlock { return false }
    throw SystemError(errno: Glibc.errno, operation: "flock")
  }

  /// Takes a shared OFD lock on one byte; false when it is held exclusively elsewhere.
  /// The corresponding C function is `fcntl(F_OFD_SETLK, F_RDLCK)`.
  package static func lockByte(_ fd: Int32, at offset: Int64) throws(SystemError) -> Bool {
    let r = mc_ofd_lock_byte(fd, offset)
    if r == 0 { return true }
    if Errno(rawValue: -r).isLockConflict { return false }
    throw SystemError(errno: -r, operation: "fcntl(F_OFD_SETLK)")
  }

  /// Takes an exclusive OFD lock on one byte; false when another open file description
  /// holds any lock on it. The corresponding C function is `fcntl(F_OFD_SETLK, F_WRLCK)`.
  package static func lockByteExclusive(_ fd: Int32, at offset: Int64) throws(SystemError) -> Bool {
    let r = mc_ofd_lock_byte_exclusive(fd, offset)
    if r == 0 { return true }
    if Errno(rawValue: -r).isLockConflict { return false }
    throw SystemError(errno: -r, operation: "fcntl(F_OFD_SETLK, F_WRLCK)")
  }

  /// Drops this description's OFD lock on one byte. The corresponding C function is
  /// `fcntl(F_OFD_SETLK, F_UNLCK)`.
  package static func unlockByte(_ fd: Int32, at offset: Int64) { _ = mc_ofd_unlock_byte(fd, offset) }

  /// Whether another open file description holds a lock on the byte (a live process).
  /// An error answers "held": a check that cannot be made must not declare anyone dead.
  /// The corresponding C function is `fcntl(F_OFD_GETLK)`.
  package static func byteIsLocked(_ fd: Int32, at offset: Int64) -> Bool {
    mc_ofd_byte_is_locked(fd, offset) != 0
  }

  /// Sleeps while `*word == expected`, at most `nanoseconds`; returns early when woken,
  /// on a changed value, or on a signal (callers re-check their condition either way).
  /// The corresponding C function is `syscall(SYS_futex, FUTEX_WAIT)` (through the shim).
  package static func futexWait(_ word: UnsafeMutablePointer<UInt32>, _ expected: UInt32, _ nanoseconds: Int64) {
    _ = mc_futex_wait(word, expected, nanoseconds)
  }

  /// Wakes at most `count` sleepers on `word`. The corresponding C function is
  /// `syscall(SYS_futex, FUTEX_WAKE)` (through the shim).
  package static func futexWake(_ word: UnsafeMutablePointer<UInt32>, _ count: Int32) {
    _ = mc_futex_wake(word, count)
  }

  /// A CPU hint for spin-wait loops (`pause` on x86). Not a system call: the shim's
  /// inline function, named here with the rest.
  @inlinable @inline(__always) package static func cpuRelax() { mc_cpu_relax() }

  /// The CPUs online (at least 1): what the partition count is chosen for.
  /// The corresponding C function is `sysconf(_SC_NPROCESSORS_ONLN)`.
  package static func cpuCount() -> Int { max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN))) }

  /// Gives up the CPU. The corresponding C function is `sched_yield`.
  package static func yield() { _ = sched_yield() }

  /// Sleeps for about `microseconds`. The corresponding C function is `usleep`.
  package static func sleep(microseconds: UInt32) { _ = usleep(microseconds) }

  /// This process's id. The corresponding C function is `getpid`.
  package static func processID() -> Int32 { getpid() }

  /// The effective user id. The corresponding C function is `geteuid`.
  package static func effectiveUserID() -> uid_t { geteuid() }

  /// The effective group id. The corresponding C function is `getegid`.
  package static func effectiveGroupID() -> gid_t { getegid() }

  /// The caller's supplementary groups. The corresponding C function is `getgroups`.
  package static func supplementaryGroups() -> [gid_t] {
    let count = getgroups(0, nil)
    guard count > 0 else { return [] }
    var groups = [gid_t](repeating: 0, count: Int(count))
    let n = getgroups(count, &groups)
    return n > 0 ? Array(groups.prefix(Int(n))) : []
  }

  /// The id of the group called `name`, or nil when there is none. The corresponding C
  /// function is `getgrnam_r`.
  package static func groupID(named name: String) -> gid_t? {
    var entry = group()
    var found: UnsafeMutablePointer<group>? = nil
    var buffer = [CChar](repeating: 0, count: 16 << 10)
    let rc = buffer.withUnsafeMutableBufferPointer { getgrnam_r(name, &entry, $0.baseAddress, $0.count, &found) }
    return rc == 0 && found != nil ? entry.gr_gid : nil
  }

  /// Gives the file to group `gid` (its owner unchanged). The corresponding C function is `fchown`.
  package static func changeGroup(_ fd: Int32, to gid: gid_t) throws(SystemError) {
    if retrying({ fchown(fd, uid_t.max, gid) }) != 0 { throw SystemError(errno: Glibc.errno, operation: "fchown") }
  }

  /// Sets the file's permission bits exactly (no umask). The corresponding C function is `fchmod`.
  package static func changeMode(_ fd: Int32, to mode: mode_t) throws(SystemError) {
    if retrying({ fchmod(fd, mode) }) != 0 { throw SystemError(errno: Glibc.errno, operation: "fchmod") }
  }

  /// Bytes an unprivileged user may still allocate on the file system holding `fd`, or
  /// nil when it cannot be asked. The corresponding C function is `fstatvfs`.
  package static func freeBytes(_ fd: Int32) -> Int? {
    var st = statvfs()
    guard retrying({ fstatvfs(fd, &st) }) == 0 else { return nil }
    let (n, overflow) = Int(clamping: st.f_bavail).multipliedReportingOverflow(by: Int(clamping: st.f_frsize))
    return overflow ? Int.max : n
  }

  /// The size and the bytes an unprivileged user may still allocate of the file system
  /// holding `path`, or nil when it cannot be asked. The corresponding C function is
  /// `statvfs`.
  package static func fileSystemSpace(_ path: String) -> (size: Int, free: Int)? {
    var st = statvfs()
    guard retrying({ statvfs(path, &st) }) == 0 else { return nil }
    func bytes(_ blocks: UInt) -> Int {
      let (n, overflow) = Int(clamping: blocks).multipliedReportingOverflow(by: Int(clamping: st.f_frsize))
      return overflow ? Int.max : n
    }
    return (bytes(st.f_blocks), bytes(st.f_bavail))
  }

  /// A second descriptor for `fd`'s open file description (its OFD locks included),
  /// closed on exec. The corresponding C function is `fcntl(F_DUPFD_CLOEXEC)`.
  package static func duplicate(_ fd: Int32) throws(SystemError) -> Int32 {
    let r = retrying { fcntl(fd, F_DUPFD_CLOEXEC, 0) }
    if r < 0 { throw SystemError(errno: Glibc.errno, operation: "fcntl(F_DUPFD_CLOEXEC)") }
    return r
  }

  /// The environment variable `name`, or nil. The corresponding C function is `getenv`.
  package static func environment(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }

  /// Stops this process (SIGSTOP), for test hooks. The corresponding C function is `raise`.
  package static func stopSelf() { _ = raise(SIGSTOP) }

  /// Wall-clock milliseconds since 1970 (`CLOCK_REALTIME`, from the vDSO: no system
  /// call). Used to compute expiry times and timestamps.
  @inlinable @inline(__always)
  package static func wallClockMilliseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return milliseconds(ts)
  }

  /// "Now" for judging expiry on the read path: the coarse clock (a few nanoseconds
  /// cheaper) moved forward by its resolution plus 1 ms. The coarse clock lags real time
  /// by up to one tick, so without the slack an entry could be served a few ms after it
  /// expired; with it, an entry is treated as expired up to a tick early, never late.
  /// Out of line on purpose: its `timespec` on the stack would otherwise cost every
  /// caller's read path a stack-protector check, and it runs only for expiring entries.
  @inline(never)
  package static func expiryClockMilliseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME_COARSE, &ts)
    return milliseconds(ts) &+ coarseSlackMilliseconds
  }

  /// A clock reading in milliseconds, shifted by the test offset. A clock set before
  /// 1970 reads as 1970 (converting its negative seconds would trap).
  @inlinable @inline(__always)
  static func milliseconds(_ ts: timespec) -> UInt64 {
    let ms = Int64(ts.tv_sec) &* 1000 &+ Int64(ts.tv_nsec / 1_000_000) &+ clockOffsetMilliseconds
    return ms > 0 ? UInt64(ms) : 0
  }

  /// Added to every wall-clock reading: 0, except in a test process that plays a host
  /// whose clock is wrong (`TestClock`, set before any cache is opened).
  /// Unchecked for exclusive access: it is set once, by a test, before the clock is read,
  /// and the check was a runtime call on every reading (a write that evicts reads it).
  @exclusivity(unchecked) @usableFromInline nonisolated(unsafe) static var clockOffsetMilliseconds: Int64 = 0

  package static let coarseSlackMilliseconds: UInt64 = {
    var res = timespec()
    guard clock_getres(CLOCK_REALTIME_COARSE, &res) == 0 else { return 11 }
    let ns = UInt64(res.tv_sec) &* 1_000_000_000 &+ UInt64(res.tv_nsec)
    return min((ns + 999_999) / 1_000_000, 100) + 1
  }()

  /// Monotonic nanoseconds, for timeouts. The corresponding C function is `clock_gettime`.
  @inlinable @inline(__always)
  package static func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
  }
}
