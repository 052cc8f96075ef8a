import Glibc

extension SystemCall {
  /// Reads into `buffer`; returns how many bytes came, 0 at the end. `EAGAIN` (a
  /// non-blocking descriptor with nothing to read) is thrown for the caller to tell
  /// apart. The corresponding C function is `read`.
  package static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(SystemError) -> Int {
    let n = retrying { Glibc.read(fd, buffer.baseAddress, buffer.count) }
    if n < 0 { throw SystemError(errno: Glibc.errno, operation: "read") }
    return n
  }

  /// Writes all of `bytes` to `fd`, however many calls it takes (a non-blocking one that
  /// is full is tried again). The corresponding C function is `write`.
  package static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(SystemError) {
    var done = 0
    while done < bytes.count {
      let n = retrying { Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done) }
      if n < 0 {
        if Errno.current == .wouldBlock { continue }
        throw SystemError(errno: Glibc.errno, operation: "write")
      }
      done += n
    }
  }

  /// Whether `fd` is a terminal. The corresponding C function is `isatty`.
  package static func isTerminal(_ fd: Int32) -> Bool { isatty(fd) != 0 }

  /// Removes the name `path`. The corresponding C function is `unlink`.
  package static func unlink(_ path: String) throws(SystemError) {
    if Glibc.unlink(path) != 0 { throw SystemError(errno: Glibc.errno, operation: "unlink \(path)") }
  }

  /// Renames `from` to `to`, replacing what `to` named (atomically, on one file system).
  /// The corresponding C function is `rename`.
  package static func rename(_ from: String, to: String) throws(SystemError) {
    if Glibc.rename(from, to) != 0 { throw SystemError(errno: Glibc.errno, operation: "rename \(from)") }
  }

  /// Creates a private directory (mode 0700) named `prefix` and six random characters;
  /// returns its path. The corresponding C function is `mkdtemp`.
  package static func makeTemporaryDirectory(prefix: String) throws(SystemError) -> String {
    var template = Array((prefix + "XXXXXX").utf8CString)
    let made: String? = template.withUnsafeMutableBufferPointer { p in
      mkdtemp(p.baseAddress!).map { String(cString: $0) }
    }
    guard let made else { throw SystemError(errno: Glibc.errno, operation: "mkdtemp \(prefix)XXXXXX") }
    return made
  }

  /// Whether this process may access `path` as `mode` asks (`R_OK`, `W_OK`, `X_OK`),
  /// judged with its real ids. The corresponding C function is `access`.
  package static func isAccessible(_ path: String, _ mode: Int32) -> Bool { access(path, mode) == 0 }

  /// The UTC calendar time of `seconds` since 1970, or nil when it is out of range. The
  /// corresponding C function is `gmtime_r`.
  package static func utcTime(_ seconds: Int) -> tm? {
    var t = time_t(seconds)
    var out = tm()
    return gmtime_r(&t, &out) == nil ? nil : out
  }
}
