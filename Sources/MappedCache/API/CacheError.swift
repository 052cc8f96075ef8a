import Glibc
import SystemCalls

/// Every error MappedCache throws. Switch on the case; `description` says what to do.
public enum CacheError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The file exists but is not a MappedCache file. It was not modified.
  case notACacheFile(path: String)
  /// A MappedCache file of another format version or layout than this library reads.
  case incompatibleFormat(path: String, reason: String)
  /// The file was created for another value type.
  case typeMismatch(path: String, expected: String, found: String)
  /// Keys must hold at least one byte.
  case emptyKey
  /// The key is longer than the cache's key limit.
  case keyTooLarge(size: Int, limit: Int)
  /// The encoded value is larger than the cache's value limit.
  case valueTooLarge(size: Int, limit: Int)
  /// The stored bytes could not be decoded as the requested type. Nothing else was disturbed.
  case decodingFailed(key: String, reason: String)
  /// The value could not be encoded.
  case encodingFailed(reason: String)
  /// The file's contents break an invariant that automatic recovery cannot mend.
  case corrupted(path: String, reason: String)
  /// The cache was opened read-only (or the file is not writable) and a write was attempted.
  case readOnly(path: String)
  /// The path is refused for safety (a symlink, another owner, group- or world-writable).
  case unsafeFile(path: String, reason: String)
  /// The file at the path was replaced (a new inode) while this handle had the old one mapped.
  case fileReplaced(path: String)
  /// The file system is full: the cache's blocks could not be reserved.
  case diskFull(path: String, bytes: Int)
  /// Every process slot in the file's registration table is in use by a live process
  /// (a process's handles on one file share one slot); the table's size is fixed when the
  /// file is created (`CacheOptions.maxProcesses`).
  case tooManyProcesses(limit: Int)
  /// An argument is out of its documented range.
  case invalidArgument(String)
  /// `increment`/`decrement` found a value that is not an integer counter.
  case notAnInteger(key: String)
  /// A wait (for another process's compute) ran out of time.
  case timedOut(operation: String)
  /// A recent compute for the key failed and the caller asked for failures to be cached
  /// (negative caching): the failure is served until its own expiry.
  case computeFailed(key: String, reason: String)
  /// A system call failed.
  case system(SystemError)
  /// A remote tier (MappedCacheRedis) sent bytes that break its protocol or a configured
  /// limit (a wrong length, nesting too deep, a bulk larger than the value limit). The
  /// connection was closed; nothing local was changed.
  case protocolViolation(endpoint: String, reason: String)
  /// A remote tier could not be reached in time (connect refused or timed out, the
  /// connection lost, a reply late past the command timeout).
  case remoteUnavailable(endpoint: String, reason: String)
  /// A remote tier answered with an error reply (Redis `-ERR …`, `-WRONGTYPE …`, `-NOAUTH …`).
  case remoteError(endpoint: String, message: String)

  public var description: String {
    switch self {
    case .notACacheFile(let p):
      return "\(p) is not a MappedCache file (it was left untouched); choose another path or remove it"
    case .incompatibleFormat(let p, let why):
      return "\(p) is a MappedCache file this version cannot use (\(why)); remove it or open it with a matching version"
    case .typeMismatch(let p, let want, let found):
      return "\(p) holds values of type \(found), not \(want); open it with that type or use another path"
    case .emptyKey:
      return "a key must not be empty"
    case .keyTooLarge(let n, let limit):
      return
        "key of \(n) bytes exceeds the cache's limit of \(limit) bytes; shorten it (hash long keys) or create the cache with a larger maxKeySize"
    case .valueTooLarge(let n, let limit):
      return
        "value of \(n) bytes exceeds the cache's limit of \(limit) bytes; create the cache with a larger capacity or maxValueSize"
    case .decodingFailed(let k, let why):
      return "the value stored under \"\(k)\" could not be decoded (\(why)); remove the key or check the writer's type"
    case .encodingFailed(let why):
      return
        "the value could not be encoded (\(why)); check the type's encode(to:) or give it a CacheValueEncodable encoding"
    case .corrupted(let p, let why):
      return "\(p) is corrupted (\(why)); run `mapped-cache verify --repair \(p)` or recreate the cache"
    case .readOnly(let p):
      return "\(p) is open read-only; open it with write access to change it"
    case .unsafeFile(let p, let why):
      return "refusing \(p): \(why); fix the file's ownership or permissions, or opt in explicitly"
    case .fileReplaced(let p):
      return "\(p) was replaced by another file while mapped; open the cache again"
    case .diskFull(let p, let n):
      return "no space to reserve \(n) bytes for \(p)\(Self.spaceNote(p)); free space or choose a smaller capacity"
        + Self.sharedMemoryNote(p)
    case .tooManyProcesses(let n):
      return
        "all \(n) process slots of the cache are held by live processes (one per process, whatever its handles); create the file with a larger maxProcesses (max_processes in the C ABI and Python, mapped-cache create --max-processes; up to \(Format.Lock.largestTable))"
    case .invalidArgument(let why):
      return "invalid argument: \(why)"
    case .notAnInteger(let k):
      return
        "the value under \"\(k)\" is not an integer counter of this cache's type; remove the key or store an integer there first"
    case .timedOut(let what):
      return "timed out: \(what)"
    case .computeFailed(let k, let why):
      return
        "computing the value for \"\(k)\" failed recently (\(why)) and the failure is cached; wait for it to expire, or call removeCachedFailure(forKey:) to retry now"
    case .system(let e):
      return e.description
    case .protocolViolation(let ep, let why):
      return
        "\(ep) sent a malformed reply (\(why)); the connection was closed; check that it is a Redis server and the value limits"
    case .remoteUnavailable(let ep, let why):
      return "\(ep) is unavailable (\(why)); check that the server runs and is reachable, or raise the timeouts"
    case .remoteError(let ep, let msg):
      return "\(ep) answered with an error: \(msg)"
    }
  }
}

extension CacheError {
  /// The size and free space of the file system holding `path` (asked when the message
  /// is made: the file itself may be gone), or nothing when they cannot be had.
  static func spaceNote(_ path: String) -> String {
    let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
    guard let space = SystemCall.fileSystemSpace(directory.isEmpty ? "/" : directory) else { return "" }
    return " (the file system there holds \(roughBytes(space.size)), \(roughBytes(space.free)) of it free)"
  }

  /// For a file under /dev/shm: what sizes it in a container, where it is small.
  static func sharedMemoryNote(_ path: String) -> String {
    guard path.hasPrefix("/dev/shm/") else { return "" }
    return
      "; /dev/shm in a container is sized by `docker run --shm-size` (64 MiB unless set), and in Kubernetes by "
      + "an emptyDir volume with `medium: Memory` (and a `sizeLimit`) mounted at /dev/shm"
  }

  /// `bytes` in binary units, rounded down, keeping at least two digits.
  static func roughBytes(_ bytes: Int) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"]
    var n = bytes
    var unit = 0
    while n >= 10 * 1024, unit < units.count - 1 {
      n /= 1024
      unit += 1
    }
    return "\(n) \(units[unit])"
  }
}
