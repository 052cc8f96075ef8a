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

  public var description: String {
    "\(operation): \(String(cString: strerror(errno))) (errno \(errno))"
  }
}
