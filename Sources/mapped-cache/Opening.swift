import Glibc
import MappedCache

/// Opens the cache a command names. Commands that only read open it read-only (nothing
/// in the file changes, not even the process table, and files of other owners or with
/// loose permissions are accepted: reading them is safe); commands that write open it
/// for writing with the library's default safety checks.
enum Opening {
  static func forReading(_ inv: Invocation) throws(CLIFailure) -> CacheFile {
    try open(inv, readOnly: true)
  }

  static func forWriting(_ inv: Invocation) throws(CLIFailure) -> CacheFile {
    try open(inv, readOnly: false)
  }

  private static func open(_ inv: Invocation, readOnly: Bool) throws(CLIFailure) -> CacheFile {
    let path = inv.argument("PATH")!
    var st = stat()
    if stat(path, &st) != 0 {
      if errno == ENOENT { throw .failed("\(path): no such file; make one with '\(Usage.tool) create \(path)'") }
    } else if (st.st_mode & S_IFMT) == S_IFDIR {
      throw .invalidCache("\(path) is a directory, not a MappedCache file")
    }
    // An inspection tool checks every value's checksum when it reads one. A command that
    // writes trusts a file of one of this user's groups (as `create --group` makes them).
    var policy =
      readOnly
      ? OpenPolicy(allowOtherOwner: true, allowGroupOrWorldWritable: true, verifyChecksumsOnRead: true)
      : OpenPolicy(verifyChecksumsOnRead: true)
    if !readOnly, stat(path, &st) == 0, Groups.callerBelongs(to: st.st_gid) {
      policy.sharedGroup = Groups.name(of: st.st_gid)
    }
    do {
      return try CacheFile(path: path, readOnly: readOnly, policy: policy)
    } catch {
      if case .corrupted(_, let why) = error {
        if creationWasInterrupted(path) {
          // What `SharedCache(path:)` would do: lay the file out again, then carry on.
          try takeOverInterruptedCreation(path, policy: policy)
          do { return try CacheFile(path: path, readOnly: readOnly, policy: policy) } catch { throw CLIFailure(error) }
        }
        // Opening checks only the header: a damaged header is beyond `verify --repair`.
        throw .invalidCache(
          "\(path) has a damaged header (\(why)); it cannot be repaired: remove the file and create it again")
      }
      if case .notACacheFile = error, stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_size == 0 {
        throw .invalidCache(
          "\(path) is empty, not a cache yet (a process creating it may have stopped before "
            + "writing anything); make it one with '\(Usage.tool) create \(path)'")
      }
      throw CLIFailure(error)
    }
  }

  /// The first bytes of a file whose creation never finished (the library's
  /// initialising marker, written before anything else and replaced by the magic last):
  /// its creator died, and the next process that opens it for writing lays it out again.
  static let creationMarker = Array("MCCINIT0".utf8)

  /// Whether `path` starts with `creationMarker` (read without locking; the library
  /// decides again under the creation lock).
  static func creationWasInterrupted(_ path: String) -> Bool {
    let fd = Glibc.open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var first = [UInt8](repeating: 0, count: creationMarker.count)
    let n = first.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
    return n == creationMarker.count && first == creationMarker
  }

  /// Redoes a creation that a process left unfinished, with the default options, as the
  /// library does when it opens such a file; says so on standard error. The library
  /// holds the creation lock while it checks and redoes it, so a creator that is still
  /// alive finishes first and its cache is kept.
  static func takeOverInterruptedCreation(_ path: String, policy: OpenPolicy) throws(CLIFailure) {
    do {
      let file = try CacheFile(creating: path, policy: policy)
      if file.wasCreated {
        Output.err(
          "note: \(path) had been left half-created by a process that stopped before finishing "
            + "(so it held no entries); created it afresh with the default options "
            + "(\(Units.bytes(file.info.capacity)); '\(Usage.tool) create' chooses others)")
      }
    } catch {
      throw .invalidCache(
        "\(path) was left half-created by a process that stopped before finishing, and cannot "
          + "be created afresh here (\(error)); it holds no entries: run '\(Usage.tool) create "
          + "\(path)' as a user who can write it")
    }
  }

  static func key(_ inv: Invocation) throws(CLIFailure) -> [UInt8] {
    let k = Array(inv.argument("KEY")!.utf8)
    if k.isEmpty { throw inv.usageError("KEY must not be empty") }
    return k
  }
}

/// The caller's groups, for commands that share a cache with a group.
enum Groups {
  /// Whether this process has `gid` as its effective or a supplementary group.
  static func callerBelongs(to gid: gid_t) -> Bool {
    if getegid() == gid { return true }
    let count = getgroups(0, nil)
    guard count > 0 else { return false }
    var groups = [gid_t](repeating: 0, count: Int(count))
    let n = getgroups(count, &groups)
    return n > 0 && groups.prefix(Int(n)).contains(gid)
  }

  /// The group's name, or its number when it has none (`OpenPolicy.sharedGroup` takes either).
  static func name(of gid: gid_t) -> String {
    var entry = group()
    var found: UnsafeMutablePointer<group>? = nil
    var buffer = [CChar](repeating: 0, count: 16 << 10)
    let rc = buffer.withUnsafeMutableBufferPointer { getgrgid_r(gid, &entry, $0.baseAddress, $0.count, &found) }
    return rc == 0 && found != nil ? String(cString: entry.gr_name) : "\(gid)"
  }
}
