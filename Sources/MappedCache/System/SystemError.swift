import Glibc

/// A failed system call: the errno it set and the operation that failed.
public struct SystemError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The `errno` value.
  public var errno: Int32
  /// What was being done, e.g. `"open /dev/shm/x.mcache"`.
  public var operation: String

  public init(errno: Int32, operation: String) {
    self.errno = errno
    self.operation = operation
  }

  /// The errno as a typed value with a readable name.
  public var code: Errno { Errno(rawValue: errno) }

  public var description: String {
    "\(operation): \(String(cString: strerror(errno))) (\(code.name), errno \(errno))"
  }
}

/// An `errno` value, with names for the ones MappedCache tells apart (as
/// apple/swift-system's `Errno` does). Compare with `==` against the named values.
public struct Errno: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
  public var rawValue: Int32
  public init(rawValue: Int32) { self.rawValue = rawValue }

  public static let interrupted = Errno(rawValue: EINTR)
  public static let wouldBlock = Errno(rawValue: EWOULDBLOCK)
  public static let resourceTemporarilyUnavailable = Errno(rawValue: EAGAIN)
  public static let permissionDenied = Errno(rawValue: EACCES)
  public static let readOnlyFileSystem = Errno(rawValue: EROFS)
  public static let tooManySymbolicLinks = Errno(rawValue: ELOOP)
  public static let noSpace = Errno(rawValue: ENOSPC)
  public static let fileTooLarge = Errno(rawValue: EFBIG)
  public static let diskQuotaExceeded = Errno(rawValue: EDQUOT)
  public static let noSuchFile = Errno(rawValue: ENOENT)
  public static let ioError = Errno(rawValue: EIO)

  /// The errno the calling thread's last failed C call set.
  static var current: Errno { Errno(rawValue: Glibc.errno) }

  /// The file system has no room for the file (full, too large, or over quota).
  public var isOutOfSpace: Bool { self == .noSpace || self == .fileTooLarge || self == .diskQuotaExceeded }
  /// A non-blocking lock request refused because another description holds the lock.
  var isLockConflict: Bool { self == .resourceTemporarilyUnavailable || self == .permissionDenied }

  /// The C name (`ENOSPC`, ...) where known, else `errno N`.
  public var name: String {
    switch rawValue {
    case EINTR: "EINTR"
    case EAGAIN: "EAGAIN"
    case EACCES: "EACCES"
    case EROFS: "EROFS"
    case ELOOP: "ELOOP"
    case ENOSPC: "ENOSPC"
    case EFBIG: "EFBIG"
    case EDQUOT: "EDQUOT"
    case ENOENT: "ENOENT"
    case EIO: "EIO"
    case EPERM: "EPERM"
    case EEXIST: "EEXIST"
    case EINVAL: "EINVAL"
    case ENOMEM: "ENOMEM"
    case EBADF: "EBADF"
    default: "errno \(rawValue)"
    }
  }

  public var description: String { "\(name): \(String(cString: strerror(rawValue)))" }
}
