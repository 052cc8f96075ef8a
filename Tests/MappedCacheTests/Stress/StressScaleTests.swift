import Foundation
import MappedCache
import TestSupport
import Testing

/// Issue 21, item 3: 64 processes × 4 threads (256 writers and readers on this machine's
/// 2 cores) with chaos kills, every one making progress. The short version runs in CI;
/// `MC_LONG=1` runs a longer one with many more kills.
@Suite(.serialized) struct StressScaleTests {
  static let stress = TestFiles.binary("cache-stress")
  static var long: Bool { ProcessInfo.processInfo.environment["MC_LONG"] == "1" }

  func int(_ j: [String: Any], _ key: String) -> Int { (j[key] as? NSNumber)?.intValue ?? -1 }

  /// Runs 64 × 4 with `kills` chaos kills over `seconds`, and checks what must hold
  /// however starved the machine is: no corrupt or stale read, no error, a clean
  /// verify, and every thread of every worker that was not killed completed
  /// operations. (A victim's next incarnation can become ready only after the end on a
  /// machine this oversubscribed, and it may die before its first flush; its threads
  /// are reported, not asserted.)
  func runScale(seconds: Double, kills: Int) throws {
    let path = TestFiles.tempPath("stress-scale")
    defer { TestFiles.cleanup(path) }
    let r = try ChildProcess.run(
      Self.stress,
      [
        "--path", path, "--procs", "64", "--threads", "4", "--duration", "\(seconds)", "--keys", "2000",
        "--capacity", "16MiB", "--value-size", "24-200", "--dist", "uniform", "--read-pct", "70",
        "--chaos-kills", "\(kills)", "--json",
      ], timeout: 300)
    #expect(!r.signaled, "cache-stress died by signal \(r.status); stderr: \(r.stderr.suffix(2000))")
    let object = try JSONSerialization.jsonObject(with: Data(r.stdout.utf8))
    let j = try #require(object as? [String: Any], "no JSON on stdout: \(r.stdout) / \(r.stderr.suffix(2000))")
    #expect(r.status == 0, "messages: \(j["messages"] ?? "")")
    #expect(int(j, "procs") == 64)
    #expect(int(j, "threads") == 4)
    #expect(int(j, "corrupt_reads") == 0)
    #expect(int(j, "wrong_values") == 0)
    #expect(int(j, "errors") == 0)
    #expect(j["verify_ok"] as? Bool == true)
    // The coordinator is one thread among 256 busy ones: it may fall behind its kill
    // schedule (kills due after the end are not made), but it kills.
    #expect(int(j, "kills") >= 1 && int(j, "kills") <= kills)
    #expect(int(j, "killed_workers") >= 1 && int(j, "killed_workers") <= int(j, "kills"))
    #expect(
      int(j, "min_thread_ops_unkilled") > 0,
      "a thread of a worker never killed completed no operation (\(int(j, "threads_without_ops")) threads without any)")
    #expect(int(j, "threads_without_ops") <= 4 * int(j, "killed_workers"))
    #expect(int(j, "set_ops") > 0 && int(j, "get_ops") > 0)
    print(
      "[stress-scale] 64×4, \(seconds) s: \(int(j, "ops")) ops, \(int(j, "kills")) of \(kills) kills, "
        + "fewest ops of a thread \(int(j, "min_thread_ops")) (never-killed workers: \(int(j, "min_thread_ops_unkilled"))), "
        + "threads without ops \(int(j, "threads_without_ops")), lock takeovers \(int(j, "lock_takeovers"))")
  }

  @Test func sixtyFourProcessesTimesFourThreadsAllProgressUnderChaos() throws {
    try runScale(seconds: 4, kills: 8)
  }

  @Test(.enabled(if: StressScaleTests.long, "MC_LONG=1 only"))
  func sixtyFourProcessesTimesFourThreadsLong() throws {
    try runScale(seconds: 60, kills: 200)
  }
}
