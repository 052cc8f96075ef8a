import Foundation
import Glibc
import MappedCache

/// Pausing a process that uses a cache, for fault drills (`cache-stress --plant-stale`,
/// the tests that stop a near cache's holder).
public enum ProcessControl {
  /// The state letter of process `pid` (`/proc/PID/stat`: "R", "S", "T" for stopped,
  /// ...), or nil when it is gone or the file cannot be read.
  public static func state(_ pid: Int32) -> Character? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
      let close = stat.lastIndex(of: ")")
    else { return nil }
    // "pid (comm) S ...": the command may hold spaces and parentheses, the state follows
    // the last ')'.
    return stat[stat.index(after: close)...].first { $0 != " " }
  }

  /// Stops `pid` (SIGSTOP) at a moment when it does not hold `file`'s write lock. A
  /// process stopped inside the lock holds up every writer of the file until it goes on
  /// (a live holder is never taken over), which is not what a drill that stops it means
  /// to cause; so one found inside is continued and stopped again 1 ms later, at most
  /// `attempts` times. Each stop is waited for (up to 100 ms): `kill` returns before
  /// the signal is delivered, and what the process holds is settled only once it stops.
  /// Returns how many stops found it inside the lock, or nil when every one did (it is
  /// then left running).
  public static func stopOutsideWriteLock(_ pid: Int32, of file: CacheFile, attempts: Int = 100) -> Int? {
    for attempt in 0..<attempts {
      kill(pid, SIGSTOP)
      for _ in 0..<100 where state(pid) != "T" { usleep(1000) }
      guard file.writeLockHolder?.pid == Int(pid) else { return attempt }
      kill(pid, SIGCONT)
      usleep(1000)
    }
    return nil
  }
}
