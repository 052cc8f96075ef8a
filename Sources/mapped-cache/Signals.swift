import Glibc
import Synchronization
import SystemCalls

/// The tool never dies by a signal: SIGPIPE is ignored (main.swift), a bus error (the
/// file was truncated by someone else while mapped) becomes exit 3 with a message, and
/// `stats --watch` and `stats --serve` turn SIGINT and SIGTERM into a clean stop.
enum Signals {
  /// Set by SIGINT/SIGTERM once `installInterruptHandler` ran.
  static let interrupted = Atomic<Bool>(false)

  static func installBusErrorHandler() {
    SystemCall.handleSignals([SIGBUS]) { _ in
      // Only async-signal-safe calls: write(2) of a static string, then _exit(2).
      SystemCall.writeFromSignalHandler(
        2, "error: the cache file was truncated by another process while mapped (bus error)\n")
      SystemCall.exitFromSignalHandler(ExitCode.failure)
    }
  }

  static func installInterruptHandler() {
    _ = interrupted.load(ordering: .relaxed)  // initialise the global before any signal
    SystemCall.handleSignals([SIGINT, SIGTERM]) { _ in Signals.interrupted.store(true, ordering: .relaxed) }
  }

  /// Sleeps up to `seconds`, waking early when interrupted. Returns false if interrupted.
  static func sleep(_ seconds: Double) -> Bool {
    var left = seconds
    while left > 0 {
      if interrupted.load(ordering: .relaxed) { return false }
      let step = min(left, 0.05)
      SystemCall.sleep(microseconds: UInt32(step * 1_000_000))
      left -= step
    }
    return !interrupted.load(ordering: .relaxed)
  }
}
