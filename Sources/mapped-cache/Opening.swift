import Glibc
import MappedCache
import SystemCalls

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
    if let st = SystemCall.statIfPresent(path) {
      if (st.st_mode & S_IFMT) == S_IFDIR { throw .invalidCache("\(path) is a directory, not a MappedCache file") }
    } else if Errno.current == .noSuchFile {
      throw .failed("\(path): no such file; make one with '\(Usage.tool) create \(path)'")
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
    if !readOnly, let group = OpenPolicy.callersGroup(ofFileAt: path) { policy.sharedGroup = group }
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
    let existing = SystemCall.lstatIfPresent(path)
    if let st = existing, (st.st_mode & S_IFMT) == S_IFDIR {
      throw .invalidCache("\(path) is a directory, not a MappedCache file")
    }
    do {
      let file = try CacheFile(
        creating: path, options: options, typeName: typeName, policy: policy(path, readOnly: false))
      if file.wasCreated && existing != nil {
        Output.err(
          "note: \(path) was an unfinished creation (a process creating it stopped before finishing, "
            + "so it held no entries); created it with the options given (\(Units.bytes(file.info.capacity)))")
      }
      return file
    } catch {
      if case .invalidArgument(let why) = error { throw inv.usageError(why) }
      throw CLIFailure(error)
    }
  }

  /// The message for a file that was never published as a cache: empty (its creator
  /// stopped before writing anything, or someone made an empty file) or still carrying
  /// the creation marker (its creator died midway), as the library tells them
  /// (`CacheFile.unfinishedCreation(at:)`). Nil for any other failure. Commands without
  /// creation options never lay such a file out: which capacity its creator meant is
  /// unknown, and whoever creates it next (`create`, `set` with creation options, or
  /// `SharedCache(path:)`) chooses.
  static func unfinishedCreation(_ path: String, _ error: CacheError) -> String? {
    let what: String
    switch (error, CacheFile.unfinishedCreation(at: path)) {
    case (.notACacheFile, .empty?):
      what = "it is empty: a process creating it stopped before writing anything, or it was made empty"
    case (.corrupted, .interrupted?):
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
