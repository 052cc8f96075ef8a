import Foundation
import MappedCache
import TestSupport
import Testing

/// Runs the built `cache-stress` binary (coordinator + re-executed worker processes) for a
/// second or two per test and checks its exit status and its JSON report.
@Suite struct StressTests {
  static let stress = TestFiles.binary("cache-stress")

  func runJSON(_ args: [String], timeout: TimeInterval = 60) throws -> (
    status: Int32, json: [String: Any], stderr: String
  ) {
    try Support.runStressJSON(args, timeout: timeout)
  }

  /// Runs cache-stress with `--json` and expects it to pass (exit 0): its report and stderr.
  func runPassing(_ args: [String]) throws -> (json: [String: Any], stderr: String) {
    let (status, json, stderr) = try runJSON(args)
    #expect(status == 0, "stderr: \(stderr)")
    return (json, stderr)
  }

  func int(_ j: [String: Any], _ key: String) -> Int { Support.int(j, key) }

  /// The fields every report carries, and their arithmetic.
  func expectConsistent(_ j: [String: Any]) {
    for key in [
      "procs", "threads", "duration_s", "ops", "ops_per_s", "entries", "get_ops", "set_ops", "hits",
      "misses", "hit_ratio", "get_p50_ns", "get_p99_ns", "get_p999_ns", "set_p50_ns", "set_p99_ns",
      "evictions", "expirations", "recoveries", "kills", "corrupt_reads", "wrong_values", "errors",
      "verify_ok", "capacity_bytes", "live_bytes", "lock_mode",
    ] {
      #expect(j[key] != nil, "report lacks \(key)")
    }
    #expect(int(j, "ops") == int(j, "get_ops") + int(j, "set_ops"))
    #expect(int(j, "hits") + int(j, "misses") == int(j, "get_ops"))
    #expect(int(j, "get_p50_ns") <= int(j, "get_p99_ns"))
    #expect(int(j, "get_p99_ns") <= int(j, "get_p999_ns"))
    #expect(int(j, "set_p50_ns") <= int(j, "set_p99_ns"))
    #expect(int(j, "live_bytes") <= int(j, "capacity_bytes"))
  }

  /// The keys a run stores are exactly the documented ones: `key:` and the index
  /// zero-padded to the key size when it fits (`key:00000042`, the peers' keys), the
  /// zero-padded index alone otherwise, for sizes formatted in registers (≤ 16 bytes)
  /// and longer ones.
  @Test(arguments: [(12, 3000), (16, 3000), (5, 3000), (7, 3000), (24, 3000), (19, 123_456)])
  func keysAreTheDocumentedBytes(size: Int, count: Int) throws {
    let path = TestFiles.tempPath("stress-keys")
    defer { TestFiles.cleanup(path) }
    _ = try runPassing([
      "--path", path, "--procs", "1", "--duration", "0.1", "--keys", "\(count)", "--key-size", "\(size)",
      "--capacity", "32MiB", "--value-size", "24", "--read-pct", "100", "--seed", "3",
    ])
    let digits = String(count - 1).count
    var want = Set<String>()
    for i in 0..<count {
      let n = String(i)
      let prefixed = size >= digits + 4
      want.insert((prefixed ? "key:" : "") + String(repeating: "0", count: size - (prefixed ? 4 : 0) - n.count) + n)
    }
    var seen = Set<String>()
    try CacheFile(path: path, readOnly: true).forEachEntry { e in
      seen.insert(String(decoding: e.key, as: UTF8.self))
      return true
    }
    #expect(seen.count == count)
    #expect(seen == want, "e.g. \(seen.subtracting(want).sorted().prefix(3))")
  }

