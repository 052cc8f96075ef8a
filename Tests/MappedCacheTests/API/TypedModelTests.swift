import CheckedValues
import Foundation
import TestSupport
import Testing

@testable import MappedCache

/// Every typed operation against a dictionary model, on each way an entry can be stored:
/// all in log records, all inline in slots, and mixed (values of 0 to 300 bytes around
/// a 208-byte inline area, so entries move between slot and record as they change size).
/// The same seeded sequence runs on each; the cache must answer exactly as the model,
/// except that an expired entry may already be gone (making room, the writer removes
/// expired entries before it evicts anything: an expiration, not a loss).
@Suite struct TypedModelTests {
  enum Storage: String, CaseIterable { case records, inline, mixed }

  struct Entry {
    var value: [UInt8]
    var expired: Bool
    var expires: Bool
  }

  @Test(arguments: Storage.allCases) func everyOperationMatchesAModel(storage: Storage) throws {
    let path = TestFiles.tempPath("tm-\(storage.rawValue)")
    defer { TestFiles.cleanup(path) }
    var o = CacheOptions()
    switch storage {
    case .records: o.inlineEntrySize = 0
    case .inline: o.inlineEntrySize = 208
    case .mixed: o.averageEntrySize = 120
    }
    let c = try SharedCache<[UInt8]>(path: path, capacity: 4 << 20, options: o)
    var model: [String: Entry] = [:]
    var rng = SplitMix(0x70DE1 &+ UInt64(storage.rawValue.count))
    let past = Date(timeIntervalSinceNow: -10)
    func value() -> [UInt8] {
      let n = storage == .inline ? rng.below(150) : rng.below(301)
      let seed = UInt8(truncatingIfNeeded: rng.next())
      return (0..<n).map { seed &+ UInt8(truncatingIfNeeded: $0 &* 31) }
    }
    func expiry() -> (CacheExpiry, expired: Bool) {
      switch rng.below(8) {
      case 0: return (.date(past), true)
      case 1: return (.seconds(3600), false)
      default: return (.never, false)
      }
    }
    func live(_ k: String) -> [UInt8]? { model[k].flatMap { $0.expired ? nil : $0.value } }

    for step in 0..<12_000 {
      let key = "k\(rng.below(250))"
      let context = "step \(step), \(key)"
      switch rng.below(10) {
      case 0, 1:
        let v = value()
        let (e, expired) = expiry()
        try c.setObject(v, forKey: key, expires: e)
        model[key] = Entry(value: v, expired: expired, expires: e != .never)
      case 2:
        let v = value()
        let (e, expired) = expiry()
        let added = try c.add(v, forKey: key, expires: e)
        #expect(added == (live(key) == nil), "add, \(context)")
        if added { model[key] = Entry(value: v, expired: expired, expires: e != .never) }
      case 3:
        let v = value()
        let replaced = try c.replace(v, forKey: key)
        #expect(replaced == (live(key) != nil), "replace, \(context)")
        if replaced { model[key] = Entry(value: v, expired: false, expires: false) }
      case 4:
        let current = try c.objectWithVersion(forKey: key)
        #expect(current?.value == live(key), "objectWithVersion, \(context)")
        guard let current else { break }
        let v = value()
        let stale = rng.below(2) == 0
        let stored = try c.setObject(v, forKey: key, ifVersion: stale ? current.version &+ 1_000_000 : current.version)
        #expect(stored == !stale, "compare-and-swap (stale \(stale)), \(context)")
        if stored { model[key] = Entry(value: v, expired: false, expires: false) }
      case 5:
        let touched = try c.touch(key, expires: .seconds(7200))
        #expect(touched == (live(key) != nil), "touch, \(context)")
        if touched { model[key]!.expires = true }
      case 6:
        let removed = try c.removeObject(forKey: key)
        if model[key]?.expired != true { #expect(removed == (model[key] != nil), "remove, \(context)") }
        model[key] = nil
      case 7:
        let got = try c.objectAndExpiry(forKey: key)
        #expect(got?.value == live(key), "objectAndExpiry, \(context)")
        if let got, let m = model[key] {
          if case .never = got.expires {
            #expect(!m.expires, "expiry kind, \(context)")
          } else {
            #expect(m.expires, "expiry kind, \(context)")
          }
        }
      default:
        #expect(try c.object(forKey: key) == live(key), "object, \(context)")
      }
      if step % 3_000 == 2_999 {
        let liveKeys = model.filter { !$0.value.expired }.keys.sorted()
        #expect(c.allKeys.sorted() == liveKeys, "allKeys, step \(step)")
        #expect(
          try c.allObjects() == model.compactMapValues { $0.expired ? nil : $0.value }, "allObjects, step \(step)")
        let report = try c.verify()
        #expect(report.ok, "\(report.problems)")
        #expect(report.entries >= liveKeys.count && report.entries <= model.count, "entries, step \(step)")
      }
    }
    // Nothing was evicted, so the model is the whole truth; expired entries go on request.
    #expect(c.statistics.evictions == 0)
    var swept = 0
    for _ in 0..<8 { swept += try c.removeExpiredObjects() }
    #expect(swept <= model.values.filter(\.expired).count)
    #expect(c.statistics.entries == model.values.filter { !$0.expired }.count)
    let counts = Dictionary(grouping: model.values.filter { !$0.expired }) { $0.value.count <= 200 }
    print(
      "[typed] model (\(storage.rawValue)): \(c.statistics.entries) live entries (\(counts[true]?.count ?? 0) small), \(swept) expired swept, \(c.statistics.expirations) expirations in all (sweeps and making room)"
    )
  }
}
