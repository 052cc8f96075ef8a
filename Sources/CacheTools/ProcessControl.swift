import Foundation
import Glibc
import MappedCache
import SystemCalls

/// Pausing a process that uses a cache, for fault drills (`cache-stress --plant-stale`,
/// the tests that stop a near cache's holder).
public enum ProcessControl {
  /// The state letter of process `pid` (`/proc/PID/stat`: "R", "S", "T" for stopped,
  /// ...), or nil when it is gone or the file cannot be read.
  public static func state(_ pid: Int32) -> Character? {
    SystemCall.processState(pid).map { Character(Unicode.Scalar($0)) }
  }

  /// Stops `pid` (SIGSTOP) at a moment when it does not hold `file`'s write lock. A
  /// process stopped inside the lock holds up every writer of the file until it goes on
  /// (a live holder is never taken over), which is not what a drill that stops it means
  /// to cause; so one found inside is continued and stopped again 1 ms later, at most
  /// `attempts` times. Each stop is waited for (up to 100 ms): `kill` returns before
  /// the signal is delivered, and what the process holds is settled only once it is
  /// stopped, so a try that does not see it stopped in time counts as a failed one.
  /// Returns how many tries failed before the one that stopped it outside the lock, or
  /// nil when none did (it is then left running) or the process is gone.
  public static func stopOutsideWriteLock(_ pid: Int32, of file: CacheFile, attempts: Int = 100) -> Int? {
    for attempt in 0..<attempts {
      guard (try? SystemCall.kill(pid, SIGSTOP)) != nil else { return nil }
      var s = state(pid)
      for _ in 0..<100 where s != nil && s != "T" {
        SystemCall.sleep(microseconds: 1000)
        s = state(pid)
      }
      guard s != nil else { return nil }
      if s == "T" && file.writeLockHolder?.pid != Int(pid) { return attempt }
      try? SystemCall.kill(pid, SIGCONT)
      SystemCall.sleep(microseconds: 1000)
    }
    return nil
  }
}
