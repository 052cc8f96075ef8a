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
    // An inspection tool checks every value's checksum when it reads one.
    let policy = readOnly ? OpenPolicy(allowOtherOwner: true, allowGroupOrWorldWritable: true, verifyChecksumsOnRead: true)
                          : OpenPolicy(verifyChecksumsOnRead: true)
    do {
      return try CacheFile(path: path, readOnly: readOnly, policy: policy)
    } catch {
      if case .corrupted(_, let why) = error {
        // Opening checks only the header: a damaged header is beyond `verify --repair`.
        throw .invalidCache("\(path) has a damaged header (\(why)); it cannot be repaired: remove the file and create it again")
      }
      throw CLIFailure(error)
    }
  }

  static func key(_ inv: Invocation) throws(CLIFailure) -> [UInt8] {
    let k = Array(inv.argument("KEY")!.utf8)
    if k.isEmpty { throw inv.usageError("KEY must not be empty") }
    return k
  }
}
