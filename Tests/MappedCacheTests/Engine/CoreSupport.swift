import CheckedValues
import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// Self-checking values, as written by `mc-test-helper writer`: the same type the helper
/// uses (Tests/CheckedValues), so writer and checker cannot drift apart.
typealias CoreValue = CheckedValue

/// `mc-test-helper` with `args`, started beside the test (its stdout: the "ready" line,
/// then the final JSON report).
func coreChild(_ args: [String]) throws -> ChildProcess {
  try ChildProcess(TestFiles.binary("mc-test-helper"), args)
}

extension ChildProcess.Result {
  /// The last line of stdout parsed as a JSON object of integers/bools.
  var report: [String: Any] {
    guard let last = stdout.split(separator: "\n").last,
      let obj = try? JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any]
    else { return [:] }
    return obj
  }

  /// An integer field of `report` (-1 when missing).
  func int(_ field: String) -> Int { (report[field] as? NSNumber)?.intValue ?? -1 }
}

extension SharedCache {
  /// The underlying engine's full check of every partition (lock-free), with its figures.
  func check() -> VerifyReport {
    var r = VerifyReport()
    let e = engine
    for p in 0..<e.layout.partitionCount {
      r.merge(
        Checker(part: e.partition(p), layout: e.layout, routing: e.routing(of: p)).inspect(checksums: true),
        partition: p, of: 1)
    }
    return r
  }
}

enum CoreOptions {
  /// Creation options for the two shapes the core tests run on: one partition (every
  /// key in one index and one pair of logs), or several (four, or as many as leave each
  /// at least 512 KiB), where keys spread over partitions, each with its own lock.
  static func make(partitioned: Bool, capacity: Int) -> CacheOptions {
    var o = CacheOptions(capacity: capacity)
    o.partitionCount = partitioned ? max(1, min(4, capacity / (512 << 10))) : 1
    return o
  }
}

/// A self-checking value of `size` bytes for `key`, the `seq`th that writer 0 stores.
func coreValue(_ key: String, _ size: Int, _ seq: Int = 1) -> [UInt8] {
  CoreValue.make(key: key, writer: 0, seq: seq, size: size)
}

/// Where `key`'s record starts in its log (nil when the key is not stored).
func recordOffset(_ c: SharedCache<[UInt8]>, _ key: String) throws -> Int? {
  try c.engine.entry(of: key)?.offset
}

/// Expects `verify` to find nothing wrong in the cache (what it found is the message).
func expectVerifies(_ c: SharedCache<[UInt8]>, sourceLocation: SourceLocation = #_sourceLocation) throws {
  let r = try c.verify()
  #expect(r.ok, "\(r.problems)", sourceLocation: sourceLocation)
}

/// Expects each key of `latest` to hold the value there or none (evicted); how many hold it.
@discardableResult
func expectLatestOrEvicted(
  _ c: SharedCache<[UInt8]>, _ latest: [String: [UInt8]], sourceLocation: SourceLocation = #_sourceLocation
) throws -> Int {
  var present = 0
  for (k, v) in latest {
    guard let got = try c.object(forKey: k) else { continue }
    #expect(got == v, "\(k)", sourceLocation: sourceLocation)
    present += 1
  }
  return present
}

/// A new cache of one of the two shapes (`CoreOptions.make`), `adjust` changing its
/// options first, at a fresh temporary path: the cache and the path, which the test
/// removes when done (`defer { TestFiles.cleanup(path) }`).
func coreCache(
  _ tag: String, partitioned: Bool = false, capacity: Int = 1 << 20, adjust: (inout CacheOptions) -> Void = { _ in }
) throws -> (SharedCache<[UInt8]>, String) {
  try SharedCache<[UInt8]>.scratch(
    tag, options: CoreOptions.make(partitioned: partitioned, capacity: capacity), adjust: adjust)
}

extension CacheEngine {
  /// `count` keys ("tag-0", "tag-1", ...: the first names that qualify) of partition
  /// `partition` whose first place is `place` (under the index's group count now), for
  /// tests that fill a bucket slot by slot.
  func keys(partition: Int = 0, first place: Place, count: Int, tag: String = "k") -> [String] {
    let groups = self.partition(partition).index.groups
    var out: [String] = []
    var i = 0
    while out.count < count {
      let k = "\(tag)-\(i)"
      i += 1
      let h = Array(k.utf8).withUnsafeBytes { KeyHash.key($0) }
      if partitionNumber(h) == partition && Placement(hash: h, groups: groups).first == place { out.append(k) }
    }
    return out
  }

  /// Where `key`'s entry is (its partition and slot), or nil.
  func slot(of key: String) throws -> (partition: Int, slot: BucketIndex.Slot)? {
    try Array(key.utf8).withUnsafeBytes { try _find($0).map { ($0.partition, $0.entry.at) } }
  }

  /// `key`'s entry, or nil.
  func entry(of key: String) throws -> BucketIndex.Entry? {
    try Array(key.utf8).withUnsafeBytes { try _find($0)?.entry }
  }
}