  @Test func severalProcessesPassEveryCheck() throws {
    let path = TestFiles.tempPath("stress")
    defer { TestFiles.cleanup(path) }
    let (j, err) = try runPassing([
      "--path", path, "--procs", "3", "--threads", "2", "--duration", "2", "--keys", "5000",
      "--capacity", "16MiB", "--value-size", "24-200", "--read-pct", "80", "--seed", "42",
    ])
    expectConsistent(j)
    #expect(int(j, "procs") == 3)
    #expect(int(j, "threads") == 2)
    #expect(int(j, "capacity_bytes") == 16 << 20)
    #expect(int(j, "get_ops") > 1000)
    #expect(int(j, "set_ops") > 100)
    // Everything was prefilled and fits: a miss can only be a read that gave up waiting
    // on a slot whose writer was descheduled mid-write (3 processes × 2 threads on this
    // machine's cores, with the other suites running), which the cache counts apart.
    #expect(
      int(j, "misses") <= int(j, "busy_misses"),
      "misses that were not busy slots: \(int(j, "misses")) vs \(int(j, "busy_misses"))")
    if int(j, "busy_misses") > 0 { print("[stress] \(int(j, "busy_misses")) reads gave up on a busy slot") }
    #expect(int(j, "entries") == 5000)
    #expect(int(j, "corrupt_reads") == 0)
    #expect(int(j, "wrong_values") == 0)
    #expect(int(j, "errors") == 0)
    #expect(j["verify_ok"] as? Bool == true)
    #expect(j["lock_mode"] as? String == "word")
    #expect(j["seed"] as? String == "42")
    #expect(int(j, "get_p50_ns") > 0)
    // A second of progress lines on stderr, and the user's file is kept.
    #expect(err.contains("ops/s"))
    #expect(FileManager.default.fileExists(atPath: path))
  }

  @Test func chaosKillsAreSurvived() throws {
    let (j, err) = try runPassing([
      "--procs", "3", "--duration", "2.5", "--keys", "3000", "--capacity", "8MiB",
      "--read-pct", "20", "--chaos-kills", "4",
    ])
    expectConsistent(j)
    #expect(int(j, "kills") == 4)
    #expect(int(j, "corrupt_reads") == 0)
    #expect(int(j, "wrong_values") == 0)
    #expect(int(j, "errors") == 0)
    #expect(j["verify_ok"] as? Bool == true)
    #expect(int(j, "set_ops") > 0)
    #expect(err.contains("chaos: killed worker"))
  }

  /// Growers SIGKILLed among their steps (`--kill-growers`: every other growth, in a
  /// process of its own) while workers read, write and are killed too: nothing read is
  /// wrong, the next growth finishes what a killed one left, and the file verifies.
  @Test func growersKilledMidwayLoseNothing() throws {
    let (j, err) = try runPassing([
      "--procs", "2", "--duration", "4", "--keys", "20000", "--value-size", "24-400", "--capacity", "4MiB",
      "--read-pct", "70", "--grow-every", "0.4", "--grow-to", "64MiB", "--kill-growers", "--chaos-kills", "4",
      "--seed", "7",
    ])
    expectConsistent(j)
    #expect(int(j, "corrupt_reads") == 0)
    #expect(int(j, "wrong_values") == 0)
    #expect(int(j, "errors") == 0)
    #expect(j["verify_ok"] as? Bool == true)
    let growths = try #require(j["growths"] as? [[String: Any]])
    let killed = growths.filter { $0["killed"] as? Bool == true }
    let whole = growths.filter { $0["killed"] == nil }
    #expect(!killed.isEmpty, "no grower was killed: \(growths)")
    #expect(!whole.isEmpty, "no growth ran to its end: \(growths)")
    for g in growths {
      #expect(g["error"] == nil, "\(g)")
      #expect(int(g, "to_bytes") >= int(g, "from_bytes"))
    }
    // Every growth that ran to its end doubled the file (or reached the target), killed
    // ones or not before it.
    for g in whole { #expect(int(g, "to_bytes") > int(g, "from_bytes"), "\(g)") }
    #expect(int(j, "capacity_bytes") > 4 << 20)
    #expect(err.contains("its grower SIGKILLed midway"))
  }

  /// The checker cannot pass vacuously: one value with a wrong byte, written through
  /// the normal API, must be reported and fail the run.
  @Test func plantedCorruptionFailsTheRun() throws {
    let err = try Support.expectPlantedCorruptionFails([
      "--procs", "2", "--duration", "1", "--keys", "500", "--capacity", "4MiB", "--read-pct", "100",
    ])
    #expect(err.contains("corrupt_reads"))
  }

  /// Values of 8 bytes and more (the compact forms below 24) pass every check across
  /// processes, alone and mixed with the full form; a wrong byte in one is still caught.
  @Test(arguments: ["8", "8-40", "16"])
  func smallValuesPassEveryCheck(size: String) throws {
    let (j, _) = try runPassing([
      "--procs", "2", "--threads", "2", "--duration", "1", "--keys", "2000", "--capacity", "4MiB",
      "--value-size", size, "--read-pct", "70", "--seed", "5",
    ])
    expectConsistent(j)
    #expect(j["value_size"] as? String == size)
    #expect(int(j, "get_ops") > 1000)
    #expect(int(j, "set_ops") > 100)
    #expect(int(j, "corrupt_reads") == 0)
    #expect(int(j, "wrong_values") == 0)
    #expect(int(j, "errors") == 0)
    #expect(j["verify_ok"] as? Bool == true)
    #expect(j["passed"] as? Bool == true)
  }

  @Test func plantedCorruptionOfASmallValueFailsTheRun() throws {
    let err = try Support.expectPlantedCorruptionFails([
      "--procs", "1", "--duration", "0.5", "--keys", "500", "--capacity", "4MiB", "--read-pct", "100",
      "--value-size", "8",
    ])
    #expect(err.contains("corrupt_reads"))
  }

  @Test func readThroughMeasuresMissesAndEvicts() throws {
    // 20,000 keys of 300-600 bytes do not fit in 1 MiB, and a few thousand fills pass it
    // (so even a sanitizer build on a loaded machine evicts within the run): misses,
    // fills and evictions.
    let (j, _) = try runPassing([
      "--procs", "2", "--duration", "1.5", "--keys", "20000", "--capacity", "1MiB", "--read-through",
      "--read-pct", "100", "--dist", "zipf", "--lock", "flock", "--value-size", "300-600",
    ])
    expectConsistent(j)
    #expect(int(j, "misses") > 0)
    #expect(int(j, "hits") > 0)
    #expect(int(j, "set_ops") == int(j, "misses"), "read-through sets exactly the keys it missed")
    #expect(int(j, "evictions") > 0)
    #expect(j["lock_mode"] as? String == "flock")
    let ratio = try #require(j["hit_ratio"] as? Double)
    #expect(ratio > 0 && ratio < 1)
    #expect(int(j, "entries") < 20000)
  }

  /// Every key is prefilled and fits (the first test shows no misses then); with a
  /// short `--ttl` the prefilled values expire and reads miss.
  @Test func ttlExpiresPrefilledKeys() throws {
    let (j, _) = try runPassing([
      "--procs", "1", "--duration", "1.2", "--keys", "2000", "--capacity", "4MiB", "--read-pct", "100",
      "--dist", "uniform", "--ttl", "0.3",
    ])
    expectConsistent(j)
    #expect(j["ttl_s"] as? Double == 0.3)
    #expect(int(j, "misses") > 0, "reads after the expiry miss")
    #expect(int(j, "set_ops") == 0)
  }

  /// The benchmark's checking policy (`scripts/bench.sh`): the whole value on 1 read in 64,
  /// freshness for 1 key in 16; every read's header still checked, the run still clean.
  @Test func peersCheckingPolicyRunsClean() throws {
    let (j, _) = try runPassing([
      "--procs", "2", "--duration", "1", "--keys", "4000", "--capacity", "8MiB", "--value-size", "64",
      "--read-pct", "90", "--check-every", "64", "--track-every", "16", "--seed", "5",
    ])
    expectConsistent(j)
    #expect(int(j, "check_every") == 64)
    #expect(int(j, "track_every") == 16)
    #expect(int(j, "get_ops") > 1000)
    #expect(int(j, "corrupt_reads") == 0)
    #expect(int(j, "wrong_values") == 0)
    #expect(j["verify_ok"] as? Bool == true)
  }

  @Test(arguments: [
    ["--procs", "0"], ["--bogus"], ["--value-size", "7"], ["--value-size", "4-64"], ["--capacity", "64MB"],
    ["--dist", "pareto"], ["--capacity", "12XB"],
    ["--procs"], ["--read-pct", "101"], ["--key-size", "3"], ["--lock", "spin"], ["stray"],
    ["--check-every", "3"], ["--check-every", "0"], ["--track-every", "6"], ["--kill-growers"],
  ])
  func badFlagsExit64(_ args: [String]) throws {
    let r = try ChildProcess.run(Self.stress, args, timeout: 30)
    #expect(r.status == 64)
    #expect(r.stderr.hasPrefix("error: "))
    #expect(r.stderr.contains("usage: cache-stress"))
    #expect(r.stdout.isEmpty)
  }

  @Test func helpPrintsUsageAndExitsZero() throws {
    let r = try ChildProcess.run(Self.stress, ["--help"], timeout: 30)
    #expect(r.status == 0)
    #expect(r.stdout.contains("usage: cache-stress"))
    for flag in [
      "--path", "--capacity", "--procs", "--threads", "--duration", "--keys", "--key-size",
      "--value-size", "--read-pct", "--dist", "--zipf-theta", "--ttl", "--read-through",
      "--no-prefill", "--chaos-kills", "--seed", "--json", "--lock", "--track-every", "--check-every",
      "--report", "--version",
    ] {
      #expect(r.stdout.contains(flag), "help lacks \(flag)")
    }
    // Every option line states its default (the switches --help and --version aside).
    let options = r.stdout.split(separator: "\n").filter {
      $0.hasPrefix("  --") && !$0.hasPrefix("  --help") && !$0.hasPrefix("  --version")
    }
    #expect(options.count >= 20)
    for line in options {
      let entry = r.stdout.components(separatedBy: line)[1].components(separatedBy: "\n  --")[0]
      #expect((line + entry).contains("(default: "), "no default in: \(line)")
    }
    #expect(!r.stdout.contains("--worker-id"), "internal flags stay hidden")
    #expect(!r.stdout.contains("--grower-target"), "internal flags stay hidden")
    #expect(r.stderr.isEmpty)
  }
}
