import CacheTools
import Foundation
import TestSupport
import Testing

@testable import MappedCache

private let quantitySizes: [(String, Int)] = [
  ("4096", 4096), ("0", 0), ("512K", 512 << 10), ("512k", 512 << 10), ("512KiB", 512 << 10),
  ("512kib", 512 << 10), ("64M", 64 << 20), ("64MiB", 64 << 20), ("1.5G", 3 << 29), ("1.5GiB", 3 << 29),
  ("2 TiB", 2 << 40), (" 64m ", 64 << 20), ("100B", 100), ("1600KiB", 1600 << 10), ("0.5K", 512),
]

private let quantityDurations: [(String, Double)] = [
  ("30", 30), ("1.5", 1.5), ("250ms", 0.25), ("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86_400), ("0", 0),
  ("5 min", 300), ("1.5S", 1.5),
]

/// The size and duration parsers both tools share (CacheTools), and the two tools read
/// through them: the same spelling gives the same bytes in `mapped-cache` and in
/// `cache-stress`, and both refuse the same spellings with the same message.
@Suite struct ToolsQuantityTests {
  @Test(arguments: quantitySizes)
  func sizesArePowersOf1024(text: String, bytes: Int) throws {
    #expect(try ByteSize.parse(text) == bytes)
  }

  /// KB, MB, GB, TB: refused, naming both readings and the accepted units.
  @Test(arguments: [
    ("64MB", "64MiB", "64000000"), ("1kb", "1KiB", "1000"), ("2GB", "2GiB", "2000000000"),
    ("1.5TB", "1.5TiB", "1500000000000"),
  ])
  func decimalUnitsAreRefusedByName(text: String, binary: String, decimal: String) {
    #expect {
      _ = try ByteSize.parse(text)
    } throws: { error in
      let m = (error as? QuantityError)?.description ?? ""
      return m.contains("ambiguous") && m.contains(binary) && m.contains(decimal) && m.contains(ByteSize.units)
    }
  }

  @Test(arguments: [
    "", "  ", "-1", "-1M", "12XB", "12 parsecs", "1e3", "inf", "nan", "0x10", "1.2.3", ".", "M",
    "1.5", "99999999999T", "\u{663}K", "1M1", "64 M B",
  ])
  func malformedSizesAreRefused(text: String) {
    #expect(throws: QuantityError.self) { _ = try ByteSize.parse(text) }
  }

  @Test(arguments: quantityDurations)
  func durations(text: String, seconds: Double) throws {
    #expect(try DurationText.parse(text) == seconds)
  }

  @Test(arguments: ["", "-5", "soon", "1e9", "5y", "inf", "99999999999999d", "1..5s", "ms"])
  func malformedDurationsAreRefused(text: String) {
    #expect(throws: QuantityError.self) { _ = try DurationText.parse(text) }
  }

  @Test func versionLineComesFromTheConstants() {
    #expect(MappedCacheVersion.fileFormat == Int(Format.version))
    let parts = MappedCacheVersion.library.split(separator: ".")
    #expect(
      parts.count == 3 && parts.allSatisfy { Int($0) != nil }, "a semantic version: \(MappedCacheVersion.library)")
    #expect(ToolVersion.line(tool: "x") == "x \(MappedCacheVersion.library) (file format \(Format.version))")
  }

  // MARK: Both tools

  static let stress = TestFiles.binary("cache-stress")
  static let tool = TestFiles.binary("mapped-cache")

  /// The capacity `mapped-cache create --capacity text` gives a file, from `info --json`.
  func createdCapacity(_ text: String) throws -> Int {
    let path = TestFiles.tempPath("units")
    defer { TestFiles.cleanup(path) }
    let r = try ChildProcess.run(Self.tool, ["create", path, "--capacity", text], timeout: 30)
    #expect(r.status == 0, "create --capacity \(text): \(r.stderr)")
    let info = try ChildProcess.run(Self.tool, ["info", path, "--json"], timeout: 30)
    let j = try #require(try JSONSerialization.jsonObject(with: Data(info.stdout.utf8)) as? [String: Any])
    return try #require((j["capacity_bytes"] as? NSNumber)?.intValue)
  }

  /// The capacity a short `cache-stress --capacity text` run reports.
  func stressCapacity(_ text: String) throws -> Int {
    let path = TestFiles.tempPath("units-stress")
    defer { TestFiles.cleanup(path) }
    let r = try ChildProcess.run(
      Self.stress,
      [
        "--path", path, "--capacity", text, "--procs", "1", "--duration", "100ms", "--keys", "100",
        "--value-size", "32", "--json",
      ], timeout: 60)
    #expect(r.status == 0, "cache-stress --capacity \(text): \(r.stderr)")
    let j = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
    return try #require((j["capacity_bytes"] as? NSNumber)?.intValue)
  }

  @Test func bothToolsReadASizeAlike() throws {
    for text in ["1536K", "1.5MiB"] {
      #expect(try createdCapacity(text) == 1536 << 10, "mapped-cache \(text)")
      #expect(try stressCapacity(text) == 1536 << 10, "cache-stress \(text)")
    }
  }

  @Test func bothToolsRefuseDecimalUnitsAlike() throws {
    let path = TestFiles.tempPath("units-refused")
    defer { TestFiles.cleanup(path) }
    let a = try ChildProcess.run(Self.tool, ["create", path, "--capacity", "2MB"], timeout: 30)
    let b = try ChildProcess.run(Self.stress, ["--path", path, "--capacity", "2MB"], timeout: 30)
    for (name, r) in [("mapped-cache", a), ("cache-stress", b)] {
      #expect(r.status == 64, "\(name): \(r.status) \(r.stderr)")
      #expect(r.stderr.hasPrefix("error: --capacity: '2MB' is ambiguous: write 2MiB"), "\(name): \(r.stderr)")
      #expect(r.stderr.contains("2000000"), "\(name): \(r.stderr)")
      #expect(r.stderr.contains("usage: \(name)"), "\(name): \(r.stderr)")
      #expect(r.stdout.isEmpty)
    }
    #expect(!FileManager.default.fileExists(atPath: path))
  }

  @Test func bothToolsPrintTheVersionFromTheConstants() throws {
    for name in ["mapped-cache", "cache-stress"] {
      let r = try ChildProcess.run(TestFiles.binary(name), ["--version"], timeout: 30)
      #expect(r.status == 0)
      #expect(r.stdout == "\(name) \(MappedCacheVersion.library) (file format \(Format.version))\n")
      #expect(r.stderr.isEmpty)
    }
  }

  /// `verify --help` says what verify does: a lock-free pass first, the lock only for a
  /// second pass when the first found something.
  @Test func verifyHelpDescribesTheTwoPasses() throws {
    let r = try ChildProcess.run(Self.tool, ["verify", "--help"], timeout: 30)
    #expect(r.status == 0)
    #expect(r.stdout.contains("first without the write lock"))
    #expect(r.stdout.contains("second, exact pass"))
    #expect(!r.stdout.contains("Holds the write lock while it checks"))
  }

  /// Durations read alike too: `--duration` and `--ttl` of cache-stress take the units
  /// that `mapped-cache set --ttl` and `stats --watch` take.
  @Test func stressDurationsTakeUnits() throws {
    let path = TestFiles.tempPath("units-duration")
    defer { TestFiles.cleanup(path) }
    let r = try ChildProcess.run(
      Self.stress,
      [
        "--path", path, "--capacity", "2M", "--procs", "1", "--duration", "150ms", "--ttl", "2m", "--keys", "100",
        "--value-size", "32", "--json",
      ], timeout: 60)
    #expect(r.status == 0, "\(r.stderr)")
    let j = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
    #expect((j["duration_s"] as? NSNumber)?.doubleValue == 0.15)
    #expect((j["ttl_s"] as? NSNumber)?.doubleValue == 120)
    for bad in [["--duration", "5y"], ["--duration", "50ms"], ["--ttl", "-1"]] {
      let e = try ChildProcess.run(Self.stress, bad, timeout: 30)
      #expect(e.status == 64, "\(bad)")
      #expect(e.stderr.hasPrefix("error: \(bad[0])"), "\(bad): \(e.stderr)")
    }
  }
}
