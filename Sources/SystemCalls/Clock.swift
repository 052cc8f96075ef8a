import Glibc

/// The monotonic clock of this host (`CLOCK_MONOTONIC`), for timeouts, pacing and the
/// near cache's fence: one clock for every process of the machine, so a time one process
/// writes (a heartbeat, a run's start) means the same instant to every other. It never
/// jumps with the wall clock, and does not count time suspended.
@usableFromInline
package enum Clock {
  /// Nanoseconds.
  @inlinable @inline(__always)
  package static func nanoseconds() -> UInt64 { SystemCall.monotonicNanoseconds() }

  /// Milliseconds.
  package static func milliseconds() -> UInt64 { nanoseconds() / 1_000_000 }

  /// Seconds, as a `Double` (for deadlines in seconds).
  package static func seconds() -> Double { Double(nanoseconds()) / 1e9 }

  /// Milliseconds of the coarse clock (`CLOCK_MONOTONIC_COARSE`): the last tick's time,
  /// from the vDSO without reading the clock (a few ns); behind the precise clock by at
  /// most one tick, 1-10 ms.
  @inlinable @inline(__always)
  package static func coarseMilliseconds() -> UInt64 { SystemCall.monotonicCoarseMilliseconds() }

  /// Sleeps for `nanoseconds` (the whole time, whatever signals come).
  package static func sleep(nanoseconds ns: UInt64) { SystemCall.sleep(nanoseconds: ns) }
}

extension SystemCall {
  /// `CLOCK_MONOTONIC_COARSE` in milliseconds (see `Clock.coarseMilliseconds`). The
  /// corresponding C function is `clock_gettime`.
  @inlinable @inline(__always)
  package static func monotonicCoarseMilliseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
    return UInt64(ts.tv_sec) &* 1000 &+ UInt64(ts.tv_nsec) / 1_000_000
  }

  /// Sleeps for `ns` nanoseconds; a signal that interrupts the sleep does not shorten
  /// it. The corresponding C function is `nanosleep`.
  package static func sleep(nanoseconds ns: UInt64) {
    var ts = timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))
    var left = timespec()
    while nanosleep(&ts, &left) == -1 && Errno.current == .interrupted { ts = left }
  }
}
