import Glibc

/// Buffered writes to standard output and unbuffered ones to standard error, with
/// `write(2)` directly: no stdio buffering to lose on exit, and a closed pipe (SIGPIPE
/// is ignored, see main.swift) becomes a clean exit 3 instead of a death by signal.
enum Output {
  nonisolated(unsafe) private static var buffer: [UInt8] = []
  private static let flushThreshold = 1 << 16

  static func out(_ s: String) {
    buffer.append(contentsOf: s.utf8)
    if buffer.count >= flushThreshold { flush() }
  }

  static func line(_ s: String = "") { out(s + "\n") }

  static func bytes(_ b: [UInt8]) {
    buffer.append(contentsOf: b)
    if buffer.count >= flushThreshold { flush() }
  }

  /// Writes what is buffered. On a closed pipe or another write error, reports it
  /// and exits 3 (the reader is gone: there is no one left to tell but stderr).
  static func flush() {
    guard !buffer.isEmpty else { return }
    let ok = buffer.withUnsafeBytes { writeAll(1, $0) }
    buffer.removeAll(keepingCapacity: true)
    if !ok {
      let why =
        errno == EPIPE
        ? "standard output was closed before all output was written"
        : "cannot write to standard output: \(String(cString: strerror(errno)))"
      err("error: \(why)")
      exit(ExitCode.failure)
    }
  }

  static func err(_ s: String) {
    let line = s.hasSuffix("\n") ? s : s + "\n"
    var b = Array(line.utf8)
    _ = b.withUnsafeMutableBytes { writeAll(2, UnsafeRawBufferPointer($0)) }
  }

  private static func writeAll(_ fd: Int32, _ p: UnsafeRawBufferPointer) -> Bool {
    var done = 0
    while done < p.count {
      let n = write(fd, p.baseAddress! + done, p.count - done)
      if n < 0 {
        if errno == EINTR || errno == EAGAIN { continue }
        return false
      }
      done += n
    }
    return true
  }
}
