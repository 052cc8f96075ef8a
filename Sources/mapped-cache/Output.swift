import Glibc
import SystemCalls

/// Buffered writes to standard output and unbuffered ones to standard error, with
/// `write(2)` directly (`SystemCall.writeAll`): no stdio buffering to lose on exit, and a closed pipe (SIGPIPE
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
    let failure = buffer.withUnsafeBytes { b in Result { () throws(SystemError) in try SystemCall.writeAll(1, b) } }
    buffer.removeAll(keepingCapacity: true)
    if case .failure(let e) = failure {
      let why =
        e.code == .brokenPipe
        ? "standard output was closed before all output was written"
        : "cannot write to standard output: \(e.code.message)"
      err("error: \(why)")
      SystemCall.exit(ExitCode.failure)
    }
  }

  static func err(_ s: String) {
    let line = s.hasSuffix("\n") ? s : s + "\n"
    _ = Array(line.utf8).withUnsafeBytes { b in Result { () throws(SystemError) in try SystemCall.writeAll(2, b) } }
  }
}
