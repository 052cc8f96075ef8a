import Foundation
import TestSupport
import Testing

@testable import MappedCache

/// Helpers of this target's tests (paths, binaries and child processes are TestSupport's:
/// `TestFiles`, `ChildProcess`).
enum Support {
  /// Runs `cache-stress` with `--json`: its exit status, its report and its stderr; a death
  /// by signal is a test failure.
  static func runStressJSON(_ args: [String], timeout: Double = 90) throws -> (
    status: Int32, json: [String: Any], stderr: String
  ) {
    let r = try ChildProcess.run(TestFiles.binary("cache-stress"), args + ["--json"], timeout: timeout)
    #expect(!r.signaled, "cache-stress died by signal \(r.status); stderr: \(r.stderr)")
    let json = try #require(
      try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], "no JSON: \(r.stderr)")
    return (r.status, json, r.stderr)
  }

  /// Runs `cache-stress --plant-corruption` with `args`: the run must fail, with the
  /// planted value counted as a corrupt read. Its stderr.
  static func expectPlantedCorruptionFails(_ args: [String]) throws -> String {
    let (status, j, err) = try runStressJSON(args + ["--plant-corruption"])
    #expect(status == 1)
    #expect(int(j, "corrupt_reads") > 0)
    #expect(j["passed"] as? Bool == false)
    return err
  }

  /// An integer of a JSON report (-1 when missing).
  static func int(_ j: [String: Any], _ key: String) -> Int { (j[key] as? NSNumber)?.intValue ?? -1 }

  /// Open descriptors of this process.
  static func openDescriptorCount() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
  }
}

extension SharedCache where Value: Codable {
  /// A new cache made with `options` (`adjust` changing them first) at a fresh temporary
  /// path (`TestFiles.tempPath(tag)`), and that path, which the test removes when done
  /// (`defer { TestFiles.cleanup(path) }`).
  static func scratch(
    _ tag: String, options: CacheOptions, adjust: (inout CacheOptions) -> Void = { _ in }
  ) throws -> (SharedCache, String) {
    var options = options
    adjust(&options)
    let path = TestFiles.tempPath(tag)
    do {
      return (try SharedCache(path: path, capacity: options.capacity, options: options), path)
    } catch {
      TestFiles.cleanup(path)
      throw error
    }
  }
}
