import Glibc
import Synchronization

/// The tool never dies by a signal: SIGPIPE is ignored (main.swift), a bus error (the
/// file was truncated by someone else while mapped) becomes exit 3 with a message, and
/// `stats --watch` and `stats --serve` turn SIGINT and SIGTERM into a clean stop.
enum Signals {
  /// Set by SIGINT/SIGTERM once `installInterruptHandler` ran.
  static let interrupted = Atomic<Bool>(false)

  static func installBusErrorHandler() {
    var sa = sigaction()
    sa.__sigaction_handler.sa_handler = { _ in
      // Only async-signal-safe calls: write(2) of a static string, then _exit(2).
      let msg: StaticString = "error: the cache file was truncated by another process while mapped (bus error)\n"
      _ = write(2, msg.utf8Start, msg.utf8CodeUnitCount)
      _exit(ExitCode.failure)
    }
    sigemptyset(&sa.sa_mask)
    sigaction(SIGBUS, &sa, nil)
    unblock([SIGBUS])
  }

  /// A parent may start us with signals blocked (test runners and thread pools do, and
  /// the mask is inherited across exec): unblock the ones we handle.
  private static func unblock(_ signals: [Int32]) {
    var set = sigset_t()
    sigemptyset(&set)
    for s in signals { sigaddset(&set, s) }
    sigprocmask(SIG_UNBLOCK, &set, nil)
  }

  static func installInterruptHandler() {
    _ = interrupted.load(ordering: .relaxed)  // initialise the global before any signal
    var sa = sigaction()
    sa.__sigaction_handler.sa_handler = { _ in Signals.interrupted.store(true, ordering: .relaxed) }
    sigemptyset(&sa.sa_mask)
    sigaction(SIGINT, &sa, nil)
    sigaction(SIGTERM, &sa, nil)
    unblock([SIGINT, SIGTERM])
  }

  /// Sleeps up to `seconds`, waking early when interrupted. Returns false if interrupted.
  static func sleep(_ seconds: Double) -> Bool {
    var left = seconds
    while left > 0 {
      if interrupted.load(ordering: .relaxed) { return false }
      let step = min(left, 0.05)
      usleep(UInt32(step * 1_000_000))
      left -= step
    }
    return !interrupted.load(ordering: .relaxed)
  }
}
