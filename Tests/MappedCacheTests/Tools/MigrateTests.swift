import Foundation
import Glibc
import TestSupport
import Testing

@testable import MappedCache

/// A format-4 file built byte by byte from the layout `FormatFourReader` documents (one
/// index of slots and one pair of logs for the whole file): the fixture `migrate` reads.
/// Entries up to 16 bytes of key and value together are inline in their slot, as format 4
/// put them; larger ones are records in the log.
struct FormatFourFixture {
  struct Entry {
    var key: [UInt8]
    var value: [UInt8]
    /// Absolute wall-clock ms, 0 for never.
    var expiry: UInt64 = 0
  }

  var size = 2 << 20
  var slotCount = 4096
  var slotBytes = 64
  var maxKey = 250
  var maxValue = 64 << 10
  var procCount = 16
  var typeName = "bytes"

  /// The file's bytes, holding `entries`.
  func bytes(_ entries: [Entry], now: UInt64) -> [UInt8] {
    var b = [UInt8](repeating: 0, count: size)
    func put(_ o: Int, _ v: UInt64, _ n: Int) {
      for i in 0..<n { b[o + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt64(i))) }
    }
    let headerBytes = Format.align(Format.headerPage + procCount * Format.procEntryBytes, 4096)
    let ghostOffset = headerBytes + slotCount * slotBytes
    let ghostCount = 1024
    let logOffset = Format.align(ghostOffset + ghostCount * 4, 64)
    let small = 64 << 10
    let main = (size - logOffset - small) / 8 * 8
    put(0, Format.magic, 8)
    put(8, 4, 4)
    put(12, UInt64(headerBytes), 4)
    put(16, UInt64(size), 8)
    put(24, UInt64(slotCount), 8)
    put(32, UInt64(headerBytes), 8)
    put(40, UInt64(logOffset), 8)
    put(48, UInt64(small), 8)
    put(56, UInt64(main), 8)
    put(64, UInt64(ghostOffset), 8)
    put(72, UInt64(ghostCount), 8)
    put(80, UInt64(maxKey), 4)
    put(84, UInt64(maxValue), 4)
    put(88, KeyHash.bytes(Array(typeName.utf8)) | 1, 8)
    put(96, now, 8)
    put(104, UInt64(Format.headerPage), 8)
    put(112, UInt64(procCount), 4)
    put(116, UInt64(slotBytes), 4)
    put(120, KeyHash.bytes(b[0..<120]), 8)
    for (i, c) in typeName.utf8.enumerated() { b[128 + i] = c }
    var log = logOffset + small
    for e in entries {
      let hash = e.key.withUnsafeBytes { KeyHash.key($0) }
      let sum = e.value.withUnsafeBytes { KeyHash.checksum32($0, hash: hash) }
      var s = Int(truncatingIfNeeded: hash >> 1) % slotCount
      while b[(headerBytes + s * slotBytes + 8)..<(headerBytes + s * slotBytes + 16)].contains(where: { $0 != 0 }) {
        s = (s + 1) % slotCount
      }
      let slot = headerBytes + s * slotBytes
      put(slot + 8, hash, 8)
      let stamped = Expiry.stamp(e.expiry, now: now)
      if e.key.count + e.value.count <= slotBytes - 48 {
        put(slot + 24, stamped | 1 << 62, 8)
        put(slot + 32, UInt64(e.key.count), 2)
        put(slot + 34, UInt64(e.value.count), 2)
        put(slot + 36, UInt64(sum), 4)
        b.replaceSubrange((slot + 48)..<(slot + 48 + e.key.count), with: e.key)
        b.replaceSubrange((slot + 48 + e.key.count)..<(slot + 48 + e.key.count + e.value.count), with: e.value)
      } else {
        let recordSize = Format.align(32 + e.key.count + e.value.count, 8)
        put(slot + 16, UInt64(log), 8)
        put(slot + 24, stamped, 8)
        put(log, UInt64(recordSize), 4)
        put(log + 4, UInt64(e.key.count), 2)
        put(log + 6, 1, 2)
        put(log + 8, UInt64(e.value.count), 4)
        put(log + 12, UInt64(sum), 4)
        put(log + 16, hash, 8)
        b.replaceSubrange((log + 32)..<(log + 32 + e.key.count), with: e.key)
        b.replaceSubrange((log + 32 + e.key.count)..<(log + 32 + e.key.count + e.value.count), with: e.value)
        log += recordSize
      }
    }
    return b
  }

  /// Writes the file at `path`, mode 0600.
  func write(_ entries: [Entry], to path: String, now: UInt64) throws {
    let data = Data(bytes(entries, now: now))
    #expect(FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600]))
  }
}

