import Glibc

/// A failed system call: the errno it set and the operation that failed.
public struct SystemError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The `errno` value.
  public var errno: Int32
  /// What was being done, e.g. `"open /dev/shm/x.mcache"`.
  public var operation: String

  /// An error for `operation` that failed with `errno`.
  public init(errno: Int32, operation: String) {
    self.errno = errno
    self.operation = operation
  }

  /// The errno as a typed value with a readable name.
  public var code: Errno { Errno(rawValue: errno) }

  public var description: String {
    "\(operation): \(code.message) (\(code.name), errno \(errno))"
  }
}

/// An `errno` value, with names for the ones MappedCache tells apart (as
/// apple/swift-system's `Errno` does). Compare with `==` against the named values.
public struct Errno: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
  /// The `errno` number.
  public var rawValue: Int32
  /// The error with this `errno` number.
  public init(rawValue: Int32) { self.rawValue = rawValue }

  /// `EINTR`: a call was interrupted by a signal (retried inside MappedCache).
  public static let interrupted = Errno(rawValue: EINTR)
  /// `EWOULDBLOCK`: a non-blocking call would have had to wait.
  public static let wouldBlock = Errno(rawValue: EWOULDBLOCK)
  /// `EAGAIN`: try again (on Linux the same number as `EWOULDBLOCK`).
  public static let resourceTemporarilyUnavailable = Errno(rawValue: EAGAIN)
  /// `EACCES`: the file's permissions refuse the access.
  public static let permissionDenied = Errno(rawValue: EACCES)
  /// `EROFS`: the file system is mounted read-only.
  public static let readOnlyFileSystem = Errno(rawValue: EROFS)
  /// `ELOOP`: the path is a symbolic link (MappedCache opens with `O_NOFOLLOW`).
  public static let tooManySymbolicLinks = Errno(rawValue: ELOOP)
  /// `ENOSPC`: the file system is full.
  public static let noSpace = Errno(rawValue: ENOSPC)
  /// `EFBIG`: the file would pass the size limit.
  public static let fileTooLarge = Errno(rawValue: EFBIG)
  /// `EDQUOT`: the user's disk quota is used up.
  public static let diskQuotaExceeded = Errno(rawValue: EDQUOT)
  /// `ENOENT`: no file at the path.
  public static let noSuchFile = Errno(rawValue: ENOENT)
  /// `EIO`: the device reported an I/O error.
  public static let ioError = Errno(rawValue: EIO)
  /// `EPERM`: the operation is not permitted (a signal to another user's process).
  public static let notPermitted = Errno(rawValue: EPERM)
  /// `ESRCH`: no such process.
  public static let noSuchProcess = Errno(rawValue: ESRCH)
  /// `EPIPE`: the other end of a pipe or socket is closed.
  public static let brokenPipe = Errno(rawValue: EPIPE)
  /// `EINPROGRESS`: a non-blocking connect has started and goes on.
  public static let inProgress = Errno(rawValue: EINPROGRESS)
  /// `EMFILE`: this process has no file descriptor left.
  public static let tooManyOpenFiles = Errno(rawValue: EMFILE)
  /// `ENFILE`: the system has no file descriptor left.
  public static let tooManyOpenFilesInSystem = Errno(rawValue: ENFILE)

  /// The errno the calling thread's last failed C call set.
  package static var current: Errno { Errno(rawValue: Glibc.errno) }

  /// The file system has no room for the file (full, too large, or over quota).
  public var isOutOfSpace: Bool { self == .noSpace || self == .fileTooLarge || self == .diskQuotaExceeded }
  /// A non-blocking lock request refused because another description holds the lock.
  package var isLockConflict: Bool { self == .resourceTemporarilyUnavailable || self == .permissionDenied }

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
    case ESRCH: "ESRCH"
    case EPIPE: "EPIPE"
    case EINPROGRESS: "EINPROGRESS"
    case EMFILE: "EMFILE"
    case ENFILE: "ENFILE"
    case ECONNREFUSED: "ECONNREFUSED"
    case ECONNRESET: "ECONNRESET"
    case ETIMEDOUT: "ETIMEDOUT"
    default: "errno \(rawValue)"
    }
  }

  /// The C library's sentence for it ("No such file or directory"). The corresponding
  /// C function is `strerror`.
  public var message: String { String(cString: strerror(rawValue)) }

  public var description: String { "\(name): \(message)" }
}
