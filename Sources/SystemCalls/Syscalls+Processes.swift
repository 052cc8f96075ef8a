import Glibc

extension SystemCall {
  /// The parent's process id (1, or a subreaper's, once the parent died). The
  /// corresponding C function is `getppid`.
  package static func parentProcessID() -> Int32 { getppid() }

  /// Sends `signal` to process `pid`. The corresponding C function is `kill`.
  package static func kill(_ pid: Int32, _ signal: Int32) throws(SystemError) {
    if Glibc.kill(pid, signal) != 0 { throw SystemError(errno: Glibc.errno, operation: "kill \(pid)") }
  }

  /// Whether process `pid` exists (another user's too: `EPERM` means it does). 0 and
  /// negative pids (process groups) are never alive. The corresponding C function is
  /// `kill` with signal 0.
  package static func isProcessAlive(_ pid: Int32) -> Bool {
    pid > 0 && (Glibc.kill(pid, 0) == 0 || Errno.current == .notPermitted)
  }

  /// The state letter of process `pid` as `/proc/PID/stat` gives it (`R` running, `S`
  /// sleeping, `D` in the kernel, `T` stopped, `t` stopped by a tracer, `Z` exited, ...),
  /// or nil when it is gone or the file cannot be read. The path and the line are made
  /// in one stack buffer.
  package static func processState(_ pid: Int32) -> UInt8? {
    guard pid > 0 else { return nil }
    return withUnsafeTemporaryAllocation(byteCount: 512, alignment: 8) { buffer -> UInt8? in
      // "/proc/", the pid's digits (at most 10), "/stat" and a terminator.
      var at = 0
      func append(_ byte: UInt8) {
        buffer[at] = byte
        at += 1
      }
      "/proc/".utf8.forEach(append)
      var divisor: Int32 = 1
      while pid / divisor >= 10 { divisor *= 10 }
      while divisor > 0 {
        append(UInt8(ascii: "0") + UInt8(pid / divisor % 10))
        divisor /= 10
      }
      "/stat".utf8.forEach(append)
      append(0)
      let fd = Glibc.open(buffer.baseAddress!.assumingMemoryBound(to: CChar.self), O_RDONLY | O_CLOEXEC)
      guard fd >= 0 else { return nil }
      defer { _ = Glibc.close(fd) }
      let n = Glibc.read(fd, buffer.baseAddress!, buffer.count)
      guard n > 0 else { return nil }
      // "pid (comm) S ...": the command may hold spaces and parentheses, so the state is
      // the first letter after the last ')'.
      let line = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
      guard let close = line.lastIndex(of: UInt8(ascii: ")")) else { return nil }
      return line[(close + 1)...].first { $0 != UInt8(ascii: " ") }
    }
  }

  /// This host's name, or nil when it cannot be read. The corresponding C function is
  /// `gethostname`.
  package static func hostName() -> String? {
    var name = [UInt8](repeating: 0, count: 256)
    // 255 of 256 bytes: the last stays 0 even where a long name is cut without one.
    let ok = name.withUnsafeMutableBufferPointer { b in
      b.baseAddress!.withMemoryRebound(to: CChar.self, capacity: b.count) { gethostname($0, 255) == 0 }
    }
    return ok ? String(decoding: name.prefix { $0 != 0 }, as: UTF8.self) : nil
  }

  /// Ends the process with `status` (atexit handlers and stdio flushing run). The
  /// corresponding C function is `exit`.
  package static func exit(_ status: Int32) -> Never { Glibc.exit(status) }

  // MARK: Signals

  /// Ignores `signal` from now on (and in programs this one execs). The corresponding C
  /// function is `signal` with `SIG_IGN`.
  package static func ignoreSignal(_ signal: Int32) { _ = Glibc.signal(signal, SIG_IGN) }

  /// Runs `handler` on `signals` (an empty mask, no flags), and unblocks them: a parent
  /// may start a process with signals blocked (test runners and thread pools do, and the
  /// mask is inherited across exec). The handler may only make async-signal-safe calls
  /// (`writeFromSignalHandler`, `exitFromSignalHandler`, atomic stores). The
  /// corresponding C functions are `sigaction` and `sigprocmask`.
  package static func handleSignals(_ signals: [Int32], with handler: @convention(c) (Int32) -> Void) {
    var sa = sigaction()
    sa.__sigaction_handler.sa_handler = handler
    sigemptyset(&sa.sa_mask)
    for s in signals { sigaction(s, &sa, nil) }
    var set = sigset_t()
    sigemptyset(&set)
    for s in signals { sigaddset(&set, s) }
    sigprocmask(SIG_UNBLOCK, &set, nil)
  }

  /// Writes `message` to `fd` once, from a signal handler: no allocation, no lock, no
  /// retry. The corresponding C function is `write`.
  package static func writeFromSignalHandler(_ fd: Int32, _ message: StaticString) {
    _ = Glibc.write(fd, message.utf8Start, message.utf8CodeUnitCount)
  }

  /// Ends the process at once, from a signal handler (no atexit handlers, no flushing).
  /// The corresponding C function is `_exit`.
  package static func exitFromSignalHandler(_ status: Int32) -> Never { _exit(status) }
}

extension SystemCall {
  /// The name of group `gid`, or nil when it has none. The corresponding C function is
  /// `getgrgid_r`.
  package static func groupName(of gid: gid_t) -> String? {
    var entry = group()
    var found: UnsafeMutablePointer<group>? = nil
    var buffer = [CChar](repeating: 0, count: 16 << 10)
    let rc = buffer.withUnsafeMutableBufferPointer { getgrgid_r(gid, &entry, $0.baseAddress, $0.count, &found) }
    return rc == 0 && found != nil ? String(cString: entry.gr_name) : nil
  }
}
