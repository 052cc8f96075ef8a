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
    let policy = self.policy(path, readOnly: readOnly)
    do {
      return try CacheFile(path: path, readOnly: readOnly, policy: policy)
    } catch {
      if let unfinished = unfinishedCreation(path, error) { throw .invalidCache(unfinished) }
      if case .corrupted(_, let why) = error {
        // Opening checks only the header: a damaged header is beyond `verify --repair`.
        throw .invalidCache(
          "\(path) has a damaged header (\(why)); it cannot be repaired: remove the file and create it again")
      }
      throw CLIFailure(error)
    }
  }

  /// The policy a command opens with. An inspection tool checks every value's checksum
  /// when it reads one; a command that writes trusts a file of one of this user's
  /// groups (as `create --group` makes them).
  static func policy(_ path: String, readOnly: Bool) -> OpenPolicy {
    var policy =
      readOnly
      ? OpenPolicy(allowOtherOwner: true, allowGroupOrWorldWritable: true, verifyChecksumsOnRead: true)
      : OpenPolicy(verifyChecksumsOnRead: true)
    var st = stat()
    if !readOnly, stat(path, &st) == 0, Groups.callerBelongs(to: st.st_gid) {
      policy.sharedGroup = Groups.name(of: st.st_gid)
    }
    return policy
  }

  /// Opens `path` for writing, creating it with `options` when it is missing or an
  /// unfinished creation (`set` with creation options; an existing cache keeps its own
  /// parameters, as with `SharedCache(path:options:)`). A failed creation leaves no
  /// empty file of its own behind.
  static func forWriting(
    _ inv: Invocation, creating options: CacheOptions, typeName: String
  ) throws(CLIFailure) -> CacheFile {
    let path = inv.argument("PATH")!
    var st = stat()
    let existed = lstat(path, &st) == 0
    if existed, (st.st_mode & S_IFMT) == S_IFDIR {
      throw .invalidCache("\(path) is a directory, not a MappedCache file")
    }
    do {
      let file = try CacheFile(
        creating: path, options: options, typeName: typeName, policy: policy(path, readOnly: false))
      if file.wasCreated && existed {
        Output.err(
          "note: \(path) was an unfinished creation (a process creating it stopped before finishing, "
            + "so it held no entries); created it with the options given (\(Units.bytes(file.info.capacity)))")
      }
      return file
    } catch {
      if !existed, stat(path, &st) == 0, st.st_size == 0 { unlink(path) }
      if case .invalidArgument(let why) = error { throw inv.usageError(why) }
      throw CLIFailure(error)
    }
  }

  /// The first bytes of a file whose creation never finished (the library's
  /// initialising marker, written before anything else and replaced by the magic last).
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

  /// The message for a file that was never published as a cache: empty (its creator
  /// stopped before writing anything, or someone made an empty file) or still carrying
  /// the creation marker (its creator died midway). Nil for any other failure. Commands
  /// without creation options never lay such a file out: which capacity its creator
  /// meant is unknown, and whoever creates it next (`create`, `set` with creation
  /// options, or `SharedCache(path:)`) chooses.
  static func unfinishedCreation(_ path: String, _ error: CacheError) -> String? {
    var st = stat()
    guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
    let what: String
    switch error {
    case .notACacheFile where st.st_size == 0:
      what = "it is empty: a process creating it stopped before writing anything, or it was made empty"
    case .corrupted where creationWasInterrupted(path):
      what = "it still carries the creation marker: a process creating it was stopped or killed before it was done"
    default:
      return nil
    }
    return "\(path) is an unfinished creation (\(what)), so it holds no entries. Make it a cache with "
      + "'\(Usage.tool) create \(path) [--capacity SIZE ...]' or 'set' with creation options, which take it "
      + "over (as SharedCache(path:) does)"
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