/// `CacheFile.migrate` and `mapped-cache migrate`: every live entry of a format-4 file (or
/// of a current one) reaches a new file with its key, value and expiry; what is expired,
/// too large or damaged is left behind and counted; the source is never changed.
@Suite struct MigrateTests {
  static func entries(_ n: Int, now: UInt64) -> [FormatFourFixture.Entry] {
    (0..<n).map { i in
      let size = i % 3 == 0 ? 1 + i % 7 : 100 + i * 13 % 3000
      let value = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ i) }
      // Every 5th expires in an hour; every 11th expired a minute ago.
      let expiry: UInt64 = i % 11 == 0 ? now - 60_000 : i % 5 == 0 ? now + 3_600_000 : 0
      return .init(key: Array("key:\(i)".utf8), value: value, expiry: expiry)
    }
  }

  /// Writes a format-4 file of `n` entries (`entries`) at `path`, as of now: its entries
  /// and that time (milliseconds since 1970).
  static func writeFormatFour(_ n: Int, to path: String) throws -> (
    entries: [FormatFourFixture.Entry], now: UInt64
  ) {
    let now = UInt64(Date().timeIntervalSince1970 * 1000)
    let entries = Self.entries(n, now: now)
    try FormatFourFixture().write(entries, to: path, now: now)
    return (entries, now)
  }

  @Test func aFormatFourFileMigratesWithEveryLiveEntry() throws {
    let (old, new) = (TestFiles.tempPath("migrate-v4"), TestFiles.tempPath("migrate-v5"))
    defer { TestFiles.cleanup(old, new) }
    let (entries, now) = try Self.writeFormatFour(600, to: old)
    let before = try #require(FileManager.default.contents(atPath: old))
    // Format 4 is refused by the library, and names the way out.
    #expect {
      _ = try CacheFile(path: old)
    } throws: { error in
      guard case .incompatibleFormat(_, let reason)? = error as? CacheError else { return false }
      return reason.contains("mapped-cache migrate")
    }
    let report = try CacheFile.migrate(from: old, to: new) { $0.partitionCount = 2 }
    let expired = entries.filter { $0.expiry != 0 && $0.expiry < now }.count
    #expect(report.sourceFormat == 4)
    #expect(report.expired == expired)
    #expect(report.copied == entries.count - expired)
    #expect(report.damaged == 0 && report.tooLarge == 0)
    #expect(report.entries == report.copied)
    #expect(FileManager.default.contents(atPath: old) == before, "the source is only read")

    let file = try CacheFile(path: new)
    #expect(file.info.partitionCount == 2)
    #expect(file.info.valueTypeName == "bytes")
    #expect(file.info.capacity == 2 << 20 && file.info.maxKeySize == 250)
    #expect(try file.verify().ok)
    let cache = try SharedCache<[UInt8]>(path: new)
    for e in entries {
      let live = e.expiry == 0 || e.expiry > now
      #expect(try cache.object(forKey: String(decoding: e.key, as: UTF8.self)) == (live ? e.value : nil))
    }
    // Expiry comes across to the millisecond.
    var expiries: [String: UInt64] = [:]
    file.forEachEntry(values: false) { e in
      expiries[String(decoding: e.key, as: UTF8.self)] = e.expiryMilliseconds ?? 0
      return true
    }
    for e in entries where e.expiry == 0 || e.expiry > now {
      #expect(expiries[String(decoding: e.key, as: UTF8.self)] == e.expiry)
    }
  }

  @Test func damagedAndOversizedEntriesAreLeftBehindAndCounted() throws {
    let (old, new) = (TestFiles.tempPath("migrate-dmg"), TestFiles.tempPath("migrate-dmg-new"))
    defer { TestFiles.cleanup(old, new) }
    let now = UInt64(Date().timeIntervalSince1970 * 1000)
    var entries = (0..<40).map { i in
      FormatFourFixture.Entry(key: Array("k\(i)".utf8), value: [UInt8](repeating: UInt8(i), count: 200))
    }
    entries.append(.init(key: [UInt8](repeating: 0x61, count: 200), value: [1, 2, 3]))
    let fixture = FormatFourFixture()
    var bytes = fixture.bytes(entries, now: now)
    // Damage three records' values (their checksums no longer match) and one record's
    // offset (pointing past the log).
    var damagedSlots = 0
    let headerBytes = Format.align(Format.headerPage + fixture.procCount * Format.procEntryBytes, 4096)
    for s in 0..<fixture.slotCount where damagedSlots < 4 {
      let slot = headerBytes + s * fixture.slotBytes
      let hash = bytes[(slot + 8)..<(slot + 16)].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
      guard hash != 0 else { continue }
      let loc = Int(bytes[(slot + 16)..<(slot + 24)].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
      guard bytes[loc + 4] != 200 else { continue }  // not the entry with the long key
      if damagedSlots < 3 {
        bytes[loc + 32 + 5] ^= 0xFF
      } else {
        for i in 0..<8 { bytes[slot + 16 + i] = 0xEE }
      }
      damagedSlots += 1
    }
    #expect(FileManager.default.createFile(atPath: old, contents: Data(bytes), attributes: [.posixPermissions: 0o600]))
    let report = try CacheFile.migrate(from: old, to: new) { $0.maxKeySize = 100 }
    #expect(report.damaged == 4)
    #expect(report.tooLarge == 1, "the 200-byte key does not fit keys of 100")
    #expect(report.copied == entries.count - 5)
    #expect(try CacheFile(path: new).verify().ok)
  }

  @Test func aCurrentFileMigratesToAnotherSize() throws {
    let (old, new) = (TestFiles.tempPath("migrate-cur"), TestFiles.tempPath("migrate-cur-new"))
    defer { TestFiles.cleanup(old, new) }
    var o = CacheOptions(capacity: 4 << 20)
    o.partitionCount = 4
    let c = try SharedCache<String>(path: old, capacity: 4 << 20, options: o)
    for i in 0..<2000 { try c.setObject("value \(i)", forKey: "k\(i)", expires: i % 4 == 0 ? .seconds(3600) : .never) }
    let report = try CacheFile.migrate(from: old, to: new) {
      $0.capacity = 8 << 20
      $0.partitionCount = 1
    }
    #expect(report.sourceFormat == Format.version && report.copied == 2000 && report.entries == 2000)
    let n = try SharedCache<String>(path: new)
    #expect(n.capacity == 8 << 20)
    for i in 0..<2000 { #expect(try n.object(forKey: "k\(i)") == "value \(i)") }
    #expect(try c.object(forKey: "k7") == "value 7", "the source goes on")
  }

  @Test func badSourcesAndDestinationsGetClearErrors() throws {
    let (old, new, junk) = (
      TestFiles.tempPath("migrate-bad"), TestFiles.tempPath("migrate-bad-new"), TestFiles.tempPath("migrate-junk")
    )
    defer { TestFiles.cleanup(old, new, junk) }
    _ = try Self.writeFormatFour(10, to: old)
    // An existing destination is never touched.
    #expect(FileManager.default.createFile(atPath: new, contents: Data("keep me".utf8)))
    #expect(throws: CacheError.self) { try CacheFile.migrate(from: old, to: new) }
    #expect(FileManager.default.contents(atPath: new) == Data("keep me".utf8))
    TestFiles.cleanup(new)
    // Not a cache file.
    #expect(FileManager.default.createFile(atPath: junk, contents: Data(repeating: 7, count: 8192)))
    #expect {
      _ = try CacheFile.migrate(from: junk, to: new)
    } throws: { error in
      if case .notACacheFile? = error as? CacheError { return true }
      return false
    }
    // A truncated format-4 file: its geometry no longer checks out.
    let full = try #require(FileManager.default.contents(atPath: old))
    #expect(FileManager.default.createFile(atPath: junk, contents: full.prefix(1 << 20)))
    #expect {
      _ = try CacheFile.migrate(from: junk, to: new)
    } throws: { error in
      if case .corrupted? = error as? CacheError { return true }
      return false
    }
    // A header whose fingerprint does not match its fields.
    var forged = full
    forged[84] ^= 1
    #expect(FileManager.default.createFile(atPath: junk, contents: forged))
    #expect(throws: CacheError.self) { try CacheFile.migrate(from: junk, to: new) }
    #expect(!FileManager.default.fileExists(atPath: new), "a refused migration leaves no file")
  }

  @Test func theCommandMigratesAndReportsInJSON() throws {
    let (old, new) = (TestFiles.tempPath("migrate-cli"), TestFiles.tempPath("migrate-cli-new"))
    defer { TestFiles.cleanup(old, new) }
    let (entries, now) = try Self.writeFormatFour(100, to: old)
    let tool = TestFiles.binary("mapped-cache")
    let r = try ChildProcess.run(tool, ["migrate", old, new, "--partitions", "2", "--json"], timeout: 60)
    #expect(r.status == 0, "\(r.stderr)")
    let o = try #require(try JSONSerialization.jsonObject(with: r.stdoutData) as? [String: Any])
    let expired = entries.filter { $0.expiry != 0 && $0.expiry < now }.count
    #expect(o["source_format"] as? Int == 4)
    #expect(o["copied"] as? Int == entries.count - expired)
    #expect(o["expired"] as? Int == expired)
    let get = try ChildProcess.run(tool, ["get", new, "key:1"], timeout: 30)
    #expect(get.status == 0 && get.stdoutData == Data(entries[1].value))
    // A second run refuses to overwrite NEW (exit 3), and --type is refused (exit 64).
    #expect(try ChildProcess.run(tool, ["migrate", old, new], timeout: 30).status == 3)
    #expect(try ChildProcess.run(tool, ["migrate", old, new + ".x", "--type", "string"], timeout: 30).status == 64)
  }
}
